"""The public facts a test of one's own service needs under faults, with no private name:
``stats()``'s per-connection ``connection_id`` and ``buffered_bytes``, and
``Message.connection_id`` (which connection delivered a message, also through one proxy)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.message import Message
from nsqclient.testing.daemons import NsqdProcess
from nsqclient.testing.faults import FaultProxy
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .fault_support import FAST_CLIENT

pytestmark = pytest.mark.timeout(60)


@pytest.mark.one_backend
async def test_a_partial_frame_shows_in_buffered_bytes_until_the_connection_is_dropped(
    nsq_fault_proxy: FaultProxy,
) -> None:
    async with Writer([nsq_fault_proxy.address], **FAST_CLIENT) as writer:
        await writer.pub(unique(), b"x")
        (before,) = writer.stats()["connections"]
        assert before["buffered_bytes"] == 0
        # the head of a 1000-byte response frame and 10 bytes of it: the rest never comes
        assert nsq_fault_proxy.inject_bytes(struct.pack(">ii", 1000, 0) + b"x" * 10) == 1
        held = await wait_for(
            lambda: writer.stats()["connections"],
            until=lambda conns: conns and conns[0]["buffered_bytes"] >= 18,
            what="the partial frame counted",
        )
        assert held[0]["connection_id"] == before["connection_id"]
        # no frame completes: dropped after two heartbeat intervals, replaced by a new one
        after = await wait_for(
            lambda: writer.stats()["connections"],
            until=lambda conns: conns and conns[0]["connection_id"] != before["connection_id"],
            what="a new connection",
        )
        assert after[0]["address"] == before["address"] and after[0]["buffered_bytes"] == 0
        await writer.pub(unique(), b"y", timeout=DEADLINE)


async def test_messages_name_their_connection_and_two_through_one_proxy_differ(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy
) -> None:
    topic = unique()
    got: dict[str, list[Message]] = {"a": [], "b": []}
    readers = {
        name: Reader(topic, name, nsqd_tcp_addresses=[nsq_fault_proxy.address], **FAST_CLIENT)
        for name in got
    }

    async def publish(count: int) -> None:  # to both channels: each gets every message
        async with Writer([nsqd.tcp_address]) as writer:
            await writer.mpub(topic, [b"m%d" % i for i in range(count)])

    try:
        for name, reader in readers.items():
            reader.set_message_handler(got[name].append)  # returns: FIN
            await reader.start()
        await publish(10)
        await wait_for(lambda: all(len(m) == 10 for m in got.values()), what="10 messages each")
        (a,), (b,) = (r.stats()["connections"] for r in readers.values())
        assert a["address"] == b["address"] == nsq_fault_proxy.address  # one address
        assert a["connection_id"] != b["connection_id"]  # two connections
        for name, entry in (("a", a), ("b", b)):
            assert {m.connection_id for m in got[name]} == {entry["connection_id"]}
            got[name].clear()
        nsq_fault_proxy.cut()
        for reader in readers.values():
            await wait_for(
                lambda reader=reader: reader.stats()["connections"],
                until=lambda conns: (
                    conns
                    and conns[0]["connection_id"] not in (a["connection_id"], b["connection_id"])
                ),
                what="a new connection",
            )
        await publish(10)
        await wait_for(lambda: all(len(m) == 10 for m in got.values()), what="10 more each")
        for name, reader in readers.items():
            (now,) = reader.stats()["connections"]
            assert {m.connection_id for m in got[name]} == {now["connection_id"]}
    finally:
        await asyncio.gather(*(r.close() for r in readers.values()))


def test_a_message_made_by_hand_has_no_connection() -> None:
    assert Message(0, 1, b"0" * 16, b"body").connection_id is None
