"""What a SyncWriter holds while nsqd is away, and that it is all given back after.

The bound is docs/configuration.md's ("Memory while nsqd is away"), measured with tracemalloc on
the library's own allocations (:mod:`tests.memory_support`): a SyncWriter publishing
(``pub_nowait``) at a steady rate through an outage holds at most ``max_queued_publishes``
tickets (each its encoded command and :data:`PER_TICKET` bytes of bookkeeping) and a failed
connection attempt, plus :data:`SLACK`; the publishing thread blocks on the full queue
meanwhile (the backpressure) instead of memory growing, and once nsqd is back and every
publish resolved the SyncWriter is back within :data:`SLACK` of its level before.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from typing import Any

import pytest

from nsqclient.errors import NSQError
from nsqclient.sync import SyncWriter
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.memory_support import KiB, library_bytes, snapshot, top_diff, traced, unrecorded_logs
from tests.support import unique, wait_until

pytestmark = pytest.mark.timeout(60)

#: seconds nsqd is unreachable under the publishing SyncWriter
OUTAGE = 5.0
RATE = 200  # pub_nowait calls a second
BODY = 1024
QUEUED = 64  # max_queued_publishes
PUBLISH_TIMEOUT = 1.0
#: what a queued ticket costs besides its encoded command (the ticket, its future): documented
PER_TICKET = 1 * KiB
#: a connection's read buffers (the loop's and the publishing threads' door: 64 KiB each)
CONNECTION = 160 * KiB
SLACK = 128 * KiB
SAMPLE_EVERY = 0.5
FAST: dict[str, Any] = {
    "heartbeat_interval": 1000,
    "reconnect_delay": 50,
    "max_reconnect_delay": 250,
    "dial_timeout": 1000,
    "read_timeout": 2000,
    "publish_timeout": int(PUBLISH_TIMEOUT * 1000),
}


@pytest.mark.slow
@pytest.mark.one_backend
def test_sync_writer_through_an_outage_holds_its_queue_and_gives_it_back(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    lock = threading.Lock()
    outcomes: collections.Counter[str] = collections.Counter()
    unresolved = [0]
    body = b"z" * BODY

    def resolved(fut: concurrent.futures.Future[Any]) -> None:
        exc = fut.exception()
        with lock:
            outcomes["acked" if exc is None else type(exc).__name__] += 1
            unresolved[0] -= 1

    def steady(writer: SyncWriter, seconds: float) -> None:
        start, n = time.monotonic(), 0
        while time.monotonic() < start + seconds:
            n += 1
            try:
                future = writer.pub_nowait(topic, body)  # blocks while the queue is full
            except NSQError as exc:
                # the queue stayed full until this publish's own timeout (the loop late to
                # expire the tickets ahead of it): a failed publish, told at once
                with lock:
                    outcomes[type(exc).__name__] += 1
            else:
                with lock:
                    unresolved[0] += 1
                future.add_done_callback(resolved)
            time.sleep(max(0.0, start + n / RATE - time.monotonic()))

    with (
        traced(),
        unrecorded_logs(),
        SyncWriter([proxy.address], max_queued_publishes=QUEUED, **FAST) as writer,
    ):
        steady(writer, 1.0)
        wait_until(lambda: not unresolved[0], what="warm-up resolved")
        before = snapshot()
        base = library_bytes(before)
        bound = QUEUED * (BODY + 64 + PER_TICKET) + CONNECTION + SLACK
        most, most_snap = 0, before
        stop = threading.Event()

        def sample() -> None:
            nonlocal most, most_snap
            while not stop.wait(SAMPLE_EVERY):
                snap = snapshot()
                held = library_bytes(snap) - base
                if held > most:
                    most, most_snap = held, snap

        sampler = threading.Thread(target=sample, name="memory-sampler")
        with lock:
            acked = outcomes["acked"]
        with proxy.refuse():
            proxy.cut()
            sampler.start()
            try:
                steady(writer, OUTAGE)
            finally:
                stop.set()
                sampler.join()
            # resolved while nsqd is still unreachable: each one failed after its timeout
            wait_until(lambda: not unresolved[0], what="the outage's publishes resolved")
        assert most <= bound, f"held {most} B during the outage, bound {bound} B:\n" + top_diff(
            most_snap, before
        )
        with lock:
            failed = sum(outcomes.values()) - outcomes["acked"]
            assert outcomes["acked"] == acked, outcomes  # nothing acknowledged while away
        # the thread was held back by the full queue: far fewer calls than RATE * OUTAGE
        assert 0 < failed < RATE * OUTAGE / 2, outcomes
        # nsqd is back: once the SyncWriter has reconnected (reconnect_delay 50-250 ms, the
        # dial as slow as the machine), publishing resumes
        wait_until(
            lambda: any(c["state"] == "connected" for c in writer.stats()["connections"]),
            what="the SyncWriter connected again",
        )
        steady(writer, 1.0)
        wait_until(lambda: not unresolved[0], what="all resolved")
        assert outcomes["acked"] > acked, outcomes
        after = snapshot()
        grown = library_bytes(after) - base
        assert grown <= SLACK, (
            f"{grown} B more than before the outage (margin {SLACK} B):\n" + top_diff(after, before)
        )
