"""Channel and connection management, each test run against real nsqd and the embedded one:
ephemeral channels and topics, mem-queue overflow, pause/empty, heartbeats and the idle
disconnect, deletion closing subscribers, consumer limits, sampling, client stats and write
back-pressure."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.protocol import ErrorFrame, Heartbeat
from tests.rawconn_support import Closed, RawClient, mpub_body
from tests.support import wait_for

from .support import channel_stats, http, stats, topic_stats

pytestmark = pytest.mark.timeout(60)

Factory = Callable[..., Any]


async def consumer(
    server: Any, topic: str, channel: str, rdy: int | None = 1, **identify: Any
) -> RawClient:
    client = await RawClient.connect(server.tcp_address)
    await client.setup(**identify)
    await client.sub(topic, channel, rdy)
    return client


async def publisher(server: Any) -> RawClient:
    client = await RawClient.connect(server.tcp_address)
    await client.setup()
    return client


async def test_ephemeral_channel_and_topic_go_with_last_client(make_nsqd: Factory) -> None:
    server = make_nsqd()
    a = await consumer(server, "eph#ephemeral", "c#ephemeral", 1)
    b = await consumer(server, "eph#ephemeral", "c#ephemeral", 1)
    await a.close()
    channel = await wait_for(
        lambda: channel_stats(server, "eph#ephemeral", "c#ephemeral"),
        until=lambda c: c is not None and c["client_count"] == 1,
    )
    assert channel is not None
    await b.close()
    await wait_for(lambda: topic_stats(server, "eph#ephemeral"), until=lambda t: t is None)


async def test_ephemeral_channel_survives_until_a_client_left(make_nsqd: Factory) -> None:
    server = make_nsqd()
    pub = await publisher(server)
    await pub.pub("ephh", b"x")
    response = await http(
        server, "POST", "/channel/create", params={"topic": "ephh", "channel": "c#ephemeral"}
    )
    assert response.status_code == 200
    pub.send(b"NOP\n")
    await pub.sync()
    assert await channel_stats(server, "ephh", "c#ephemeral") is not None
    await pub.close()


async def test_ephemeral_overflow_is_dropped(make_nsqd: Factory) -> None:
    server = make_nsqd(mem_queue_size=5)
    sub = await consumer(server, "over", "c#ephemeral", 0)
    pub = await publisher(server)
    await pub.pub("over", *[b"%d" % i for i in range(8)])
    channel = await wait_for(
        lambda: channel_stats(server, "over", "c#ephemeral"),
        until=lambda c: c["message_count"] == 8,
    )
    assert channel["depth"] == 5
    await sub.close()
    await pub.close()


async def test_one_mpub_reaches_every_channel_and_overflows_the_ephemeral_one(
    make_nsqd: Factory,
) -> None:
    server = make_nsqd(mem_queue_size=5)
    ready = await consumer(server, "mpubs", "a", 3)
    idle = await consumer(server, "mpubs", "b#ephemeral", 0)
    pub = await publisher(server)
    pub.send(b"MPUB mpubs\n" + mpub_body(*[b"%d" % i for i in range(8)]))
    assert await pub.response() == b"OK"
    # three distinct ones of the eight (not in order: past mem_queue_size, real nsqd hands out
    # the memory queue's and the disk queue's messages as its select picks them)
    bodies = [bytes(m.body) for m in await ready.messages(3)]
    assert len(set(bodies)) == 3 and set(bodies) <= {b"%d" % i for i in range(8)}, bodies
    a = await wait_for(
        lambda: channel_stats(server, "mpubs", "a"), until=lambda c: c["message_count"] == 8
    )
    assert (a["depth"], a["in_flight_count"]) == (5, 3)
    b = await wait_for(
        lambda: channel_stats(server, "mpubs", "b#ephemeral"),
        until=lambda c: c["message_count"] == 8,
    )
    assert (b["depth"], b["in_flight_count"]) == (5, 0)
    for c in (ready, idle, pub):
        await c.close()


async def test_pause_and_unpause_topic_and_channel(make_nsqd: Factory) -> None:
    server = make_nsqd()
    # heartbeats far apart: the raw client answers them only while it reads, and on a busy
    # machine the steps below may take longer than two 1 s heartbeats
    sub = await consumer(server, "pause", "c", 10, heartbeat_interval=30000)
    pub = await publisher(server)
    assert (
        await http(server, "POST", "/topic/pause", params={"topic": "pause"})
    ).status_code == 200
    await pub.pub("pause", b"1")
    topic = await topic_stats(server, "pause")
    assert topic is not None and topic["paused"] and topic["depth"] == 1
    await http(server, "POST", "/channel/pause", params={"topic": "pause", "channel": "c"})
    await http(server, "POST", "/topic/unpause", params={"topic": "pause"})
    channel = await wait_for(
        lambda: channel_stats(server, "pause", "c"), until=lambda c: c["depth"] == 1
    )
    assert channel["paused"] and channel["in_flight_count"] == 0
    await http(server, "POST", "/channel/unpause", params={"topic": "pause", "channel": "c"})
    assert bytes((await sub.message()).body) == b"1"
    await sub.close()
    await pub.close()


async def test_empty_topic_and_channel(make_nsqd: Factory) -> None:
    server = make_nsqd()
    pub = await publisher(server)
    await pub.pub("empty", b"1", b"2")
    await http(server, "POST", "/topic/empty", params={"topic": "empty"})
    topic = await topic_stats(server, "empty")
    assert topic is not None and topic["depth"] == 0
    sub = await consumer(server, "empty", "c", 1)
    await pub.pub("empty", b"3", b"4")
    msg = await sub.message()
    await wait_for(lambda: channel_stats(server, "empty", "c"), until=lambda c: c["depth"] == 1)
    await http(server, "POST", "/channel/empty", params={"topic": "empty", "channel": "c"})
    channel = await channel_stats(server, "empty", "c")
    assert channel is not None
    assert (channel["depth"], channel["in_flight_count"]) == (0, 0)
    assert channel["clients"][0]["in_flight_count"] == 0
    sub.send(b"FIN " + msg.id + b"\n")
    assert (await sub.error()).endswith("failed ID not in flight")
    await sub.sync()
    await sub.close()
    await pub.close()


async def test_heartbeats_and_idle_disconnect(make_nsqd: Factory) -> None:
    server = make_nsqd()
    client = await RawClient.connect(server.tcp_address)
    client.answer_heartbeats = False
    await client.setup(heartbeat_interval=1000)
    assert isinstance(await client.event(timeout=5, heartbeats=True), Heartbeat)
    events = await client.expect_closed(timeout=10)  # never answered: closed, no error frame
    assert all(isinstance(e, Heartbeat) for e in events)


async def test_nop_keeps_a_connection_alive(make_nsqd: Factory) -> None:
    server = make_nsqd()
    client = await RawClient.connect(server.tcp_address)
    await client.setup(heartbeat_interval=1000)
    for _ in range(4):  # each heartbeat is answered with NOP by the client
        assert isinstance(await client.event(timeout=5, heartbeats=True), Heartbeat)
    await client.sync()
    await client.close()


async def test_message_ids_are_unique_hex(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "ids", "c", 200)
    pub = await publisher(server)
    await pub.pub("ids", *[b"m"] * 150)
    ids = [m.id for m in await sub.messages(150)]
    assert len(set(ids)) == 150
    assert all(re.fullmatch(rb"[0-9a-f]{16}", i) for i in ids)
    await sub.close()
    await pub.close()


@pytest.mark.parametrize("what", ["channel", "topic"])
async def test_deleting_closes_subscribers_without_error(make_nsqd: Factory, what: str) -> None:
    server = make_nsqd()
    sub = await consumer(server, "del", "c", 1)
    params = {"topic": "del", "channel": "c"} if what == "channel" else {"topic": "del"}
    assert (await http(server, "POST", f"/{what}/delete", params=params)).status_code == 200
    events = await sub.expect_closed(timeout=10)
    assert not [e for e in events if isinstance(e, ErrorFrame)]


async def test_max_channel_consumers(make_nsqd: Factory) -> None:
    server = make_nsqd(max_channel_consumers=1)
    first = await consumer(server, "limit", "c", 1)
    second = await RawClient.connect(server.tcp_address)
    await second.setup()
    second.send(b"SUB limit c\n")
    assert (
        await second.error() == "E_SUB_FAILED SUB failed consumers for limit:c exceeds limit of 1"
    )
    with pytest.raises(Closed):
        await second.event()
    await first.close()


async def test_sampling_drops_part_of_the_stream(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "sample", "c", 500, sample_rate=30)
    pub = await publisher(server)
    await pub.pub("sample", *[b"s"] * 300)
    channel = await wait_for(
        lambda: channel_stats(server, "sample", "c"), until=lambda c: c["depth"] == 0
    )
    delivered = channel["in_flight_count"]
    assert 0 < delivered < 300  # about 31% is kept; the rest is consumed, not requeued
    assert channel["clients"][0]["message_count"] == delivered
    assert len(await sub.messages(delivered)) == delivered
    await sub.close()
    await pub.close()


async def test_client_stats_fields(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(
        server, "cstats", "c", 3, client_id="me", hostname="box", user_agent="raw/1"
    )
    pub = await publisher(server)
    await pub.pub("cstats", b"1", b"2")
    a, b = await sub.messages(2)
    sub.send(b"FIN " + a.id + b"\nREQ " + b.id + b" 60000\n")
    await sub.sync()
    channel = await channel_stats(server, "cstats", "c")
    assert channel is not None
    client = channel["clients"][0]
    assert {
        k: client[k]
        for k in (
            "client_id",
            "hostname",
            "user_agent",
            "state",
            "ready_count",
            "in_flight_count",
            "message_count",
            "finish_count",
            "requeue_count",
            "version",
            "tls",
            "snappy",
            "deflate",
        )
    } == {
        "client_id": "me",
        "hostname": "box",
        "user_agent": "raw/1",
        "state": 3,
        "ready_count": 3,
        "in_flight_count": 0,
        "message_count": 2,
        "finish_count": 1,
        "requeue_count": 1,
        "version": "V2",
        "tls": False,
        "snappy": False,
        "deflate": False,
    }
    assert channel["deferred_count"] == 1 and channel["requeue_count"] == 1
    doc = await stats(server, "cstats")
    producers = doc["producers"]
    assert [p["pub_counts"] for p in producers if "pub_counts" in p] == [
        [{"topic": "cstats", "count": 2}]
    ]
    await asyncio.gather(sub.close(), pub.close())


async def test_a_consumer_that_stops_reading_is_not_flooded(make_nsqd: Factory) -> None:
    """Write back-pressure: deliveries stop while the socket is full, and the silent client is
    dropped (write/read deadlines); what it had in flight stays in flight."""
    server = make_nsqd()
    slow = await consumer(server, "bp", "c", 2500, heartbeat_interval=2000)
    slow.answer_heartbeats = False
    pub = await publisher(server)
    body = b"x" * 100_000
    for _ in range(6):
        await pub.pub("bp", *[body] * 50)
    channel = await wait_for(
        lambda: channel_stats(server, "bp", "c"), until=lambda c: c["client_count"] == 0, timeout=20
    )
    assert 0 < channel["in_flight_count"] < 300
    assert channel["depth"] + channel["in_flight_count"] == 300
    slow.writer.transport.abort()
    await pub.close()
