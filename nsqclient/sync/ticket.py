"""One blocking publish as a value: its bytes, its deadline, its state, and its outcome.

A :class:`Ticket` is made in the publishing thread (``pub``, ``mpub``, ``dpub`` and their
``_nowait`` forms) and carries the encoded command to nsqd by one of two ways: written by the
publishing thread through a connection's door (:mod:`.door`), or handed to the loop through the
bounded queue (:mod:`.publish`). Whoever ends it, its state changes only here:

===========  ============================================  ====================================
state        meaning                                        left by
===========  ============================================  ====================================
``QUEUED``   made, not written: withdrawing it means it     :meth:`claim` (SENT, or DONE when
             was never sent (safe to retry)                  its deadline passed: never
                                                            written), :meth:`settle`,
                                                            :meth:`withdraw`, :meth:`cancelled`
``SENT``     claimed for writing: nsqd may have it from     :meth:`settle` (the reply, a cut, a
             here on                                        timeout), :meth:`withdraw`
``DONE``     settled: ``error`` None (acknowledged) or      (final)
             the very error its caller sees
===========  ============================================  ====================================

Every transition happens under the Writer's window lock (:class:`nsqclient.aio.window.Window`),
in the same section as the counting and the slot's return, so the race that decides "never sent,
safe to retry" against "maybe sent" (a thread withdrawing at its deadline while a writer claims
the ticket) has one winner without the GIL, and each publish is counted once, as what its caller
saw. Invariants (tests/sync/test_ticket.py checks them over every order of calls):

1. The state only moves forward (QUEUED -> SENT -> DONE, or QUEUED -> DONE).
2. A ticket is DONE with ``NotSentTimeoutError`` (or a ``sent=False`` error) only if it was never
   claimed: a passed deadline is never written.
3. The transition to DONE counts the ticket exactly once (``published`` or ``failed``) and gives
   back its slot if it held one.
4. Whoever made the transition to DONE notifies the caller (:meth:`notify`: wakes the blocked
   thread, or resolves the future) once, after letting go of every lock.

Owner of the other fields: ``data``, ``count``, ``deadline`` never change; ``waker`` is the
publishing thread's (set again by a thread that waits in a future's ``result()``); ``door`` is set
once, by the thread that admits it to a door.
"""

from __future__ import annotations

import concurrent.futures
import enum
from concurrent.futures._base import CANCELLED as _CANCELLED
from concurrent.futures._base import CANCELLED_AND_NOTIFIED as _CANCELLED_AND_NOTIFIED
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import PENDING as _PENDING
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import NotSentTimeoutError, NSQTimeoutError
from .wakes import Waker
from .wakes import wake as _wake

if TYPE_CHECKING:
    from ..aio.window import Window

__all__ = [
    "DONE",
    "QUEUED",
    "SENT",
    "Ticket",
    "TicketState",
    "claim_all",
    "resolve",
    "settle_acknowledged",
]


class TicketFuture(Protocol):
    """The future of a ``pub_nowait`` (:class:`~.future.PublishFuture`), as a ticket uses it."""

    _state: str
    _ticket: Ticket | None

    def set_running_or_notify_cancel(self) -> bool: ...

    def run_fresh(self) -> None: ...

    def acknowledge(self) -> None: ...

    def set_exception(self, exception: BaseException | None) -> None: ...


class TicketState(enum.Enum):
    """Where a :class:`Ticket` is (see the module's table)."""

    QUEUED = "queued"
    SENT = "sent"
    DONE = "done"


QUEUED, SENT, DONE = TicketState


def passed_deadline() -> NotSentTimeoutError:
    return NotSentTimeoutError(
        "the publish's timeout passed before it was written; never sent, safe to retry"
    )


def no_reply() -> NSQTimeoutError:
    return NSQTimeoutError(
        "no acknowledgement from nsqd in time; the message may or may not have been published"
    )


