"""``stats()`` of the asyncio Reader, Writer and Connection: exactly the keys and types that
:mod:`nsqclient.stats` declares, with exact values after a known workload on a real nsqd."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nsqclient.aio import Message, Writer
from nsqclient.errors import BadMessageError
from nsqclient.stats import ConnectionStats, ReaderStats, WriterStats
from nsqclient.testing.daemons import NsqdProcess
from tests.stats_support import check_shape
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import MakeReader, client_totals

FAST_RECONNECT = {"reconnect_delay": 50, "max_reconnect_delay": 300}


@pytest.fixture
def small_nsqd(nsqd_factory: Any) -> NsqdProcess:
    """An nsqd that refuses messages over 1,024 bytes (a publish that fails, deterministically)."""
    return nsqd_factory(extra_args=["--max-msg-size=1024"])  # type: ignore[no-any-return]


async def test_writer_stats_keys_and_values(small_nsqd: NsqdProcess) -> None:
    topic = unique()
    # max_msg_size above nsqd's: the big body is sent and nsqd refuses it (fatal: it closes)
    writer = Writer(
        [small_nsqd.tcp_address], max_pending_publishes=17, max_msg_size=1_000_000, **FAST_RECONNECT
    )
    before = writer.stats()
    check_shape(before, WriterStats)
    assert before["connections"] == [] and before["published"] == 0
    async with asyncio.timeout(DEADLINE):
        await writer.start()
        for i in range(3):
            await writer.pub(topic, b"p%d" % i)
        await writer.mpub(topic, [b"m0", b"m1", b"m2", b"m3"])
        await writer.dpub(topic, 0, b"d0")
        with pytest.raises(BadMessageError):
            await writer.pub(topic, b"x" * 2048)
        await wait_for(lambda: writer.stats()["reconnects"] == 1, what="the reconnect")
        await writer.pub(topic, b"after")
        stats = writer.stats()
        (conn,) = writer.connections
        await writer.close()
    check_shape(stats, WriterStats)
    assert stats == {
        "published": 9,
        "published_over_http": 0,
        "failed": 1,
        "resent": 0,
        "coalesced_batches": 0,
        "coalesced_messages": 0,
        "coalesced_split": 0,
        "outstanding": 0,
        "max_pending_publishes": 17,
        "connection_losses": 1,
        "reconnects": 1,
        "nsqd_down": [],
        "connections": [
            {
                "address": small_nsqd.tcp_address,
                "connection_id": conn.connection_id,  # the one after the reconnect
                "state": "connected",
                "pending": 0,
                "buffered_bytes": 0,
            }
        ],
    }
    after = writer.stats()
    check_shape(after, WriterStats)
    assert after["connections"] == [] and after["published"] == 9


async def test_reader_and_connection_stats_keys_and_values(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """8 messages: 5 FIN'd, 2 REQ'd for a minute, 1 REQ'd at once and given up on redelivery."""
    topic, channel = unique(), unique()

    def handler(msg: Message) -> Any:
        if msg.body.startswith(b"req"):
            msg.req(60_000, backoff=False)
        elif msg.body == b"again":
            msg.req(0, backoff=False)
        return None

    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=9, max_attempts=1
    )
    check_shape(reader.stats(), ReaderStats)
    reader.set_message_handler(handler)
    async with asyncio.timeout(DEADLINE), Writer([nsqd.tcp_address]) as writer:
        await reader.start()
        await writer.mpub(topic, [b"fin%d" % i for i in range(5)] + [b"req1", b"req2", b"again"])
        await wait_for(
            lambda: (
                (t := client_totals([nsqd], topic, channel))["finish_count"] == 6
                and t["requeue_count"] == 3
            ),
            what="nsqd to apply 6 FIN (one a give-up) and 3 REQ",
        )
        await asyncio.sleep(0)  # the RDY decision of the last answer leaves at the loop's turn
        stats = reader.stats()
        (conn,) = reader.connections
        conn_stats = conn.stats()
        await reader.graceful_close()
    check_shape(stats, ReaderStats)
    check_shape(conn_stats, ConnectionStats)
    assert stats["connections"] == [conn_stats]
    heartbeats = conn_stats["heartbeats_received"]  # timing-dependent: only its type is exact
    assert conn_stats == {
        "address": nsqd.tcp_address,
        "connection_id": conn.connection_id,
        "state": "subscribed",
        "buffered_bytes": 0,
        "rdy": 9,
        "in_flight": 0,
        "received": 9,
        "finished": 6,
        "requeued": 3,
        "pending": 0,
        "heartbeats_received": heartbeats,
    }
    assert stats == {
        "topic": topic,
        "channel": channel,
        "state": "running",
        "received": 9,
        "finished": 6,
        "requeued": 3,
        "given_up": 1,
        "in_flight": 0,
        "lost_on_disconnect": 0,
        "response_errors": 0,
        "timed_out": 0,
        "queued": 0,
        "connecting": 0,
        "max_in_flight": 9,
        "total_rdy": 9,
        "backoff_level": 0,
        "in_backoff": False,
        "connection_losses": 0,
        "reconnects": 0,
        "nsqd_down": [],
        "connections": [conn_stats],
    }
    after = reader.stats()
    check_shape(after, ReaderStats)
    assert after["state"] == "closed" and after["connections"] == []
    assert (after["received"], after["finished"], after["requeued"]) == (9, 6, 3)
