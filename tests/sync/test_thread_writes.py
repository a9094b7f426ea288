"""The blocking publish written by the calling thread (nsqclient.sync.door) keeps the contract.

Sixteen publishing threads through cuts, a stall and refusals; a stall that each blocked publish
gives up on within its own timeout (sent: maybe stored); a close from another thread while they
publish; coroutines and threads publishing on the one connection at once; a body larger than the
socket's buffer (the thread writes what fits, the loop the rest); and connections the threads
must not write to (snappy) going the loop's way. Real nsqd and the embedded server.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from nsqclient.errors import ClosedError, NotSentTimeoutError, NSQError, NSQTimeoutError
from nsqclient.sync import SyncWriter, run_in_loop
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import drain_bodies, message_count, unique
from .test_faults_sync import FAST, MARGIN, PUBLISH_TIMEOUT, SyncLedger, fault

pytestmark = pytest.mark.timeout(90)

THREADS = 16


def _publishers(
    writer: SyncWriter, topic: str, ledger: SyncLedger, stop: threading.Event
) -> list[threading.Thread]:
    kinds = ["pub"] * 12 + ["mpub", "dpub", "pub", "mpub"]

    def publisher(how: str) -> None:
        while not stop.is_set():
            if not ledger.publish(writer, topic, how):
                time.sleep(0.02)  # a caller that retries, not one that spins

    threads = [threading.Thread(target=publisher, args=(how,), daemon=True) for how in kinds]
    for t in threads:
        t.start()
    return threads


@pytest.mark.one_backend
@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_sixteen_threads_publish_through_cuts_a_stall_and_refusals(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, coalesce: bool
) -> None:
    topic, ledger, stop = unique(), SyncLedger(), threading.Event()
    options = {**FAST, "publish_timeout": int(PUBLISH_TIMEOUT * 1000), "coalesce": coalesce}
    with SyncWriter([nsq_fault_proxy.address], **options) as writer:
        threads = _publishers(writer, topic, ledger, stop)
        try:
            for name in ("cut (FIN)", "cut (RST)", "stall", "refuse"):
                before = len(ledger.acked)
                wait_until(lambda b=before: len(ledger.acked) > b + 50, what=f"before {name}")
                with fault(nsq_fault_proxy, name):
                    if not name.startswith("cut"):
                        time.sleep(PUBLISH_TIMEOUT + 0.5)  # how long the fault lasts
                resumed = len(ledger.acked)
                wait_until(lambda r=resumed: len(ledger.acked) > r + 50, what=f"after {name}")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert not any(t.is_alive() for t in threads)
        assert writer.stats()["written_by_threads"] > 0  # the threads' own path was exercised
        if coalesce:
            assert writer.stats()["coalesced_batches"] > 0  # and the threads' MPUBs
    assert ledger.raised, "no publish ever failed: the faults did not bite"
    ledger.check(drain_bodies(nsqd, topic, message_count(nsqd, topic), **FAST))


@pytest.mark.one_backend
@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_a_stall_fails_each_blocked_publish_within_its_timeout_then_recovers(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, coalesce: bool
) -> None:
    """Nothing answers: every thread's publish raises NSQTimeoutError (sent, maybe stored) on
    its own clock; the connection is then found stuck and replaced, and publishing resumes.
    Coalescing, the publishes that waited behind the one on its way are written when it times
    out, or never (NotSentTimeoutError): either way each says which."""
    topic = unique()
    timeout = 0.5
    with SyncWriter(
        [nsq_fault_proxy.address], **FAST, publish_timeout=2000, coalesce=coalesce
    ) as writer:
        writer.pub(topic, b"warm")
        outcomes: list[tuple[BaseException | None, float]] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            start = time.monotonic()
            error: BaseException | None = None
            try:
                writer.pub(topic, b"stalled-%d" % i, timeout=timeout)
            except NSQError as exc:
                error = exc
            with lock:
                outcomes.append((error, time.monotonic() - start))

        with nsq_fault_proxy.stall():
            threads = [threading.Thread(target=one, args=(i,)) for i in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
        assert len(outcomes) == THREADS
        for error, took in outcomes:
            assert isinstance(error, NSQTimeoutError), error
            assert error.sent is not isinstance(error, NotSentTimeoutError)
            assert coalesce or error.sent
            assert took <= timeout + MARGIN, f"a publish took {took:.2f}s for a {timeout}s timeout"
        writer.pub(topic, b"after", timeout=10)  # a fresh connection once the stuck one went
        # the late replies to the publishes that timed out settle nothing twice (they once
        # counted as published too, and drove outstanding below 0: graceful_close then waited
        # out its whole timeout)
        stats = writer.stats()
        assert (stats["outstanding"], stats["published"], stats["failed"]) == (0, 2, THREADS)
    assert b"after" in drain_bodies(nsqd, topic, message_count(nsqd, topic), **FAST)


@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_a_close_from_another_thread_while_sixteen_publish(
    nsqd: NsqdProcess, coalesce: bool
) -> None:
    """Every publishing thread ends (ClosedError once closed); what was acknowledged is stored;
    graceful_close waits for what the threads wrote themselves (or held to join a batch)."""
    topic, ledger, stop = unique(), SyncLedger(), threading.Event()
    writer = SyncWriter([nsqd.tcp_address], **FAST, coalesce=coalesce)
    closed_errors: list[BaseException] = []

    def publisher() -> None:
        while True:
            try:
                body = ledger.bodies("pub", 1)[0]
                writer.pub(topic, body, timeout=5)
            except ClosedError as exc:
                closed_errors.append(exc)
                return
            except NSQError:
                with ledger.lock:
                    ledger.raised.append(body)
            else:
                with ledger.lock:
                    ledger.acked.append(body)

    writer.pub(topic, b"warm")
    threads = [threading.Thread(target=publisher, daemon=True) for _ in range(THREADS)]
    for t in threads:
        t.start()
    wait_until(lambda: len(ledger.acked) > 500, what="the threads publishing")
    stats_before = writer.stats()
    doors = list(writer._doors.open)
    writer.graceful_close(timeout=5)
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert len(closed_errors) == THREADS  # each thread was told, none hangs
    # the door's duplicate of the socket closed, by close() or the last thread to read
    assert doors and all(door.shared.socket_closed for door in doors)
    assert stats_before["written_by_threads"] > 0
    stored = set(drain_bodies(nsqd, topic, message_count(nsqd, topic), **FAST))
    missing = [b for b in ledger.acked if b not in stored]
    assert not missing, f"{len(missing)} acknowledged publishes missing"
    stop.set()


def test_coroutines_and_threads_publish_on_one_connection_at_once(nsqd: NsqdProcess) -> None:
    topic = unique()
    per_thread, tasks, per_task = 300, 32, 40
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(topic, b"warm")
        errors: list[BaseException] = []

        def thread_body(i: int) -> None:
            try:
                for j in range(per_thread):
                    writer.pub(topic, b"t%d-%d" % (i, j))
            except BaseException as exc:
                errors.append(exc)

        async def coroutines() -> None:
            async def task(i: int) -> None:
                for j in range(per_task):
                    await writer.aio.pub(topic, b"a%d-%d" % (i, j))

            await asyncio.gather(*(task(i) for i in range(tasks)))

        threads = [threading.Thread(target=thread_body, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        run_in_loop(coroutines(), timeout=60)
        for t in threads:
            t.join(60)
        assert not errors, errors
        stats = writer.stats()
        assert len(stats["connections"]) == 1  # one connection, shared
        assert stats["written_by_threads"] >= 8 * per_thread
        assert stats["published"] == 1 + 8 * per_thread + tasks * per_task
    expected = 1 + 8 * per_thread + tasks * per_task
    stored = drain_bodies(nsqd, topic, expected)
    assert len(stored) == expected and len(set(stored)) == expected


def test_a_script_reads_its_own_replies_from_its_second_publish(nsqd: NsqdProcess) -> None:
    """A script that publishes without ``with`` (so its first publish meets the connection
    still being made) sends that one by the loop, which reads its reply; once nothing of the
    loop's is pending, the thread reads its own. The loop's hold after its own command used to
    last a whole second whatever was pending: a short script paid the loop's path (two
    wake-ups) for every publish of its first second (read_by_threads was 0 here)."""
    topic = unique()
    writer = SyncWriter([nsqd.tcp_address])
    try:
        for i in range(100):
            writer.pub(topic, b"s%d" % i)
        stats = writer.stats()
    finally:
        writer.close()
    assert stats["published"] == 100 and stats["written_by_threads"] >= 99
    # the first two at most are the loop's to read (its own command, then the switch); a few
    # more if the loop took reading back while the thread was descheduled (CI's shared CPUs)
    assert stats["read_by_threads"] >= 90, stats
    assert sorted(drain_bodies(nsqd, topic, 100)) == sorted(b"s%d" % i for i in range(100))


async def _current_thread() -> threading.Thread:
    return threading.current_thread()


def test_a_blocking_publish_in_a_nowait_done_callback_is_acknowledged(nsqd: NsqdProcess) -> None:
    """A ``pub_nowait`` future's done callback runs in the thread that resolves it: the loop
    (where a blocking publish raises at once: it would deadlock), or a publishing thread that
    read its OK. In the second case it runs once that thread let go of reading, so a blocking
    publish inside it reads its own reply (before: it waited out its timeout, as no one else
    may read while a thread holds the read baton, and raised NSQTimeoutError)."""
    topic = unique()
    outcomes: list[str] = []
    loop_thread: list[threading.Thread] = []

    def callback(future: Any) -> None:
        future.result()
        if threading.current_thread() is loop_thread[0]:
            outcomes.append("on the loop")
            return
        try:
            writer.pub(topic, b"from-callback", timeout=5)
            outcomes.append("acked")
        except NSQError as exc:
            outcomes.append(type(exc).__name__)

    with SyncWriter([nsqd.tcp_address]) as writer:
        loop_thread.append(run_in_loop(_current_thread()))
        for i in range(20):
            writer.pub(topic, b"warm-%d" % i)  # reading passes to this thread
        for i in range(20):
            writer.pub_nowait(topic, b"n-%d" % i).add_done_callback(callback)
            writer.pub(topic, b"b-%d" % i)  # this thread reads the nowait's OK too
        wait_until(lambda: len(outcomes) == 20, what="every callback ran", timeout=30)
    # the read that resolved each future was this thread's or the loop's: both happen
    assert set(outcomes) <= {"acked", "on the loop"}, outcomes
    acked = outcomes.count("acked")
    assert acked >= 1, outcomes  # the case this is about: resolved by this thread's read
    assert message_count(nsqd, topic) == 20 + 20 + 20 + acked


def test_a_body_larger_than_the_socket_buffer(nsqd_factory: Any) -> None:
    """The thread's send takes part of an 8 MiB MPUB; the loop writes the rest, in order, and
    the PUBs behind it are answered after it."""
    nsqd = nsqd_factory(extra_args=["--max-msg-size=9000000", "--max-body-size=9000000"])
    topic = unique()
    big = [b"b" * (1 << 20)] * 8
    with SyncWriter([nsqd.tcp_address], max_msg_size=9_000_000, max_body_size=9_000_000) as w:
        w.pub(topic, b"warm")
        futures = [w.mpub_nowait(topic, big, timeout=30)]
        futures += [w.pub_nowait(topic, b"small-%d" % i, timeout=30) for i in range(50)]
        for future in futures:
            future.result(timeout=30)
        # the big one at least went by the thread; behind it, while the loop writes the rest
        # (writes paused), the others may cross to the loop instead
        assert w.stats()["written_by_threads"] >= 1
    assert message_count(nsqd, topic) == 1 + 8 + 50


@pytest.mark.snappy
def test_a_compressed_connection_is_written_by_the_loop(nsqd: NsqdProcess) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address], snappy=True) as writer:
        for i in range(20):
            writer.pub(topic, b"s%d" % i)
        stats = writer.stats()
    assert stats["written_by_threads"] == 0 and stats["published"] == 20
    assert sorted(drain_bodies(nsqd, topic, 20)) == sorted(b"s%d" % i for i in range(20))


@pytest.mark.slow
@pytest.mark.one_backend
def test_heartbeats_are_answered_while_threads_read_and_after(nsqd: NsqdProcess) -> None:
    """With 1 s heartbeats, threads that publish (and so read the connection themselves) and
    then fall idle (the loop reads again) keep the connection: nsqd would close it after two
    unanswered heartbeats."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address], heartbeat_interval=1000) as writer:
        [conn] = writer.aio.connections
        stop = threading.Event()

        def publisher() -> None:
            while not stop.is_set():
                writer.pub(topic, b"x")

        threads = [threading.Thread(target=publisher) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            seen = conn.heartbeats_received
            wait_until(lambda: conn.heartbeats_received >= seen + 3, timeout=15,
                       what="three heartbeats while threads publish")  # fmt: skip
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        seen = conn.heartbeats_received
        wait_until(lambda: conn.heartbeats_received >= seen + 3, timeout=15,
                   what="three heartbeats while idle")  # fmt: skip
        writer.pub(topic, b"after")
        stats = writer.stats()
        assert stats["connection_losses"] == 0 and stats["written_by_threads"] > 0


@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_a_refused_publish_among_sixteen_threads_loses_nothing(
    nsqd_factory: Any, coalesce: bool
) -> None:
    """nsqd refuses one body (E_BAD_MESSAGE, fatal, then it closes) while threads read and
    write the connection: that publish raises (BadMessageError, or ConnectionClosedError when
    the threads' writes met the closing socket first: a reset drops the error frame), it is
    never stored, and every other publish is acknowledged and stored once or raises a typed
    error (those may or may not be stored). Coalescing, a refused MPUB's messages are sent again
    alone, and only the offending one fails."""
    nsqd = nsqd_factory(extra_args=["--max-msg-size=100"])
    topic = unique()
    acked: list[bytes] = []
    raised: list[bytes] = []
    refused: list[NSQError] = []
    lock = threading.Lock()
    with SyncWriter([nsqd.tcp_address], **FAST, coalesce=coalesce) as writer:
        writer.pub(topic, b"warm")

        def publisher(i: int) -> None:
            for j in range(150):
                if i == 0 and j == 75:
                    try:
                        writer.pub(topic, b"x" * 200)
                    except NSQError as exc:
                        with lock:
                            refused.append(exc)
                body = b"t%d-%d" % (i, j)
                try:
                    writer.pub(topic, body, timeout=10)
                except NSQError:
                    with lock:
                        raised.append(body)
                else:
                    with lock:
                        acked.append(body)

        threads = [threading.Thread(target=publisher, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    assert len(refused) == 1 and refused[0].sent is True
    stored = drain_bodies(nsqd, topic, message_count(nsqd, topic), **FAST)
    counts = {b: stored.count(b) for b in set(stored)}
    assert b"x" * 200 not in counts
    bad = {b: counts.get(b) for b in acked if counts.get(b) != 1}
    assert not bad, f"acknowledged publishes missing (None) or doubled: {bad}"
    assert set(counts) <= {b"warm", *acked, *raised}


def test_the_window_threads_fill_bounds_coroutines_on_the_same_writer(nsqd: NsqdProcess) -> None:
    """max_pending_publishes is one window for threads and coroutines: with nsqd frozen and the
    threads' publishes filling it, a coroutine's publish on the shared Writer is not sent (it
    waits for a slot and fails as never sent), and the window never overshoots."""
    from tests.support import frozen

    topic, max_pending = unique(), 8
    with SyncWriter(
        [nsqd.tcp_address], max_pending_publishes=max_pending, publish_timeout=60_000
    ) as writer:
        writer.pub(topic, b"warm")
        errors: list[BaseException] = []

        def publisher(i: int) -> None:
            try:
                writer.pub(topic, b"t%d" % i)
            except BaseException as exc:
                errors.append(exc)

        with frozen(nsqd):
            threads = [threading.Thread(target=publisher, args=(i,)) for i in range(12)]
            for t in threads:
                t.start()
            wait_until(
                lambda: (
                    writer.stats()["outstanding"] == max_pending
                    and writer.stats()["queued"] == 12 - max_pending
                ),
                what="the threads to fill the window",
            )
            with pytest.raises(NotSentTimeoutError) as info:
                run_in_loop(writer.aio.pub(topic, b"aio", timeout=0.3), timeout=10)
            assert info.value.sent is False
            assert writer.stats()["outstanding"] == max_pending
        for t in threads:
            t.join(30)
        assert errors == []
    assert message_count(nsqd, topic) == 13