class Ticket:
    """One publish from a thread (see the module docstring). ``future`` is a ``pub_nowait``'s
    (then ``waker`` is None until a thread waits in its ``result()``)."""

    __slots__ = (
        "count",
        "data",
        "deadline",
        "door",
        "error",
        "future",
        "slot",
        "state",
        "waker",
        "window",
    )

    def __init__(
        self,
        data: bytes,
        count: int,
        deadline: float,
        window: Window,
        waker: Waker | None,
        future: TicketFuture | None = None,
    ) -> None:
        self.data = data
        self.count = count
        self.deadline = deadline
        self.window = window
        self.waker = waker
        self.future = future
        self.state = QUEUED
        self.error: BaseException | None = None
        self.slot = False  # holds a max_pending_publishes slot (under the window lock)
        self.door: Any = None  # the door a thread wrote it through (None: the loop's way)

    # -- transitions (each under the window lock) --

    def settle(self, error: BaseException | None) -> bool:
        """End it with ``error`` (None: acknowledged); False if it had ended already. The
        caller then calls :meth:`notify` (outside every lock)."""
        window = self.window
        lock = window.lock
        lock.acquire()  # type: ignore[union-attr]  # (a shared window's; not `with`: this is
        try:  # every publish's end, and `with` makes two bound methods per use)
            if self.state is DONE:
                return False
            self.state = DONE
            self.error = error
            # -- Window.finish_locked(self, self.count, error), inlined (the same reason;
            # tests/sync/test_inlined_copies.py keeps the two equal) --
            if error is None:
                window.published += self.count
            else:
                window.failed += 1
            tell = False
            if self.slot:
                self.slot = False
                window.used -= 1
                tell = window.wanted
            # -- end --
        finally:
            lock.release()  # type: ignore[union-attr]
        if tell:
            window.notify()
        return True

    def withdraw(self, not_sent: BaseException) -> BaseException | None:
        """The caller gives up (its deadline passed, or it was interrupted): never sent
        (``not_sent``) if still queued, maybe sent (NSQTimeoutError) if claimed; the outcome
        if it ended first. Returns the error its caller raises (None: acknowledged)."""
        window = self.window
        with window.lock:  # type: ignore[union-attr]
            state = self.state
            if state is not DONE:
                self.state = DONE
                self.error = not_sent if state is QUEUED else no_reply()
                tell = window.finish_locked(self, self.count, self.error)
            else:
                tell = False
            error = self.error
        if tell:
            window.notify()
        return error

    def cancelled(self) -> bool:
        """Its future was cancelled (while queued: it can be no longer once running):
        counted as failed, never sent; False if it had ended already."""
        window = self.window
        with window.lock:  # type: ignore[union-attr]
            if self.state is not QUEUED:
                return False
            self.state = DONE
            self.error = concurrent.futures.CancelledError()
            tell = window.finish_locked(self, self.count, self.error)
        if tell:
            window.notify()
        return True

    # -- notification (after every lock) --

    def notify(self) -> None:
        """Tell the caller the outcome: wake the blocked thread (at the loop thread's next
        wait for I/O when called there: see :mod:`.wakes`), or resolve the future."""
        future = self.future
        if future is not None:
            resolve(future, self.error)
        waker = self.waker
        if waker is not None:
            _wake(waker)

    # -- ReplyWaiter / SharedWaiter (aio.replies): the connection completes it directly --

    def done(self) -> bool:
        return self.state is DONE

    def set_result(self, _reply: bytes, /) -> None:
        if self.settle(None):
            self.notify()

    def set_exception(self, error: BaseException, /) -> None:
        if self.settle(error):
            self.notify()

    def watched(self) -> bool:
        """A thread waits for it that reads its connection when it may (one that wrote it
        through a door; a ticket the loop sent is read by the loop)."""
        return self.waker is not None and self.door is not None

    def wake_reader(self) -> None:
        waker = self.waker
        if waker is not None:
            _wake(waker)

    def next_waker(self) -> Waker | None:
        """Whose thread reads for it when the turn passes to it (None: nobody waits)."""
        return self.waker

    def acknowledged(self) -> list[Ticket]:
        """Its OK, read by a publishing thread holding the guard: settled ([self] to notify),
        or [] if it had ended already (a timeout came first: the reply only used its slot)."""
        return [self] if self.settle(None) else []

    # -- a thread waiting in a future's result() --

    def watch(self, waker: Waker | None) -> bool:
        """Set (or, with None, take off) the waker of a thread waiting in the future's
        ``result()``; True if the ticket had ended already. Under the lock, so that the
        notifier either sees the waker or the waiter sees the end (no lost wake-up)."""
        with self.window.lock:  # type: ignore[union-attr]
            self.waker = waker
            return self.state is DONE


