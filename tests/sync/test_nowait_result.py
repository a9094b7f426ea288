"""``pub_nowait(...).result()`` reads its own reply where publishing threads read.

A ``pub_nowait`` future (``nsqclient.sync.future.PublishFuture``) waited on with ``result()``
or ``exception()`` from a publishing thread takes the read baton as a blocking publish does, so
the reply no longer goes through the loop thread and the future's Condition. These tests hold it
to the contract: every publish acknowledged exactly once from 16 threads (plain and coalesced,
futures waited in and out of order, from another thread than the one that published), a
``result(timeout)`` that gives up within its timeout during a stall and leaves reading to
someone (the publishes after it are acknowledged), and a close from another thread while
threads wait in ``result()``. Real nsqd and the embedded server.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from typing import Any

import pytest

from nsqclient.errors import ClosedError, NSQError
from nsqclient.sync import SyncWriter
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import drain_bodies, message_count, unique
from .test_faults_sync import FAST, MARGIN

pytestmark = pytest.mark.timeout(90)

THREADS = 16


def test_a_script_waiting_on_its_futures_reads_its_own_replies(nsqd: NsqdProcess) -> None:
    """One thread, each ``pub_nowait`` waited on at once: the thread reads the replies from the
    first one on (before: the loop read every one and woke the thread through the future,
    read_by_threads 0 here, at about twice the CPU per publish)."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        for i in range(200):
            assert writer.pub_nowait(topic, b"n%d" % i).result(timeout=10) is None
        future = writer.pub_nowait(topic, b"last")
        assert future.exception(timeout=10) is None and future.done()
        stats = writer.stats()
    assert stats["published"] == 201 and stats["failed"] == 0
    # the first one or two are the loop's to read (reading passes at the end of its read); a
    # few more if the loop took reading back while the thread was descheduled (shared CPUs)
    assert stats["read_by_threads"] >= 180, stats
    stored = drain_bodies(nsqd, topic, 201)
    assert sorted(stored) == sorted([b"n%d" % i for i in range(200)] + [b"last"])


