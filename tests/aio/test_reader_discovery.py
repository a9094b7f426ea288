"""Finding nsqd through nsqlookupd while the Reader runs: new producers, restarts, several
lookupd (one of them down)."""

from __future__ import annotations

import asyncio

import pytest

from nsqclient.aio import Message
from nsqclient.testing.daemons import NsqCluster, free_port
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import FAST, MakeReader, publish, wait_all_finished, wait_connected

pytestmark = pytest.mark.timeout(60)


async def test_lookupd_discovered_nsqd_appearing_while_running_is_picked_up(
    nsq_cluster: NsqCluster, make_reader: MakeReader
) -> None:
    lookupd, nsqds = nsq_cluster.lookupd, nsq_cluster.nsqds
    topic, channel = unique(), unique()
    await publish(nsqds[0], topic, [b"from node 0"])
    await asyncio.to_thread(lookupd.wait_for_topic, topic)  # 404 until nsqd registers
    got: list[Message] = []
    reader = make_reader(topic, channel, lookupd_http_addresses=[lookupd.http_address], **FAST)
    reader.set_message_handler(got.append, direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await wait_for(lambda: len(got) == 1)
        assert [c.address for c in reader.connections] == [nsqds[0].tcp_address]
        # the topic appears on another nsqd: the next poll finds it
        await publish(nsqds[1], topic, [b"from node 1"])
        await wait_for(lambda: len(got) == 2, what="the message on the new node")
        assert got[1].nsqd_address == nsqds[1].tcp_address
        assert sorted(c.address for c in reader.connections) == sorted(
            n.tcp_address for n in nsqds[:2]
        )
        await reader.graceful_close()


async def test_lookupd_discovered_nsqd_is_reconnected_after_a_restart(
    nsq_cluster: NsqCluster, make_reader: MakeReader
) -> None:
    lookupd, nsqd = nsq_cluster.lookupd, nsq_cluster.nsqds[0]
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"before"])
    await asyncio.to_thread(lookupd.wait_for_topic, topic)  # 404 until nsqd registers
    got: list[bytes] = []
    reader = make_reader(topic, channel, lookupd_http_addresses=[lookupd.http_address], **FAST)
    reader.set_message_handler(lambda m: got.append(m.body), direct=True)
    async with asyncio.timeout(DEADLINE + 10):
        await reader.start()
        await wait_for(lambda: got == [b"before"])
        await wait_all_finished(nsqd, topic, channel)  # else the restart redelivers it
        (first,) = reader.connections
        await asyncio.to_thread(nsqd.restart)
        await wait_for(lambda: reader.connections and reader.connections[0] is not first)
        await wait_connected(reader, 1)
        await publish(nsqd, topic, [b"after"])
        await wait_for(lambda: got == [b"before", b"after"])
        await reader.graceful_close()


async def test_a_dead_lookupd_is_skipped_for_the_next_one(
    nsq_cluster: NsqCluster, make_reader: MakeReader
) -> None:
    lookupd, nsqd = nsq_cluster.lookupd, nsq_cluster.nsqds[2]
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"found"])
    await asyncio.to_thread(lookupd.wait_for_topic, topic)  # 404 until nsqd registers
    got: list[Message] = []
    dead = f"127.0.0.1:{free_port()}"
    reader = make_reader(
        topic, channel, lookupd_http_addresses=[dead, lookupd.http_address], **FAST
    )
    reader.set_message_handler(got.append, direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await wait_for(lambda: [m.body for m in got] == [b"found"])
        assert got[0].nsqd_address == nsqd.tcp_address
        await reader.graceful_close()
