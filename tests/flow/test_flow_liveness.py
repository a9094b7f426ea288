"""flow.liveness: what is overdue at a given time, and when a connection next needs a look."""

from __future__ import annotations

import pytest

from nsqclient.flow.liveness import (
    INF,
    Overdue,
    Watch,
    check,
    describe,
    next_wake,
    overdue,
    requests_expired,
    settle,
)

pytestmark = pytest.mark.timeout(10)

IDLE = Watch(
    last_read=100.0,
    dead_after=60.0,
    heartbeats_off=False,
    pending=0,
    buffered=0,
    oldest_deadline=INF,
    waiting_since=0.0,
    stuck_after=10.0,
    next_deadline=INF,
    write_paused_at=None,
    write_timeout=1.0,
)


def test_an_idle_connection_with_heartbeats_wakes_only_when_its_silence_bound_is_due() -> None:
    assert overdue(130.0, IDLE) is None
    assert next_wake(130.0, IDLE) == 160.0  # last read + two heartbeat intervals, not a tick
    # a heartbeat read meanwhile only pushes the bound later: the wake-up re-arms from it
    assert next_wake(160.0, IDLE._replace(last_read=145.0)) == 205.0


def test_silence_past_two_heartbeat_intervals_is_fatal_and_not_before() -> None:
    assert overdue(160.0, IDLE) is None
    assert overdue(160.001, IDLE) is Overdue.SILENT
    # a partial frame does not count as a read
    assert overdue(160.001, IDLE._replace(buffered=12)) is Overdue.SILENT
    assert "12 bytes of an unfinished frame" in describe(
        Overdue.SILENT, 161.0, IDLE._replace(buffered=12)
    )


def test_without_heartbeats_silence_counts_only_while_something_is_owed() -> None:
    off = IDLE._replace(heartbeats_off=True, dead_after=300.0)
    assert overdue(10_000.0, off) is None
    assert next_wake(10_000.0, off) == 10_075.0  # a slow re-check for partial frames
    # a reply awaited: silence counts from the request's send, not from an old idle check
    waiting = off._replace(pending=1, waiting_since=1_000.0)
    assert overdue(1_300.0, waiting) is None
    assert overdue(1_300.5, waiting) is Overdue.SILENT
    assert next_wake(1_100.0, waiting) == 1_300.0
    assert "read_timeout" in describe(Overdue.SILENT, 1_301.0, waiting)
    assert overdue(500.0, off._replace(buffered=3)) is Overdue.SILENT


def test_a_request_deadline_wakes_the_connection_and_expires_requests() -> None:
    w = IDLE._replace(pending=2, oldest_deadline=105.0, waiting_since=100.0, next_deadline=105.0)
    assert next_wake(101.0, w) == 105.0
    assert not requests_expired(104.9, w)
    assert requests_expired(105.0, w)
    assert overdue(105.0, w) is None  # expired is not dead: nsqd answered 5 s ago at most


def test_a_request_past_its_deadline_with_nothing_answered_for_stuck_after_is_fatal() -> None:
    w = IDLE._replace(pending=1, oldest_deadline=105.0, waiting_since=100.0, next_deadline=INF)
    assert overdue(109.9, w) is None
    assert next_wake(106.0, w) == 110.0  # the stuck bound, after the expiry was acted on
    assert overdue(110.0, w) is Overdue.STUCK
    # a reply in between restarts the wait: not stuck
    assert overdue(110.0, w._replace(waiting_since=108.0)) is None
    # no deadline: never stuck (the silence bound still holds)
    assert overdue(1_000.0, w._replace(oldest_deadline=INF, last_read=990.0)) is None


def test_paused_writes_are_due_after_write_timeout() -> None:
    w = IDLE._replace(write_paused_at=120.0)
    assert next_wake(120.0, w) == 121.0
    assert overdue(121.0, w) is None
    assert overdue(121.01, w) is Overdue.WRITE
    assert "write_timeout" in describe(Overdue.WRITE, 121.01, w)


def test_silence_is_checked_before_the_other_bounds() -> None:
    w = IDLE._replace(pending=1, oldest_deadline=105.0, waiting_since=100.0, write_paused_at=100.0)
    assert overdue(170.0, w) is Overdue.SILENT


@pytest.mark.parametrize("now", [100.0, 130.0, 159.0])
def test_the_next_wake_is_never_in_the_past_while_nothing_is_due(now: float) -> None:
    for w in (
        IDLE,
        IDLE._replace(pending=1, oldest_deadline=170.0, waiting_since=now, next_deadline=170.0),
        IDLE._replace(write_paused_at=now),
        IDLE._replace(heartbeats_off=True),
    ):
        assert overdue(now, w) is None
        assert next_wake(now, w) > now


def test_settle_drops_a_stale_deadline_and_restarts_expected_silence() -> None:
    stale = IDLE._replace(next_deadline=50.0)
    assert settle(200.0, stale).next_deadline == INF  # nothing pending: the deadline is stale
    assert settle(200.0, stale).last_read == 100.0  # heartbeats on: silence still counts
    off = IDLE._replace(heartbeats_off=True)
    assert settle(200.0, off).last_read == 200.0  # nothing owed: silence is expected
    assert settle(200.0, off._replace(buffered=4)).last_read == 100.0  # a partial frame is owed
    owed = IDLE._replace(pending=1, next_deadline=150.0)
    assert settle(200.0, owed) == owed


def test_a_paused_write_that_drains_restarts_the_write_timeout_and_a_stalled_one_is_fatal() -> None:
    paused = IDLE._replace(write_paused_at=100.0, paused_size=1000, buffer_size=1000)
    assert check(100.5, paused).dead is None
    stalled = check(101.5, paused)
    assert stalled.dead is Overdue.WRITE and not stalled.expire
    # nsqd read some of it: the bound restarts from now, at the smaller size
    draining = check(101.5, paused._replace(buffer_size=400))
    assert draining.dead is None
    assert draining.watch.write_paused_at == 101.5 and draining.watch.paused_size == 400
    assert next_wake(101.5, draining.watch) == 102.5


def test_check_orders_death_before_expiry() -> None:
    w = IDLE._replace(pending=1, oldest_deadline=105.0, waiting_since=100.0, next_deadline=105.0)
    assert check(105.0, w)[:2] == (None, True)  # expire the request, the connection lives
    assert check(110.0, w)[:2] == (Overdue.STUCK, False)  # dead: nothing else applies
