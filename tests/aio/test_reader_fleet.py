"""A Reader across a fleet of nsqd (dozens embedded, a few real processes): the adaptive RDY
policy drains every nsqd when there are more of them than ``max_in_flight``, gives a busy nsqd
most of the budget, and nsqd's in-flight (its own ``/stats``) never exceeds ``max_in_flight``.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from nsqclient.aio import Message
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import unique
from .reader_support import (
    MakeReader,
    NsqdFactory,
    channel_stats,
    create_channel,
    publish,
    wait_connected,
)

pytestmark = pytest.mark.timeout(60)


def fleet(nsq_backend: str, nsqd_factory: NsqdFactory, embedded: int, real: int) -> list[Any]:
    """Dozens of embedded nsqd are cheap; real ones are processes, so fewer of them."""
    return [nsqd_factory() for _ in range(embedded if nsq_backend == "embedded" else real)]


def in_flight_sum(nsqds: list[NsqdProcess], topic: str, channel: str) -> int:
    return sum(int(channel_stats(n, topic, channel)["in_flight_count"]) for n in nsqds)


@pytest.mark.one_backend
async def test_more_nsqd_than_max_in_flight_all_drained_and_in_flight_within_budget(
    nsq_backend: str, nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    """32 embedded nsqd (8 real) with 20 messages each, max_in_flight 16 (4): every nsqd is
    drained (go-nsq's rotation took N / max_in_flight x 10 s), and in every /stats sample taken
    across all nsqd during the redistribution in-flight stays within max_in_flight."""
    nsqds = fleet(nsq_backend, nsqd_factory, 32, 8)
    mif = 16 if len(nsqds) > 8 else 4
    per_node = 20
    topic, channel = unique(), unique()
    for i, nsqd in enumerate(nsqds):
        await create_channel(nsqd, topic, channel)
        await publish(nsqd, topic, [b"%d-%d" % (i, j) for j in range(per_node)])
    by_node: collections.Counter[str | None] = collections.Counter()
    # the first deliveries are held until three samples saw them in flight, so that the
    # samples below are taken during the redistribution however slow the machine is
    held = asyncio.Event()

    async def handler(msg: Message) -> None:
        by_node[msg.nsqd_address] += 1
        await held.wait()
        await asyncio.sleep(0.001)  # keep messages in flight for a moment

    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[n.tcp_address for n in nsqds], max_in_flight=mif
    )
    assert reader.config.rdy_strategy == "adaptive"  # the default
    reader.set_message_handler(handler, concurrency=mif)
    samples: list[int] = []
    total = per_node * len(nsqds)

    async def sample() -> None:
        await wait_for(lambda: sum(by_node.values()) > 0, 20, what="a first delivery")
        while sum(by_node.values()) < total:
            await asyncio.sleep(0)  # let FINs and RDY already decided reach the sockets
            samples.append(in_flight_sum(nsqds, topic, channel))  # blocking: one cut
            if len(samples) >= 3:
                held.set()
            await asyncio.sleep(0.05)  # (each cut stops the loop: leave it time to work)

    async with asyncio.timeout(45):
        await reader.start()
        await wait_connected(reader, len(nsqds))
        sampler = asyncio.create_task(sample())
        await wait_for(lambda: sum(by_node.values()) == total, 40, what="every nsqd drained")
        await sampler
        await reader.graceful_close()
    assert by_node == {n.tcp_address: per_node for n in nsqds}
    assert len(samples) >= 3 and max(samples) > 0
    assert max(samples) <= mif, samples
    for nsqd in nsqds:
        assert channel_stats(nsqd, topic, channel)["depth"] == 0


async def test_one_busy_nsqd_gets_most_of_the_budget(
    nsq_backend: str, nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    """One busy nsqd among 32 (8 real), slow handlers: its RDY reaches most of max_in_flight
    (go-nsq's even split gives it max_in_flight / 32), and nsqd sees that RDY too."""
    nsqds = fleet(nsq_backend, nsqd_factory, 32, 8)
    mif = 64 if len(nsqds) > 8 else 32
    topic, channel = unique(), unique()
    busy = nsqds[0]
    for nsqd in nsqds:
        await create_channel(nsqd, topic, channel)
    await publish(busy, topic, [b"m"] * (4 * mif))
    release = asyncio.Event()

    async def handler(msg: Message) -> None:
        await release.wait()  # slow handlers: the busy nsqd stays at its RDY

    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[n.tcp_address for n in nsqds], max_in_flight=mif
    )
    reader.set_message_handler(handler, concurrency=mif)
    async with asyncio.timeout(45):
        await reader.start()
        await wait_connected(reader, len(nsqds))
        conn = next(c for c in reader.connections if c.address == busy.tcp_address)
        await wait_for(lambda: conn.rdy >= 0.8 * mif, 20, what="the busy nsqd's RDY")

        def nsqd_ready() -> list[int]:
            return [int(c["ready_count"]) for c in channel_stats(busy, topic, channel)["clients"]]

        # nsqd applies the RDY once it has read it: on a loaded machine, not within one yield
        await wait_for(lambda: nsqd_ready() == [conn.rdy], 20, what="nsqd's view of that RDY")
        assert reader.stats()["total_rdy"] <= mif
        assert in_flight_sum(nsqds, topic, channel) <= mif
        release.set()
        await wait_for(lambda: reader.stats()["finished"] == 4 * mif, 20, what="the backlog")
        await reader.graceful_close()
    assert channel_stats(busy, topic, channel)["depth"] == 0


async def test_even_split_stays_available(
    nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    """rdy_strategy="even" is go-nsq's split: max_in_flight // connections each, whatever is
    waiting where."""
    nsqds = [nsqd_factory() for _ in range(4)]
    topic, channel = unique(), unique()
    await create_channel(nsqds[0], topic, channel)
    await publish(nsqds[0], topic, [b"m"] * 40)
    got: list[Message] = []
    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[n.tcp_address for n in nsqds],
        max_in_flight=8,
        rdy_strategy="even",
    )
    reader.set_message_handler(got.append, direct=True)
    async with asyncio.timeout(30):
        await reader.start()
        await wait_connected(reader, 4)
        await wait_for(lambda: len(got) == 40, what="the backlog")
        # (a newcomer's share waits one window for what the others' nsqd may have sent)
        await wait_for(lambda: sorted(c.rdy for c in reader.connections) == [2, 2, 2, 2])
        await reader.graceful_close()
