"""RDY management against real nsqd, checked through nsqd's own ``/stats`` (``ready_count``).

Every snapshot is one consistent cut across all nsqd (see ``reader_support.rdy_snapshot``).
"""

from __future__ import annotations

import asyncio
import collections
import logging

import pytest

from nsqclient.aio import Message
from nsqclient.testing.daemons import NsqCluster
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import (
    FAST,
    MakeReader,
    NsqdFactory,
    channel_stats,
    client_totals,
    create_channel,
    publish,
    rdy_snapshot,
    rdy_total,
    wait_connected,
    wait_rdy,
)

pytestmark = pytest.mark.timeout(90)


@pytest.mark.slow
@pytest.mark.parametrize("max_in_flight", [1, 2])
async def test_more_connections_than_max_in_flight_no_starvation_and_budget_holds(
    nsq_cluster: NsqCluster, make_reader: MakeReader, max_in_flight: int
) -> None:
    """Three nsqd, max_in_flight below that: every node is drained (redistribution) and the RDY
    total that nsqd sees never exceeds max_in_flight."""
    nsqds = nsq_cluster.nsqds
    topic, channel = unique(), unique()
    per_node = 15
    for i, nsqd in enumerate(nsqds):
        await create_channel(nsqd, topic, channel)
        await publish(nsqd, topic, [b"%d-%d" % (i, j) for j in range(per_node)])
    await asyncio.to_thread(  # lookupd answers 404 until nsqd registers the topic
        nsq_cluster.lookupd.wait_for_topic, topic, nsq_cluster.nsqd_tcp_addresses
    )
    by_node: collections.Counter[str | None] = collections.Counter()

    async def handler(msg: Message) -> None:
        by_node[msg.nsqd_address] += 1
        await asyncio.sleep(0.002)  # keep messages in flight for a moment

    reader = make_reader(
        topic,
        channel,
        lookupd_http_addresses=[nsq_cluster.lookupd.http_address],
        max_in_flight=max_in_flight,
        **FAST,
    )
    reader.set_message_handler(handler, concurrency=max_in_flight)
    snapshots: list[dict[str, list[int]]] = []
    done = asyncio.Event()

    async def sample() -> None:  # from before the first connection until everything is drained
        while not done.is_set():
            snapshots.append(rdy_snapshot(nsqds, topic, channel))
            await asyncio.sleep(0.03)  # sampling period

    sampler = asyncio.create_task(sample())
    try:
        async with asyncio.timeout(60):
            await reader.start()
            await wait_connected(reader, 3)
            totals = await wait_for(
                lambda: (
                    (t := client_totals(nsqds, topic, channel))["finish_count"] == 3 * per_node
                    and t
                ),
                what="every node drained",
            )
            done.set()
            await sampler
            await reader.graceful_close()
    finally:
        sampler.cancel()
    over = [s for s in snapshots if rdy_total(s) > max_in_flight]
    assert not over, over
    assert all(len(v) <= 1 for s in snapshots for v in s.values())  # one client per node
    assert by_node == {nsqd.tcp_address: per_node for nsqd in nsqds}
    assert totals["requeue_count"] == 0
    assert any(rdy_total(s) == max_in_flight for s in snapshots)
    for nsqd in nsqds:
        assert channel_stats(nsqd, topic, channel)["depth"] == 0


async def test_share_per_connection_is_clamped_to_max_rdy_count(
    nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    """max_in_flight 100 over three nsqd allowing RDY 5 at most: 5 each (a larger RDY would be
    a fatal E_INVALID); lowering max_in_flight to 9 gives 3 each."""
    nsqds = [nsqd_factory(extra_args=["--max-rdy-count=5"]) for _ in range(3)]
    topic, channel = unique(), unique()
    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[n.tcp_address for n in nsqds],
        max_in_flight=100,
    )
    got: list[Message] = []
    reader.set_message_handler(got.append, direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        assert [c.max_rdy_count for c in reader.connections] == [5, 5, 5]
        await wait_rdy(nsqds, topic, channel, {n.tcp_address: [5] for n in nsqds})
        assert [c["rdy"] for c in reader.stats()["connections"]] == [5, 5, 5]
        for nsqd in nsqds:
            await publish(nsqd, topic, [b"m"] * 20)
        await wait_for(lambda: len(got) == 60)
        reader.set_max_in_flight(9)
        await wait_rdy(nsqds, topic, channel, {n.tcp_address: [3] for n in nsqds})
        await reader.graceful_close()
    assert reader.stats()["finished"] == 60


async def test_set_max_in_flight_at_run_time_raise_lower_and_pause(
    nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    nsqds = [nsqd_factory(), nsqd_factory()]
    a, b = (n.tcp_address for n in nsqds)
    topic, channel = unique(), unique()
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[a, b], max_in_flight=2)
    got: list[Message] = []
    reader.set_message_handler(got.append, direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await wait_rdy(nsqds, topic, channel, {a: [1], b: [1]})
        reader.set_max_in_flight(10)
        await wait_rdy(nsqds, topic, channel, {a: [5], b: [5]})
        reader.set_max_in_flight(4)
        await wait_rdy(nsqds, topic, channel, {a: [2], b: [2]})
        assert reader.max_in_flight == 4
        # pause: RDY 0 on both, then nothing is delivered whatever is published
        reader.set_max_in_flight(0)
        await wait_rdy(nsqds, topic, channel, {a: [0], b: [0]})
        received = reader.stats()["received"]
        for nsqd in nsqds:
            await publish(nsqd, topic, [b"while paused"] * 10)
        for nsqd in nsqds:
            chan = channel_stats(nsqd, topic, channel)
            assert (chan["depth"], chan["in_flight_count"]) == (10, 0)
        assert rdy_snapshot(nsqds, topic, channel) == {a: [0], b: [0]}
        assert reader.stats()["received"] == received == 0
        # resume
        reader.set_max_in_flight(4)
        await wait_for(lambda: len(got) == 20, what="the paused backlog")
        await wait_rdy(nsqds, topic, channel, {a: [2], b: [2]})
        await reader.graceful_close()
    for nsqd in nsqds:
        assert channel_stats(nsqd, topic, channel)["depth"] == 0


async def test_max_in_flight_zero_starts_paused_until_set_max_in_flight(
    nsqd_factory: NsqdFactory, make_reader: MakeReader, caplog: pytest.LogCaptureFixture
) -> None:
    """max_in_flight=0 is a pause from the start: subscribed with RDY 0 (said at WARNING),
    nothing delivered whatever waits on the channel, until set_max_in_flight(n)."""
    nsqd = nsqd_factory()
    topic, channel = unique(), unique()
    await create_channel(nsqd, topic, channel)
    await publish(nsqd, topic, [b"waiting"] * 5)
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=0)
    got: list[Message] = []
    reader.set_message_handler(got.append, direct=True)
    caplog.set_level(logging.WARNING, "nsqclient.reader")
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await wait_connected(reader, 1)
        await wait_rdy([nsqd], topic, channel, {nsqd.tcp_address: [0]})
        chan = channel_stats(nsqd, topic, channel)
        assert (chan["depth"], chan["in_flight_count"]) == (5, 0)
        assert reader.stats()["received"] == 0 and not got
        assert any("starts paused" in r.getMessage() for r in caplog.records)
        reader.set_max_in_flight(5)
        await wait_for(lambda: len(got) == 5, what="the backlog after the pause")
        await reader.graceful_close()
    assert channel_stats(nsqd, topic, channel)["depth"] == 0