def resolve(future: TicketFuture, error: BaseException | None) -> None:
    """Give ``future`` its ticket's outcome, from the one thread that ended the ticket.

    Its state is read without its lock: once RUNNING, only this call moves it on, and a PENDING
    one (never claimed: it failed queued) goes through ``set_running_or_notify_cancel`` under
    its lock, which a concurrent ``cancel()`` takes too (a cancelled one stays cancelled)."""
    state = future._state
    if state in (_FINISHED, _CANCELLED, _CANCELLED_AND_NOTIFIED):
        return
    if state == _PENDING and not future.set_running_or_notify_cancel():
        return
    future._ticket = None  # (no cycle left)
    if error is None:
        future.acknowledge()
    elif not isinstance(error, concurrent.futures.CancelledError):
        future.set_exception(error)


def settle_acknowledged(waiters: list[Any]) -> list[Ticket]:
    """End the tickets nsqd acknowledged in one read (``waiters``: tickets, and coalesced
    batches of them), in one section of the window lock; those this call ended (the ones to
    notify: a timeout may have come first)."""
    out: list[Ticket] = []
    tickets: list[Ticket] = []
    for waiter in waiters:
        if waiter.__class__ is Ticket:
            tickets.append(waiter)
        else:
            tickets += waiter.acknowledged_tickets()
    if not tickets:
        return out
    window = tickets[0].window
    tell = False
    with window.lock:  # type: ignore[union-attr]
        for ticket in tickets:
            if ticket.state is not DONE:
                ticket.state = DONE
                ticket.error = None
                tell = window.finish_locked(ticket, ticket.count, None) or tell
                out.append(ticket)
    if tell:
        window.notify()
    return out


def claim_all(tickets: list[Ticket], now: float, ended: list[Ticket]) -> list[Ticket]:
    """Claim ``tickets`` (in order) for one write: those still queued with their deadline
    ahead become SENT and are returned; one whose deadline passed ends never sent and goes to
    ``ended`` (the caller notifies it), as does a ``pub_nowait`` whose future was cancelled;
    one withdrawn meanwhile is dropped. One section of the window lock for all."""
    if not tickets:
        return tickets
    window = tickets[0].window
    claimed: list[Ticket] = []
    tell = False
    with window.lock:  # type: ignore[union-attr]
        for ticket in tickets:
            if ticket.state is not QUEUED:
                continue  # withdrawn or cancelled meanwhile: counted then
            future = ticket.future
            if (  # (its state read as in resolve)
                future is not None
                and future._state == _PENDING
                and not future.set_running_or_notify_cancel()
            ):  # cancelled while queued
                ticket.state = DONE
                ticket.error = concurrent.futures.CancelledError()
                tell = window.finish_locked(ticket, ticket.count, ticket.error) or tell
                continue
            if ticket.deadline <= now:
                ticket.state = DONE
                ticket.error = passed_deadline()
                tell = window.finish_locked(ticket, ticket.count, ticket.error) or tell
                ended.append(ticket)
                continue
            ticket.state = SENT
            claimed.append(ticket)
    if tell:
        window.notify()
    return claimed
