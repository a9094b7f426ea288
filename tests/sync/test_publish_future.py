"""``PublishFuture`` against the running Python's ``concurrent.futures.Future`` (no server).

A ``pub_nowait`` future makes its Condition only when something looks at it (a waiter, a
callback, ``concurrent.futures.wait``), and is acknowledged without one when nothing did. These
tests hold that to a plain future's behaviour: its fields match the running Python's Future (so
a new Python that adds one fails here, not in a user's process), every way of looking at an
acknowledged future sees it done, and a callback or a waiter that races the acknowledgement is
never lost.
"""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from nsqclient.sync import future as future_module
from nsqclient.sync.future import PublishFuture

from .interleave import every_schedule, run

pytestmark = pytest.mark.timeout(300)

#: how long the racing threads may take: a hang's deadline, not a speed. 0.1-0.3 s quiet; on
#: free-threaded CPython with two CPU hogs and five busy test processes beside it one run took
#: 98 s, its threads making progress all along (a few hundred futures in 5 s)
RACE_DEADLINE = 240


class _NotTheLoop:
    in_loop_thread = False


def _running() -> PublishFuture:
    future = PublishFuture(0, _NotTheLoop())  # type: ignore[arg-type]
    future.run_fresh()
    return future


def test_its_fields_are_the_running_pythons_future_fields() -> None:
    plain = set(vars(concurrent.futures.Future()))
    ours = set(vars(PublishFuture(0, _NotTheLoop())))  # type: ignore[arg-type]
    assert plain - ours == {"_condition"}, (
        "Future gained a field: PublishFuture.__init__ must set it"
    )
    future = _running()
    assert future.running() and "_condition" in vars(future)  # (made on first look)


def test_acknowledged_without_its_condition_it_is_done_to_every_look() -> None:
    future = _running()
    future.acknowledge()
    assert "_condition" not in vars(future)  # nothing looked: no Condition was made
    assert future.result(timeout=0) is None and future.exception(timeout=0) is None
    assert "_condition" not in vars(future)  # (done: read without the lock)
    assert future.done() and not future.cancelled() and not future.cancel()
    seen: list[concurrent.futures.Future[None]] = []
    future.add_done_callback(seen.append)  # done already: called at once
    assert seen == [future]
    done, pending = concurrent.futures.wait([future], timeout=1)
    assert done == {future} and not pending
    assert list(concurrent.futures.as_completed([future], timeout=1)) == [future]
    assert "finished" in repr(future)


def test_an_exception_is_raised_by_result_and_returned_by_exception() -> None:
    future = _running()
    error = RuntimeError("refused")
    future.set_exception(error)
    assert future.exception(timeout=0) is error
    with pytest.raises(RuntimeError, match="refused"):
        future.result(timeout=0)


def test_a_future_looked_at_first_is_acknowledged_through_its_condition() -> None:
    future = _running()
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(future.result(timeout=10)))
    waiter.start()
    # the waiter made the Condition to wait on it (a deadline, not a sleep)
    deadline = threading.Event()
    for _ in range(1000):
        if "_condition" in vars(future) and future._condition._waiters:  # type: ignore[attr-defined]
            break
        deadline.wait(0.01)
    assert "_condition" in vars(future)
    future.acknowledge()
    waiter.join(timeout=10)
    assert not waiter.is_alive() and got == [None]


def test_a_callback_or_a_wait_racing_the_acknowledgement_is_never_lost() -> None:
    """Two threads, 2,000 futures: one adds a done callback (or waits with
    ``concurrent.futures.wait``) while the other acknowledges. The callback runs exactly once
    and every wait returns the future done, whichever came first."""
    rounds = 2000
    futures = [_running() for _ in range(rounds)]
    called = [0] * rounds
    start = threading.Barrier(2)

    def acknowledge() -> None:
        start.wait()
        for future in futures:
            future.acknowledge()

    def look() -> None:
        start.wait()
        for i, future in enumerate(futures):
            if i % 2:
                future.add_done_callback(lambda _f, i=i: called.__setitem__(i, called[i] + 1))
            else:
                done, _ = concurrent.futures.wait([future], timeout=10)
                assert done == {future}
                called[i] = 1

    threads = [threading.Thread(target=acknowledge), threading.Thread(target=look)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=RACE_DEADLINE)
    assert not any(thread.is_alive() for thread in threads)
    assert called == [1] * rounds
    assert all(future.done() and future.result(timeout=0) is None for future in futures)


