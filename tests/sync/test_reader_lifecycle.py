"""The SyncReader's life cycle details from issue 10: a close waits only for threads that can
still answer, ``stats()`` tells the truth under the facade and after close, and a dead
connection is forgotten at once."""

from __future__ import annotations

import threading
import time

import pytest

from nsqclient.message import Message
from nsqclient.sync import SyncReader, SyncWriter, run_in_loop
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import DEADLINE, channel_stats, collect, drain_bodies, unique

STALL_BOUND = 5.0  # seconds; close_timeout is 30 s: "at once" must not wait it out


def _publish(nsqd: NsqdProcess, topic: str, count: int) -> list[bytes]:
    bodies = [b"m%d" % i for i in range(count)]
    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer:
        writer.mpub(topic, bodies)
    return bodies


def test_close_stops_waiting_once_the_holding_thread_exits(nsqd: NsqdProcess) -> None:
    """A thread takes messages and is still alive when another thread closes: the close waits
    for it; when it exits without answering, what it took is requeued at once."""
    topic = unique()
    bodies = _publish(nsqd, topic, 10)
    reader = SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=10)
    held: list[Message] = []
    took_all, leave = threading.Event(), threading.Event()

    def consume() -> None:
        held.extend(collect(reader, 10, fin=False))
        took_all.set()
        leave.wait(DEADLINE)  # alive, holding everything, then gone without answering

    holder = threading.Thread(target=consume)
    holder.start()
    assert took_all.wait(DEADLINE)
    core = reader.aio
    closer = threading.Thread(target=reader.graceful_close)  # close_timeout: 30 s
    closer.start()
    wait_until(lambda: core.tracker.has_waiters, what="the close to wait for the holder")
    assert closer.is_alive()  # waiting: the holder can still answer
    started = time.monotonic()
    leave.set()
    holder.join(DEADLINE)
    closer.join(DEADLINE)
    assert not closer.is_alive()
    assert time.monotonic() - started < STALL_BOUND
    assert all(m.has_responded for m in held)
    stats = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="the connection to go away",
    )
    assert (stats["in_flight_count"], stats["depth"], stats["timeout_count"]) == (0, 10, 0)
    assert sorted(drain_bodies(nsqd, topic, 10, channel="c")) == sorted(bodies)


def test_stats_queued_counts_what_waits_in_the_bridge(nsqd: NsqdProcess) -> None:
    topic = unique()
    _publish(nsqd, topic, 20)
    with SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=20) as r:
        first = r.get(timeout=DEADLINE)
        assert first is not None
        stats = wait_until(
            lambda: (s := r.stats())["in_flight"] == 20 and s, what="all 20 delivered"
        )
        # one in hand; the other 19 wait in the bridge or in the local buffer
        assert stats["queued"] == 19, stats
        rest = collect(r, 19)
        first.fin()
        after = r.stats()
        assert (after["queued"], after["local_buffered"]) == (0, 0), after
    assert len(rest) == 19


def test_stats_after_close(nsqd: NsqdProcess) -> None:
    topic = unique()
    _publish(nsqd, topic, 3)
    with SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        collect(reader, 3)
    stats = reader.stats()  # as the aio Reader's stats(): readable after close
    assert (stats["state"], stats["finished"], stats["in_flight"]) == ("closed", 3, 0)
    never_used = SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address])
    never_used.close()
    assert never_used.stats()["state"] == "closed"


@pytest.mark.timeout(60)
def test_a_dead_connection_is_forgotten_at_once(nsqd: NsqdProcess) -> None:
    topic = unique()
    _publish(nsqd, topic, 1)
    with SyncReader(
        topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], reconnect_delay=50
    ) as reader:
        collect(reader, 1)
        sink = reader.aio._sink
        (old,) = reader.aio.connections
        assert set(sink._responders) == {old}  # type: ignore[attr-defined]

        async def drop() -> None:
            old.abort()

        run_in_loop(drop(), DEADLINE)
        wait_until(lambda: reader.aio.connections and reader.aio.connections[0] is not old)
        _publish(nsqd, topic, 1)
        collect(reader, 1)  # delivered on the new connection
        assert old not in sink._responders  # type: ignore[attr-defined]
        assert len(sink._responders) == 1  # type: ignore[attr-defined]
