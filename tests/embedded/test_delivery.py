"""Delivery semantics, each test run against real nsqd and the embedded one (``backend``).

The same assertions must hold for both: fan-out to channels, backlog kept until the first channel,
one ready client per message, RDY as a window, in-flight timeouts and redelivery (also after the
consumer disconnected: only when the timeout passes), REQ/DPUB deferral, TOUCH, CLS.
Timeout waits are generous: real nsqd only notices a new channel's timeouts at its next 5 s
queue-scan refresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.rawconn_support import RawClient
from tests.support import wait_for

from .support import channel_stats, topic_stats

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


async def test_every_channel_gets_a_copy(make_nsqd: Factory) -> None:
    server = make_nsqd()
    c1 = await consumer(server, "fan", "one", 10)
    c2 = await consumer(server, "fan", "two", 10)
    pub = await publisher(server)
    await pub.pub("fan", b"a", b"b", b"c")
    got1 = await c1.messages(3)
    got2 = await c2.messages(3)
    assert sorted(bytes(m.body) for m in got1) == [b"a", b"b", b"c"]
    assert {m.id for m in got1} == {m.id for m in got2}
    assert all(m.attempts == 1 for m in got1 + got2)
    for c in (c1, c2, pub):
        await c.close()


async def test_topic_keeps_backlog_until_first_channel(make_nsqd: Factory) -> None:
    server = make_nsqd()
    pub = await publisher(server)
    await pub.pub("backlog", b"1", b"2", b"3")
    topic = await topic_stats(server, "backlog")
    assert topic is not None and topic["depth"] == 3 and topic["channels"] == []
    sub = await consumer(server, "backlog", "late", 10)
    assert sorted(bytes(m.body) for m in await sub.messages(3)) == [b"1", b"2", b"3"]
    topic = await topic_stats(server, "backlog")
    assert topic is not None and topic["depth"] == 0 and topic["message_count"] == 3
    await pub.close()
    await sub.close()


async def test_new_channel_only_gets_later_messages(make_nsqd: Factory) -> None:
    server = make_nsqd()
    first = await consumer(server, "later", "first", 0)
    pub = await publisher(server)
    await pub.pub("later", b"old")
    await wait_for(lambda: channel_stats(server, "later", "first"), until=lambda c: c["depth"] == 1)
    second = await consumer(server, "later", "second", 5)
    await pub.pub("later", b"new")
    assert bytes((await second.message()).body) == b"new"
    second_stats = await channel_stats(server, "later", "second")
    assert second_stats is not None and second_stats["message_count"] == 1
    for c in (first, second, pub):
        await c.close()


async def test_each_message_to_exactly_one_client_of_a_channel(make_nsqd: Factory) -> None:
    server = make_nsqd()
    a = await consumer(server, "share", "c", 100)
    b = await consumer(server, "share", "c", 100)
    pub = await publisher(server)
    await pub.pub("share", *[b"%d" % i for i in range(40)])
    channel = await wait_for(
        lambda: channel_stats(server, "share", "c"), until=lambda c: c["in_flight_count"] == 40
    )
    counts = {c["remote_address"]: c["in_flight_count"] for c in channel["clients"]}
    got = []
    for client in (a, b):
        host, port = client.writer.get_extra_info("sockname")[:2]
        got += await client.messages(counts[f"{host}:{port}"])
    assert len(got) == 40 and len({m.id for m in got}) == 40
    for c in (a, b, pub):
        await c.close()


async def test_pipelined_fins_refill_each_freed_slot_of_that_client(make_nsqd: Factory) -> None:
    # the embedded server refills the slots one read's FINs free with one pump after the batch
    server = make_nsqd()
    a = await consumer(server, "refill", "c", 3)
    b = await consumer(server, "refill", "c", 3)
    pub = await publisher(server)
    await pub.pub("refill", *[b"%d" % i for i in range(10)])
    await wait_for(
        lambda: channel_stats(server, "refill", "c"), until=lambda c: c["in_flight_count"] == 6
    )
    first = await a.messages(3)
    a.send(b"".join(b"FIN " + m.id + b"\n" for m in first))
    again = await a.messages(3)
    assert not {m.id for m in again} & {m.id for m in first}
    channel = await wait_for(
        lambda: channel_stats(server, "refill", "c"),
        until=lambda c: c["depth"] == 1 and c["in_flight_count"] == 6,
    )
    counts = sorted((c["in_flight_count"], c["finish_count"]) for c in channel["clients"])
    assert counts == [(3, 0), (3, 3)]
    for c in (a, b, pub):
        await c.close()


async def test_rdy_is_a_window_not_a_counter(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "window", "c", 2)
    pub = await publisher(server)
    await pub.pub("window", *[b"%d" % i for i in range(5)])
    first = await sub.messages(2)
    channel = await wait_for(
        lambda: channel_stats(server, "window", "c"), until=lambda c: c["depth"] == 3
    )
    assert channel["in_flight_count"] == 2 and channel["clients"][0]["ready_count"] == 2
    sub.send(b"FIN " + first[0].id + b"\n")
    third = await sub.message()
    channel = await wait_for(
        lambda: channel_stats(server, "window", "c"), until=lambda c: c["depth"] == 2
    )
    assert channel["in_flight_count"] == 2
    # lowering RDY below the in-flight count revokes nothing and stops deliveries
    sub.send(b"RDY 1\nFIN " + first[1].id + b"\n")
    await sub.sync()
    channel = await channel_stats(server, "window", "c")
    assert channel is not None and channel["in_flight_count"] == 1 and channel["depth"] == 2
    sub.send(b"FIN " + third.id + b"\n")
    await sub.message()
    sub.send(b"RDY 0\n")
    await sub.sync()
    channel = await channel_stats(server, "window", "c")
    assert channel is not None
    assert channel["clients"][0]["ready_count"] == 0 and channel["depth"] == 1
    await sub.close()
    await pub.close()


async def test_in_flight_timeout_redelivers_with_attempts(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "timeout", "c", 1, msg_timeout=1000)
    pub = await publisher(server)
    await pub.pub("timeout", b"slow")
    first = await sub.message()
    again = await sub.message(timeout=10)
    assert (again.id, again.attempts, first.attempts) == (first.id, 2, 1)
    channel = await channel_stats(server, "timeout", "c")
    assert channel is not None and channel["timeout_count"] == 1
    sub.send(b"FIN " + again.id + b"\n")
    await sub.sync()
    channel = await channel_stats(server, "timeout", "c")
    assert channel is not None and channel["in_flight_count"] == 0
    await sub.close()
    await pub.close()


async def test_late_fin_after_timeout_fails_without_closing(make_nsqd: Factory) -> None:
    server = make_nsqd()
    slow = await consumer(server, "late", "c", 1, msg_timeout=1000, heartbeat_interval=20_000)
    pub = await publisher(server)
    await pub.pub("late", b"x")
    msg = await slow.message()
    slow.send(b"RDY 0\n")
    other = await consumer(server, "late", "c", 1)
    # the timed-out message goes to a ready client: only `other` is
    again = await other.message(timeout=10)
    assert again.id == msg.id and again.attempts == 2
    slow.send(b"FIN " + msg.id + b"\n")
    text = await slow.error()
    assert text == f"E_FIN_FAILED FIN {msg.id.decode()} failed client does not own message"
    await slow.sync()
    for c in (slow, other, pub):
        await c.close()


async def test_disconnected_clients_messages_wait_for_their_timeout(make_nsqd: Factory) -> None:
    server = make_nsqd()
    gone = await consumer(server, "orphan", "c", 1, msg_timeout=3000)
    pub = await publisher(server)
    await pub.pub("orphan", b"x")
    msg = await gone.message()
    await gone.close()
    channel = await wait_for(
        lambda: channel_stats(server, "orphan", "c"), until=lambda c: c["client_count"] == 0
    )
    # not requeued at once: still in flight, owned by the dead client
    assert (channel["in_flight_count"], channel["depth"]) == (1, 0)
    heir = await consumer(server, "orphan", "c", 1)
    again = await heir.message(timeout=10)
    assert (again.id, again.attempts) == (msg.id, 2)
    channel = await channel_stats(server, "orphan", "c")
    assert channel is not None and channel["timeout_count"] == 1
    await heir.close()
    await pub.close()


async def test_req_zero_requeues_at_once_and_counts_attempts(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "reqz", "c", 1)
    pub = await publisher(server)
    await pub.pub("reqz", b"x")
    attempts = []
    for _ in range(3):
        msg = await sub.message()
        attempts.append(msg.attempts)
        sub.send(b"REQ " + msg.id + b" 0\n")
    assert attempts == [1, 2, 3]
    await sub.message()
    channel = await channel_stats(server, "reqz", "c")
    assert channel is not None and channel["requeue_count"] == 3
    assert channel["clients"][0]["requeue_count"] == 3
    await sub.close()
    await pub.close()


async def test_req_with_delay_defers(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "reqd", "c", 1)
    pub = await publisher(server)
    await pub.pub("reqd", b"x")
    msg = await sub.message()
    sub.send(b"REQ " + msg.id + b" 1500\n")
    await sub.sync()
    channel = await channel_stats(server, "reqd", "c")
    assert channel is not None
    assert (channel["deferred_count"], channel["in_flight_count"], channel["depth"]) == (1, 0, 0)
    again = await sub.message(timeout=10)
    assert (again.id, again.attempts) == (msg.id, 2)
    await sub.close()
    await pub.close()


async def test_req_delay_is_clamped_to_max_req_timeout(make_nsqd: Factory) -> None:
    server = make_nsqd(max_req_timeout=1000)
    sub = await consumer(server, "clamp", "c", 1)
    pub = await publisher(server)
    await pub.pub("clamp", b"x")
    msg = await sub.message()
    sub.send(b"REQ " + msg.id + b" 3600000\n")
    await sub.sync()  # no error: the delay is clamped, not refused
    again = await sub.message(timeout=10)
    assert (again.id, again.attempts) == (msg.id, 2)
    await sub.close()
    await pub.close()


async def test_touch_keeps_a_message_but_not_past_max_msg_timeout(make_nsqd: Factory) -> None:
    server = make_nsqd(max_msg_timeout=2500)
    sub = await consumer(server, "touch", "c", 1, msg_timeout=1000)
    pub = await publisher(server)
    await pub.pub("touch", b"x")
    msg = await sub.message()
    touches = 0
    while True:  # touch every 300 ms until the cap makes it time out anyway
        try:
            again = await sub.message(timeout=0.3)
            break
        except TimeoutError:
            sub.send(b"TOUCH " + msg.id + b"\n")
            touches += 1
            assert touches < 40, "TOUCH kept the message in flight past max_msg_timeout"
    assert (again.id, again.attempts) == (msg.id, 2)
    assert touches >= 5  # it outlived msg_timeout thanks to TOUCH
    await sub.close()
    await pub.close()


async def test_dpub_defers_in_each_channel(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "dpub", "c", 1)
    pub = await publisher(server)
    # deferred long enough that polling the stats sees it deferred, even on a busy machine
    pub.send(b"DPUB dpub 3000\n\x00\x00\x00\x01x")
    assert await pub.response() == b"OK"
    channel = await wait_for(
        lambda: channel_stats(server, "dpub", "c"), until=lambda c: c["deferred_count"] == 1
    )
    assert channel["message_count"] == 1 and channel["depth"] == 0
    msg = await sub.message(timeout=10)
    assert msg.attempts == 1 and bytes(msg.body) == b"x"
    await sub.close()
    await pub.close()


async def test_cls_stops_delivery_but_allows_fin(make_nsqd: Factory) -> None:
    server = make_nsqd()
    sub = await consumer(server, "cls", "c", 1)
    pub = await publisher(server)
    await pub.pub("cls", b"1", b"2")
    msg = await sub.message()
    sub.send(b"CLS\n")
    assert await sub.response() == b"CLOSE_WAIT"
    sub.send(b"RDY 10\nFIN " + msg.id + b"\n")
    await sub.sync()
    channel = await channel_stats(server, "cls", "c")
    assert channel is not None
    client = channel["clients"][0]
    assert (client["state"], client["ready_count"], client["finish_count"]) == (4, 0, 1)
    assert channel["depth"] == 1
    await sub.close()
    await pub.close()
