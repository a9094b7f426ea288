"""A blocking publish's ticket (nsqclient.sync.ticket): one state, changed only by its own
transitions, each under the window lock, counted once.

A hypothesis machine drives tickets and their window through every order of events; a test
scheduler (tests/sync/interleave.py) runs the transitions that race in real threads, one line
at a time, in every order up to a depth, and each race test also runs against the same code
with the window lock taken away, where it must find the race (so it would catch one).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nsqclient.aio import window as window_module
from nsqclient.aio.window import Window
from nsqclient.errors import NotSentTimeoutError, NSQTimeoutError
from nsqclient.sync import ticket as ticket_module
from nsqclient.sync.ticket import DONE, QUEUED, SENT, Ticket, claim_all

from .interleave import every_schedule, run

pytestmark = pytest.mark.timeout(120)

LIMIT = 3


def _window() -> Window:
    import threading

    w = Window(LIMIT)
    w.share(threading.Lock(), lambda: None)
    return w


class _Waker:
    def __init__(self) -> None:
        self.woken = 0

    def wake(self) -> None:
        self.woken += 1


class TicketMachine(RuleBasedStateMachine):
    """Tickets of one window through takes, claims, withdrawals, replies, cancellations."""

    def __init__(self) -> None:
        super().__init__()
        self.window = _window()
        self.tickets: list[Ticket] = []
        self.claimed: set[int] = set()  # tickets some writer was given to write
        self.outcome: dict[int, BaseException | None] = {}  # what each caller saw
        self.history: dict[int, list[Any]] = {}

    def _ticket(self, i: int) -> Ticket:
        return self.tickets[i % len(self.tickets)]

    @rule(deadline=st.sampled_from([0.0, 1e9]))
    def new_ticket(self, deadline: float) -> None:
        t = Ticket(b"PUB t\n...", 1, deadline, self.window, None)
        self.tickets.append(t)
        self.history[id(t)] = [t.state]

    @precondition(lambda self: self.tickets)
    @rule(i=st.integers(0, 50))
    def take_a_slot(self, i: int) -> None:
        t = self._ticket(i)
        if t.state is QUEUED and not t.slot:
            self.window.take(t)

    @precondition(lambda self: self.tickets)
    @rule(i=st.integers(0, 50))
    def a_writer_claims(self, i: int) -> None:
        t = self._ticket(i)
        ended: list[Ticket] = []
        was = t.state
        claimed = claim_all([t], 1.0, ended)
        if claimed:
            assert was is QUEUED and t.deadline > 1.0
            self.claimed.add(id(t))
        if ended:
            assert isinstance(t.error, NotSentTimeoutError) and t.error.sent is False

    @precondition(lambda self: self.tickets)
    @rule(i=st.integers(0, 50))
    def the_caller_gives_up(self, i: int) -> None:
        t = self._ticket(i)
        error = t.withdraw(NotSentTimeoutError("never sent"))
        self.outcome.setdefault(id(t), error)
        assert self.outcome[id(t)] is error  # the same outcome each time it is asked

    @precondition(lambda self: self.tickets)
    @rule(i=st.integers(0, 50), ok=st.booleans())
    def the_reply_or_a_failure_comes(self, i: int, ok: bool) -> None:
        t = self._ticket(i)
        t.settle(None if ok else NSQTimeoutError("cut"))

    @precondition(lambda self: self.tickets)
    @rule(i=st.integers(0, 50))
    def a_future_is_cancelled(self, i: int) -> None:
        t = self._ticket(i)
        was = t.state
        if t.cancelled():
            assert was is QUEUED

    @invariant()
    def states_only_move_forward(self) -> None:  # 1
        order = {QUEUED: 0, SENT: 1, DONE: 2}
        for t in self.tickets:
            seen = self.history[id(t)]
            if seen[-1] is not t.state:
                seen.append(t.state)
            assert [order[s] for s in seen] == sorted(order[s] for s in seen)

    @invariant()
    def never_sent_means_never_claimed(self) -> None:  # 2
        for t in self.tickets:
            if t.state is DONE and getattr(t.error, "sent", None) is False:
                assert id(t) not in self.claimed

    @invariant()
    def each_counted_once_and_slots_exact(self) -> None:  # 3
        w = self.window
        done = [t for t in self.tickets if t.state is DONE]
        assert w.published + w.failed == len(done)
        assert w.published == sum(1 for t in done if t.error is None)
        assert w.used == sum(1 for t in self.tickets if t.slot)
        assert all(not t.slot for t in done)
        assert 0 <= w.used <= LIMIT


TestTicket = TicketMachine.TestCase
TestTicket.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)


# -- races, in real threads, every interleaving up to a depth --


class _NoLock:
    """A lock that locks nothing (the race a test is about)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        return None

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc_info: object) -> None:
        return None


