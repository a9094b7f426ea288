"""SyncWriter's publish contract (issue 22) against real nsqd (or the embedded server):
``mpub`` takes a list and refuses a single body (a str used to become one message per
character), bad timeouts are refused, a publish that timed out in the local queue says it was
never sent, and ``stats()["failed"]`` counts what failed before the core Writer saw it."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import pytest

from nsqclient.errors import (
    ConnectionClosedError,
    InvalidArgumentError,
    InvalidInputError,
    NoConnectionsError,
    NotSentTimeoutError,
    NSQTimeoutError,
)
from nsqclient.sync import SyncWriter
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.support import wait_until

from .support import DEADLINE, drain_bodies, frozen, message_count, unique

pytestmark = pytest.mark.timeout(60)

SINGLE_BODIES = ["abc", b"abc", bytearray(b"abc"), memoryview(b"abc")]


def test_mpub_and_mpub_nowait_take_a_list_and_refuse_a_single_body(nsqd: NsqdProcess) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b"a", "b"])
        writer.mpub(topic, (b"c", b"d"), timeout=5)
        writer.mpub_nowait(topic, (b for b in [b"e", b"f"])).result(DEADLINE)
        for single in SINGLE_BODIES:
            with pytest.raises(InvalidInputError, match="wrap it in a list") as info:
                writer.mpub(topic, single)
            assert info.value.sent is False
            with pytest.raises(InvalidInputError, match="wrap it in a list"):
                writer.mpub_nowait(topic, single)
        stats = writer.stats()
        assert stats["queued"] == 0 and stats["outstanding"] == 0
        assert stats["published"] == 6
    # nothing of the refused calls reached nsqd (before: "abc" stored a, b and c)
    assert message_count(nsqd, topic) == 6


@pytest.mark.parametrize("timeout", [-1, -0.25, float("nan"), "2"])
def test_bad_timeouts_are_refused_on_every_publish_method(nsqd: NsqdProcess, timeout: Any) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(topic, b"first")
        calls = [
            lambda: writer.pub(topic, b"x", timeout=timeout),
            lambda: writer.mpub(topic, [b"x"], timeout=timeout),
            lambda: writer.dpub(topic, 10, b"x", timeout=timeout),
            lambda: writer.pub_nowait(topic, b"x", timeout=timeout),
            lambda: writer.mpub_nowait(topic, [b"x"], timeout=timeout),
            lambda: writer.dpub_nowait(topic, 10, b"x", timeout=timeout),
        ]
        for call in calls:
            with pytest.raises(InvalidArgumentError, match="timeout"):
                call()
        assert writer.stats()["queued"] == 0
    assert message_count(nsqd, topic) == 1


def test_a_publish_that_timed_out_in_the_queue_says_it_was_never_sent(nsqd: NsqdProcess) -> None:
    """nsqd frozen, one publish on the wire (its slot is the only one), one waiting in the queue
    for that slot, and the queue (size 1) full for a third: the first may or may not be stored,
    the other two were never sent; ``failed`` counts all three (it used to count only the
    first)."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address], max_queued_publishes=1, max_pending_publishes=1) as writer:
        writer.pub(topic, b"warm-up")
        with frozen(nsqd):
            on_wire = writer.pub_nowait(topic, b"on-the-wire", timeout=1.0)
            wait_until(lambda: writer.stats()["outstanding"] == 1, what="the first publish sent")
            queued = writer.pub_nowait(topic, b"queued", timeout=0.5)
            wait_until(lambda: writer.stats()["queued"] == 1, what="the second one queued")
            with pytest.raises(NotSentTimeoutError, match="never sent") as full:
                writer.pub(topic, b"queue-full", timeout=0.2)
            assert full.value.sent is False
            with pytest.raises(NotSentTimeoutError) as waited:
                queued.result(DEADLINE)
            assert waited.value.sent is False
            with pytest.raises((NSQTimeoutError, ConnectionClosedError)) as sent:
                on_wire.result(DEADLINE)
            assert sent.value.sent is True
            assert not isinstance(sent.value, NotSentTimeoutError)
        assert writer.stats()["failed"] == 3
        writer.pub(topic, b"after", timeout=DEADLINE)
    bodies = drain_bodies(nsqd, topic, message_count(nsqd, topic))
    assert b"queued" not in bodies and b"queue-full" not in bodies
    assert {b"warm-up", b"after"} <= set(bodies)