def test_a_claim_of_a_future_nothing_looked_at_makes_no_condition() -> None:
    """The loop claims a queue of ``pub_nowait`` futures at once, holding the window lock:
    ``set_running_or_notify_cancel`` on one nothing looked at makes no Condition (it made one
    for each, under one lock shared by every future, which reading threads took for each
    acknowledgement: on free-threaded CPython with two CPU hogs beside it the loop ran 1-2 s
    late and nothing was read meanwhile). One that was looked at, or cancelled, goes through
    its Condition as any future's does."""
    unlooked = PublishFuture(0, _NotTheLoop())  # type: ignore[arg-type]
    assert unlooked.set_running_or_notify_cancel() is True
    assert "_condition" not in vars(unlooked) and unlooked._state == "RUNNING"
    unlooked.acknowledge()
    assert "_condition" not in vars(unlooked) and unlooked.result(timeout=0) is None
    cancelled = PublishFuture(0, _NotTheLoop())  # type: ignore[arg-type]
    assert cancelled.cancel() is True  # (a user's cancel while it waits in a queue)
    assert cancelled.set_running_or_notify_cancel() is False
    assert cancelled.cancelled()
    looked = PublishFuture(0, _NotTheLoop())  # type: ignore[arg-type]
    seen: list[object] = []
    looked.add_done_callback(seen.append)
    assert looked.set_running_or_notify_cancel() is True and looked.running()
    looked.acknowledge()
    assert seen == [looked]


def test_a_cancel_racing_the_claim_is_one_or_the_other() -> None:
    """Two threads, 2,000 futures nothing looked at: one cancels each while the other claims
    it. Each ends either cancelled (its claim said False) or running (its cancel said False),
    never both or neither."""
    rounds = 2000
    futures = [PublishFuture(0, _NotTheLoop()) for _ in range(rounds)]  # type: ignore[arg-type]
    claimed: list[bool] = [False] * rounds
    cancelled: list[bool] = [False] * rounds
    start = threading.Barrier(2)

    def claim() -> None:
        start.wait()
        for i, future in enumerate(futures):
            claimed[i] = future.set_running_or_notify_cancel()

    def cancel() -> None:
        start.wait()
        for i, future in enumerate(futures):
            cancelled[i] = future.cancel()

    threads = [threading.Thread(target=claim), threading.Thread(target=cancel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=RACE_DEADLINE)
    assert not any(thread.is_alive() for thread in threads)
    assert all(a != b for a, b in zip(claimed, cancelled, strict=True))
    assert all(f.cancelled() == c for f, c in zip(futures, cancelled, strict=True))
    assert all(f.running() == c for f, c in zip(futures, claimed, strict=True))


class _NoLock:
    """A lock that locks nothing: the race the test below is about."""

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc_info: object) -> None:
        return None


def _claim_against_cancel(schedule: tuple[int, ...]) -> str | None:
    """The loop claims a future nothing looked at while a user cancels it, one line at a time
    (tests/sync/interleave.py): exactly one of them wins."""
    future = PublishFuture(0, _NotTheLoop())  # type: ignore[arg-type]
    claimed, cancelled = run(
        [future.set_running_or_notify_cancel, future.cancel],
        schedule,
        [future_module, concurrent.futures._base],
    )
    if claimed == cancelled or future.cancelled() != cancelled:
        return f"claimed {claimed}, cancelled {cancelled} (schedule {schedule})"
    return None


def _schedules() -> list[tuple[int, ...]]:
    """Every order of the first 6 lines, and each of the claim's first 8 lines followed by the
    whole cancel (a cancel is longer than 6 lines: Future.cancel's own are stepped too)."""
    return [*every_schedule(2, 6), *((0,) * k + (1,) * 40 for k in range(8))]


def test_every_interleaving_of_a_claim_and_a_cancel_has_one_winner() -> None:
    problems = [p for s in _schedules() if (p := _claim_against_cancel(s)) is not None]
    assert problems == []


def test_without_the_condition_lock_the_scheduler_finds_the_claim_race() -> None:
    """The test above would catch the race: the same code with the future's Condition lock
    taken away (claim and cancel both think they won) fails in at least one interleaving."""
    original = future_module._CONDITION_MADE
    future_module._CONDITION_MADE = tuple(_NoLock() for _ in original)  # type: ignore[misc]
    try:
        found = next(
            (p for s in _schedules() if (p := _claim_against_cancel(s)) is not None),
            None,
        )
    finally:
        future_module._CONDITION_MADE = original  # type: ignore[misc]
    assert found, "no interleaving showed the race: the scheduler does not reach it"
