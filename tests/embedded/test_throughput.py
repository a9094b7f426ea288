"""Throughput smoke test: a pipelined raw client pushes and drains tens of thousands of messages
through the embedded nsqd. Rates are reported (``-s`` or the junit properties), not asserted:
they depend on the machine, and the client shares this process's GIL."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from nsqclient.message import Message
from nsqclient.protocol import Response
from nsqclient.testing.embedded import ThreadedEmbeddedNsqd
from tests.rawconn_support import RawClient, sized

pytestmark = pytest.mark.timeout(120)

COUNT = 20_000
BATCH = 500


async def test_pipelined_publish_and_consume(
    record_property: Callable[[str, object], None],
) -> None:
    with ThreadedEmbeddedNsqd(mem_queue_size=COUNT) as nsqd:
        pub = await RawClient.connect(nsqd.tcp_address)
        await pub.setup(heartbeat_interval=30_000)
        command = sized(b"PUB speed\n", b"x" * 100)
        started = time.perf_counter()
        sent = acked = 0
        while acked < COUNT:
            while sent < COUNT and sent - acked < 10 * BATCH:
                pub.send(command * BATCH)
                sent += BATCH
            assert await pub.event() == Response(b"OK")
            acked += 1
            while pub.events and acked < COUNT:
                assert pub.events.popleft() == Response(b"OK")
                acked += 1
        publish_rate = COUNT / (time.perf_counter() - started)

        sub = await RawClient.connect(nsqd.tcp_address)
        await sub.setup(heartbeat_interval=30_000)
        await sub.sub("speed", "c", 2500)
        started = time.perf_counter()
        seen: set[bytes] = set()
        while len(seen) < COUNT:
            first = await sub.event()
            batch = [first, *sub.events]
            sub.events.clear()
            assert all(isinstance(m, Message) for m in batch)
            seen.update(m.id for m in batch)  # type: ignore[union-attr]
            sub.send(b"".join(b"FIN " + m.id + b"\n" for m in batch))  # type: ignore[union-attr]
        await sub.sync()
        consume_rate = COUNT / (time.perf_counter() - started)
        stats = nsqd.stats("speed")["topics"][0]["channels"][0]
        assert (stats["depth"], stats["in_flight_count"]) == (0, 0)
        assert stats["clients"][0]["finish_count"] == COUNT
        for client in (pub, sub):
            await client.close()
    record_property("pub_acks_per_s", round(publish_rate))
    record_property("delivered_fin_per_s", round(consume_rate))
    print(f"\nPUB acks/s: {publish_rate:,.0f}   delivered+FIN/s: {consume_rate:,.0f}")