def test_failed_counts_no_connection_errors_of_the_blocking_layer() -> None:
    """The fault harness's case: 8 publishes raised NoConnectionsError, ``failed`` said 0.
    And each of them raises NoConnectionsError, never sent: whether the caller's deadline or
    the loop's wait for a connection ends first (a publish queued behind another, or a thread
    woken before the loop under load, timed out as NotSentTimeoutError, a race CI lost)."""
    with SyncWriter([f"127.0.0.1:{free_port()}"], reconnect_delay=50) as writer:
        futures = [writer.pub_nowait(unique(), b"x", timeout=0.2) for _ in range(4)]
        for future in futures:
            with pytest.raises(NoConnectionsError, match="no nsqd connection") as info:
                future.result(DEADLINE)
            assert info.value.sent is False
        for _ in range(4):
            with pytest.raises(NoConnectionsError, match="no nsqd connection") as info:
                writer.pub(unique(), b"x", timeout=0.2)
            assert info.value.sent is False
        stats = writer.stats()
        assert stats["failed"] == 8 and stats["published"] == 0


def test_no_connection_is_the_error_even_when_the_loop_looks_too_late() -> None:
    """The race above, forced: the loop thread is held past the deadlines, so the publishing
    thread gives up first (the blocking pub) and the loop finds the future's ticket overdue
    (the pub_nowait): both say NoConnectionsError, never sent, and both are counted."""
    with SyncWriter([f"127.0.0.1:{free_port()}"], reconnect_delay=50) as writer:
        entered, release = threading.Event(), threading.Event()

        def hold() -> None:
            entered.set()
            release.wait(DEADLINE)

        writer.loop.call_soon_threadsafe(hold)
        assert entered.wait(DEADLINE)
        try:
            future = writer.pub_nowait(unique(), b"x", timeout=0.1)
            with pytest.raises(NoConnectionsError, match="no nsqd connection") as blocking:
                writer.pub(unique(), b"x", timeout=0.2)
        finally:
            release.set()
        assert blocking.value.sent is False
        with pytest.raises(NoConnectionsError, match="no nsqd connection") as later:
            future.result(DEADLINE)
        assert later.value.sent is False
        wait_until(lambda: writer.stats()["failed"] == 2, what="both counted")
        assert writer.stats()["published"] == 0


def test_a_publish_that_timed_out_in_a_held_up_queue_is_counted_at_once() -> None:
    """With no nsqd up, the queue's drain waits for a connection on the publish at its head, so
    a blocking publish behind it times out in the queue, unreached. It raised, so ``failed``
    counts it then, not once the drain gets to it (the head waits 2 s here): counted late, the
    8 of the test above read 7 under load."""
    with SyncWriter([f"127.0.0.1:{free_port()}"], reconnect_delay=50) as writer:
        head = writer.pub_nowait(unique(), b"head", timeout=2)
        with pytest.raises(NoConnectionsError, match="no nsqd connection") as behind:
            writer.pub(unique(), b"behind", timeout=0.2)
        assert behind.value.sent is False
        stats = writer.stats()
        assert not head.done()  # (else the drain has reached the one behind: nothing to show)
        assert stats["failed"] == 1 and stats["queued"] == 1, stats
        with pytest.raises(NoConnectionsError):
            head.result(DEADLINE)
        wait_until(lambda: writer.stats()["failed"] == 2, what="the head counted too")


def test_a_cancelled_pub_nowait_counts_as_failed(nsqd: NsqdProcess) -> None:
    """Withdrawn before it was sent, as the core Writer counts a cancelled publish."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address], max_pending_publishes=1) as writer:
        writer.pub(topic, b"warm-up")
        with frozen(nsqd):
            first = writer.pub_nowait(topic, b"on-the-wire", timeout=1.0)
            wait_until(lambda: writer.stats()["outstanding"] == 1, what="the first publish sent")
            # hold the loop thread so that it cannot claim the second publish before the
            # cancel (once claimed, a concurrent future can no longer be cancelled)
            entered, release = threading.Event(), threading.Event()

            def hold() -> None:
                entered.set()
                release.wait(DEADLINE)

            writer.loop.call_soon_threadsafe(hold)
            assert entered.wait(DEADLINE)
            try:
                second = writer.pub_nowait(topic, b"withdrawn", timeout=DEADLINE)
                assert second.cancel()
            finally:
                release.set()
            with pytest.raises((NSQTimeoutError, ConnectionClosedError)):
                first.result(DEADLINE)
        wait_until(lambda: writer.stats()["failed"] == 2, what="both counted")
        with pytest.raises(concurrent.futures.CancelledError):
            second.result(0)
