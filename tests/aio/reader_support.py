"""Helpers for the Reader tests against real nsqd: publishing, RDY snapshots from ``/stats``,
per-client counters, and the "no task left behind" check.

Generic helpers (``wait_for``, ``unique``, ``frozen``, ``Stats``) live in ``conftest.py``;
these are the Reader-specific ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nsqclient.aio import Message, Reader
from nsqclient.http import NsqdHTTPClient
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE

NsqdFactory = Callable[..., NsqdProcess]
MakeReader = Callable[..., Reader]  # the ``make_reader`` fixture (conftest.py)

#: options that keep reconnects, discovery and redistribution quick in tests (milliseconds)
FAST: dict[str, Any] = {
    "reconnect_delay": 50,
    "max_reconnect_delay": 250,
    "lookupd_poll_interval": 1000,  # the least allowed: below one second is refused
    "lookupd_poll_jitter": 0.0,
    "rdy_redistribute_interval": 50,
    "low_rdy_idle_timeout": 1_000,
    "low_rdy_timeout": 1_000,
}


async def publish(nsqd: NsqdProcess, topic: str, bodies: Iterable[bytes]) -> None:
    """MPUB over nsqd's HTTP API (independent of the TCP client under test)."""
    bodies = list(bodies)
    async with NsqdHTTPClient(nsqd.http_address) as http:
        if len(bodies) == 1:
            await http.pub(topic, bodies[0])
        else:
            await http.mpub(topic, bodies)


async def create_channel(nsqd: NsqdProcess, topic: str, channel: str) -> None:
    async with NsqdHTTPClient(nsqd.http_address) as http:
        await http.create_topic(topic)
        await http.create_channel(topic, channel)


def channel_stats(nsqd: NsqdProcess, topic: str, channel: str) -> dict[str, Any]:
    """The channel's ``/stats`` entry (blocking HTTP: the event loop stands still meanwhile).

    A missing topic or channel reads as an empty channel.
    """
    stats = nsqd.stats(topic, channel)
    for t in stats.get("topics") or ():
        if t["topic_name"] == topic:
            for c in t.get("channels") or ():
                if c["channel_name"] == channel:
                    return dict(c)
    return {
        "depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "clients": [],
    }


def client_totals(nsqds: Sequence[NsqdProcess], topic: str, channel: str) -> dict[str, int]:
    """``finish_count``/``requeue_count``/``message_count``/``in_flight_count`` summed over the
    channel's current clients on every nsqd."""
    totals = {"finish_count": 0, "requeue_count": 0, "message_count": 0, "in_flight_count": 0}
    for nsqd in nsqds:
        for client in channel_stats(nsqd, topic, channel).get("clients") or ():
            for key in totals:
                totals[key] += int(client[key])
    return totals


def rdy_snapshot(nsqds: Sequence[NsqdProcess], topic: str, channel: str) -> dict[str, list[int]]:
    """``ready_count`` of every client of ``topic``/``channel``, per nsqd TCP address.

    The reads are blocking, so the Reader (on this event loop) cannot change any RDY while they
    run; they are repeated until two rounds agree, so RDY commands that were still on their way
    when the loop stopped have been applied. The result is one consistent cut across all nsqd.
    """
    previous: dict[str, list[int]] | None = None
    for _ in range(50):
        current = {
            nsqd.tcp_address: sorted(
                int(c["ready_count"])
                for c in channel_stats(nsqd, topic, channel).get("clients") or ()
            )
            for nsqd in nsqds
        }
        if current == previous:
            return current
        previous = current
    raise AssertionError(f"nsqd /stats never settled: {previous}")


async def wait_all_finished(nsqd: NsqdProcess, topic: str, channel: str) -> None:
    """Wait until nsqd has applied every FIN on the channel: nothing in flight, nothing queued.

    A handler having run is not enough before a restart: nsqd flushes what is still in flight to
    disk and delivers it again, a correct at-least-once repeat that would fail an exact count.
    """
    await wait_for(
        lambda: (
            (c := channel_stats(nsqd, topic, channel))["in_flight_count"] == 0 and c["depth"] == 0
        ),
        what=f"nsqd {nsqd.tcp_address} to apply every FIN on {topic}/{channel}",
    )


def rdy_total(snapshot: dict[str, list[int]]) -> int:
    return sum(sum(v) for v in snapshot.values())


async def wait_rdy(
    nsqds: Sequence[NsqdProcess],
    topic: str,
    channel: str,
    expected: dict[str, list[int]],
    timeout: float = DEADLINE,
) -> dict[str, list[int]]:
    """Wait until nsqd's view of RDY per node is exactly ``expected``."""
    return await wait_for(  # type: ignore[no-any-return]
        lambda: (s := rdy_snapshot(nsqds, topic, channel)) == expected and s,
        timeout,
        what=f"nsqd ready_count {expected}",
    )


def other_tasks(baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks alive now that were not alive at ``baseline``, besides the current one."""
    return {
        t
        for t in asyncio.all_tasks()
        if t not in baseline and t is not asyncio.current_task() and not t.done()
    }


async def wait_no_tasks_left(baseline: set[asyncio.Task[Any]]) -> None:
    await wait_for(lambda: not other_tasks(baseline), what="every task of the Reader to finish")


async def wait_connected(reader: Reader, count: int) -> None:
    await wait_for(
        lambda: sum(c.is_open for c in reader.connections) == count,
        what=f"{count} subscribed connections",
    )


RECOVERY = 10.0  # seconds: far inside nsqd's default 60 s msg_timeout


async def recover_all(nsqd: NsqdProcess, topic: str, channel: str, count: int) -> list[Message]:
    """A fresh Reader gets every message back well inside msg_timeout (what a close requeued)."""
    got: list[Message] = []
    fresh = Reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=count)
    fresh.set_message_handler(got.append, direct=True)
    try:
        async with asyncio.timeout(RECOVERY):
            await fresh.start()
            await wait_for(lambda: len(got) == count, RECOVERY, "every message back")
            await fresh.graceful_close()
    finally:
        await fresh.close()
    return got