@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_sixteen_threads_waiting_on_futures_lose_nothing(nsqd: NsqdProcess, coalesce: bool) -> None:
    """Sixteen threads: some wait on each future at once, some on ten at a time in reverse order
    (a future whose reply is not next), some hand theirs to another thread to wait on, some
    publish blocking among them. Every publish is acknowledged once and stored once."""
    topic = unique()
    per_thread = 60
    errors: list[BaseException] = []
    handed: list[concurrent.futures.Future[None]] = []
    handed_lock = threading.Lock()

    def publisher(n: int, kind: int) -> None:
        try:
            if kind == 0:
                for i in range(per_thread):
                    writer.pub_nowait(topic, b"%d-%d" % (n, i)).result(timeout=30)
            elif kind == 1:
                for start in range(0, per_thread, 10):
                    batch = [
                        writer.pub_nowait(topic, b"%d-%d" % (n, i))
                        for i in range(start, start + 10)
                    ]
                    for future in reversed(batch):
                        future.result(timeout=30)
            elif kind == 2:
                for i in range(per_thread):
                    future = writer.pub_nowait(topic, b"%d-%d" % (n, i))
                    with handed_lock:
                        handed.append(future)
            else:
                for i in range(per_thread):
                    writer.pub(topic, b"%d-%d" % (n, i), timeout=30)
        except BaseException as exc:
            errors.append(exc)

    with SyncWriter([nsqd.tcp_address], coalesce=coalesce) as writer:
        writer.pub(topic, b"warm")
        threads = [threading.Thread(target=publisher, args=(n, n % 4)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for future in handed:  # waited on by this thread, not the one that published
            future.result(timeout=30)
        stats = writer.stats()
    assert not errors, errors
    expected = 1 + THREADS * per_thread
    assert (stats["published"], stats["failed"], stats["outstanding"]) == (expected, 0, 0)
    assert stats["read_by_threads"] > 0, stats
    stored = drain_bodies(nsqd, topic, expected)
    assert len(stored) == expected and len(set(stored)) == expected


def test_a_result_that_times_out_in_a_stall_keeps_its_timeout_and_reading_goes_on(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy
) -> None:
    """Nothing answers: ``result(timeout)`` raises TimeoutError within its timeout, and the
    future stays pending (the publish is still on its way, not failed). When traffic flows
    again the future resolves, and the thread that gave up left reading to someone: the
    publishes after it are acknowledged."""
    topic = unique()
    timeout = 0.3
    with SyncWriter([nsq_fault_proxy.address], **FAST, publish_timeout=10_000) as writer:
        for i in range(5):
            writer.pub(topic, b"warm-%d" % i)  # reading has passed to the threads
        with nsq_fault_proxy.stall():
            future = writer.pub_nowait(topic, b"stalled")
            start = time.monotonic()
            with pytest.raises(concurrent.futures.TimeoutError):
                future.result(timeout=timeout)
            took = time.monotonic() - start
            assert not future.done()
            with pytest.raises(concurrent.futures.TimeoutError):
                future.exception(timeout=0.05)
        assert took <= timeout + MARGIN, f"result() took {took:.2f}s for a {timeout}s timeout"
        assert future.result(timeout=10) is None
        after = [writer.pub_nowait(topic, b"after-%d" % i) for i in range(20)]
        for f in after:
            assert f.result(timeout=10) is None
        writer.pub(topic, b"blocking-after", timeout=10)
        stats = writer.stats()
    assert (stats["published"], stats["failed"], stats["outstanding"]) == (27, 0, 0)
    assert message_count(nsqd, topic) == 27


def test_a_close_from_another_thread_while_threads_wait_on_futures(nsqd: NsqdProcess) -> None:
    """Threads publish and wait in ``result()`` while another thread closes the writer: each
    future resolves (acknowledged) or raises a typed error, no thread hangs, and every
    acknowledged publish is stored."""
    topic = unique()
    acked: list[bytes] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()
    writer = SyncWriter([nsqd.tcp_address])
    writer.pub(topic, b"warm")
    acked.append(b"warm")

    def publisher(n: int) -> None:
        i = 0
        while not stop.is_set():
            body = b"%d-%d" % (n, i)
            i += 1
            try:
                writer.pub_nowait(topic, body).result(timeout=30)
            except NSQError as exc:
                with lock:
                    failures.append(exc)
                return
            with lock:
                acked.append(body)

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while len(acked) < 500 and time.monotonic() < deadline:
            time.sleep(0.01)  # (polling a count with a deadline: the publishers are the events)
        assert len(acked) >= 500, "the publishers did not get going"
        doors = list(writer._doors.open)  # (the connection the threads write and read)
        assert doors
        closer = threading.Thread(target=writer.close)
        closer.start()
        closer.join(30)
        assert not closer.is_alive(), "close() hung"
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        writer.close()
    assert not any(t.is_alive() for t in threads), "a thread hung in result()"
    # the door's duplicate of the socket closed, by close() or the last thread to read
    assert all(door.shared.socket_closed for door in doors), "a door's socket was left open"
    assert all(isinstance(exc, ClosedError | NSQError) for exc in failures), failures
    # nsqd still runs the PUBs it read before the close (unacknowledged): count once it is done
    # with the connection, or the drain below finds one more than counted
    wait_until(lambda: not nsqd.stats().get("producers"), what="nsqd to drop the closed writer")
    stored = set(drain_bodies(nsqd, topic, message_count(nsqd, topic)))
    missing = [body for body in acked if body not in stored]
    assert not missing, f"{len(missing)} acknowledged publishes were not stored"


def test_mpub_and_dpub_futures_read_their_own_replies_too(nsqd: NsqdProcess) -> None:
    """``mpub_nowait`` and ``dpub_nowait`` futures go the same way as ``pub_nowait``'s: waited
    on at once from one thread, the thread reads their replies (read_by_threads), and every
    message is stored."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        for i in range(60):
            items = [b"m%d-%d" % (i, k) for k in range(3)]
            assert writer.mpub_nowait(topic, items).exception(timeout=10) is None
            assert writer.dpub_nowait(topic, 0, b"d%d" % i).exception(timeout=10) is None
        stats = writer.stats()
    assert stats["published"] == 60 * 4 and stats["failed"] == 0
    # the loop reads the first one or two, and takes reading back whenever no thread read for
    # 0.25 s (a publishing thread descheduled on shared CPUs: 96 of 120 in one CI run with six
    # workers on two cores; 116-119 with three CPU hogs beside it); with no thread reading, 0
    assert stats["read_by_threads"] >= 60, stats
    stored = drain_bodies(nsqd, topic, 60 * 4)
    assert len(stored) == 60 * 4 and len(set(stored)) == 60 * 4


@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_a_refused_future_among_sixteen_threads_keeps_its_error(
    nsqd_factory: Any, coalesce: bool
) -> None:
    """nsqd refuses one body (E_BAD_MESSAGE, then it closes) while 16 threads keep eight
    futures each outstanding and wait on the oldest: that future's ``exception()`` is the
    refusal (or ConnectionClosedError when a write met the closing socket first), marked
    maybe-sent, and it is never stored; every other future is acknowledged and stored once, or
    raises a typed error."""
    nsqd = nsqd_factory(extra_args=["--max-msg-size=100"])
    topic = unique()
    acked: list[bytes] = []
    raised: list[bytes] = []
    refused: list[BaseException | None] = []
    lock = threading.Lock()

    def settle(body: bytes, future: concurrent.futures.Future[None]) -> None:
        error = future.exception(timeout=10)
        with lock:
            (acked if error is None else raised).append(body)
            if error is not None:
                assert isinstance(error, NSQError), error

    with SyncWriter([nsqd.tcp_address], **FAST, coalesce=coalesce) as writer:
        writer.pub(topic, b"warm")

        def publisher(i: int) -> None:
            window: collections.deque[tuple[bytes, concurrent.futures.Future[None]]]
            window = collections.deque()
            for j in range(150):
                if i == 0 and j == 75:
                    with lock:
                        refused.append(writer.pub_nowait(topic, b"x" * 200).exception(timeout=10))
                if len(window) == 8:
                    settle(*window.popleft())
                body = b"t%d-%d" % (i, j)
                window.append((body, writer.pub_nowait(topic, body, timeout=10)))
            while window:
                settle(*window.popleft())

        threads = [threading.Thread(target=publisher, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    assert len(refused) == 1 and isinstance(refused[0], NSQError), refused
    assert refused[0].sent is True
    assert len(acked) + len(raised) == THREADS * 150
    stored = drain_bodies(nsqd, topic, message_count(nsqd, topic), **FAST)
    counts = {b: stored.count(b) for b in set(stored)}
    assert b"x" * 200 not in counts
    bad = {b: counts.get(b) for b in acked if counts.get(b) != 1}
    assert not bad, f"acknowledged publishes missing (None) or doubled: {bad}"
    assert set(counts) <= {b"warm", *acked, *raised}