@contextlib.contextmanager
def _no_window_lock() -> Any:
    """The same code, the window lock taken away (a no-op): the race a test is about."""
    original = Window.share

    def share(self: Window, lock: Any, notify: Any) -> None:
        original(self, _NoLock(), notify)

    Window.share = share  # type: ignore[method-assign]
    try:
        yield
    finally:
        Window.share = original  # type: ignore[method-assign]


def _claim_against_withdraw(schedule: tuple[int, ...]) -> str | None:
    """A writer claims a ticket while its thread gives up on it; what went wrong, if
    anything (the caller told "never sent" of a ticket a writer went on to write)."""
    window = _window()
    t = Ticket(b"PUB t\n...", 1, time.monotonic() + 60, window, None)
    window.take(t)
    ended: list[Ticket] = []
    claimed, error = run(
        [lambda: claim_all([t], time.monotonic(), ended), lambda: t.withdraw(_never_sent())],
        schedule,
        [ticket_module, window_module],
    )
    if claimed and error is not None and error.sent is False:
        return f"written, yet its caller was told it was never sent (schedule {schedule})"
    if window.failed + window.published != 1 or window.used != 0:
        return f"counted {window.failed + window.published} times, {window.used} slots left"
    return None


def _reply_against_withdraw(schedule: tuple[int, ...]) -> str | None:
    """nsqd's OK arrives while the publishing thread's deadline passes: the caller's outcome
    and the count must agree (a timeout counted as published was issue 49's first bug)."""
    window = _window()
    t = Ticket(b"PUB t\n...", 1, time.monotonic() + 60, window, None)
    window.take(t)
    claim_all([t], time.monotonic(), [])
    _won, error = run(
        [lambda: t.settle(None), lambda: t.withdraw(_never_sent())],
        schedule,
        [ticket_module, window_module],
    )
    caller_saw_ok = error is None
    if window.failed + window.published != 1:
        return f"counted {window.failed + window.published} times (schedule {schedule})"
    if caller_saw_ok != (window.published == 1):
        return f"the caller saw {error!r} but it was counted otherwise (schedule {schedule})"
    return None


def _take_against_take(schedule: tuple[int, ...]) -> str | None:
    """One slot of two left, two threads take one each: exactly one gets it (admission exact:
    max_pending_publishes is never passed)."""
    window = _window()
    window.limit = 2
    held = Ticket(b"PUB t\n...", 1, 1e9, window, None)
    window.take(held)
    c, d = (Ticket(b"PUB t\n...", 1, 1e9, window, None) for _ in range(2))
    took_c, took_d = run(
        [lambda: window.take(c), lambda: window.take(d)], schedule, [window_module]
    )
    if int(took_c) + int(took_d) != 1 or window.used != 2:
        return f"{int(took_c) + int(took_d)} took the last slot, {window.used} used ({schedule})"
    return None


def _never_sent() -> NotSentTimeoutError:
    return NotSentTimeoutError("never sent")


RACES = [_claim_against_withdraw, _reply_against_withdraw, _take_against_take]
DEPTH = 6  # schedules of 6 steps over 2 threads: 64 each (enough to split every section)


@pytest.mark.parametrize("race", RACES, ids=lambda r: r.__name__.strip("_"))
def test_every_interleaving_keeps_the_outcome_and_the_count(race: Any) -> None:
    problems = [p for s in every_schedule(2, DEPTH) if (p := race(s)) is not None]
    assert problems == []


@pytest.mark.parametrize("race", RACES, ids=lambda r: r.__name__.strip("_"))
def test_without_the_window_lock_the_scheduler_finds_the_race(race: Any) -> None:
    """The test above would catch the race it is about: the same code without its lock fails
    in at least one interleaving."""
    with _no_window_lock():
        found = next((p for s in every_schedule(2, DEPTH) if (p := race(s)) is not None), None)
    assert found, "no interleaving showed the race: the scheduler does not reach it"
