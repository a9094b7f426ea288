"""End to end: 100,000 messages through PUB, MPUB and DPUB from one Writer into one Reader, each
exactly once."""

from __future__ import annotations

import asyncio
import random

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.testing.daemons import NsqdProcess

from .conftest import DEADLINE, Stats, unique, wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow, pytest.mark.one_backend]

TOTAL = 100_000


async def test_100k_messages_pub_mpub_dpub_arrive_exactly_once(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topic, channel = unique(), unique("c")
    rng = random.Random(1234)
    # a shuffled plan: each sequence number is sent once, by PUB (30%), DPUB (10%) or inside an
    # MPUB of 2..200 messages (60%)
    sizes: list[tuple[str, int]] = [("pub", 1)] * (TOTAL * 3 // 10) + [("dpub", 1)] * (TOTAL // 10)
    left = TOTAL - len(sizes)
    while left:
        size = min(rng.randint(2, 200), left)
        sizes.append(("mpub", size))
        left -= size
    rng.shuffle(sizes)
    plan: list[tuple[str, list[int]]] = []
    seq = 0
    for kind, size in sizes:
        plan.append((kind, list(range(seq, seq + size))))
        seq += size
    assert seq == TOTAL

    seen = bytearray(TOTAL)
    duplicates: list[int] = []
    received = 0
    done = asyncio.Event()

    reader = Reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=2500,
        msg_timeout=120_000,  # no redelivery on timeout: any duplicate would be a client bug
    )

    async def consume() -> None:
        nonlocal received
        async for msg in reader:
            n = int(msg.body.split(b":", 1)[0])
            if seen[n]:
                duplicates.append(n)
            seen[n] = 1
            received += 1
            await msg.fin()
            if received >= TOTAL:
                done.set()
                return

    consumer = asyncio.create_task(consume())
    try:
        # the channel exists before the first publish, so every message is copied to it
        await wait_for(lambda: _has_channel(stats, nsqd, topic, channel), what="subscription")
        async with Writer([nsqd.tcp_address], max_pending_publishes=2048) as writer:
            pending: set[asyncio.Task[None]] = set()
            for kind, numbers in plan:
                if kind == "pub":
                    coro = writer.pub(topic, b"%d:pub" % numbers[0])
                elif kind == "dpub":
                    coro = writer.dpub(topic, rng.randint(0, 300), b"%d:dpub" % numbers[0])
                else:
                    coro = writer.mpub(topic, [b"%d:mpub" % n for n in numbers])
                task = asyncio.create_task(coro)
                pending.add(task)
                task.add_done_callback(pending.discard)
                if len(pending) >= 1024:  # keep a bounded window of publishes in flight
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait_for(asyncio.gather(*pending), DEADLINE)
            assert writer.stats()["published"] == TOTAL and writer.stats()["failed"] == 0
        assert await stats.message_count(nsqd, topic) == TOTAL

        await asyncio.wait_for(done.wait(), 60)
    finally:
        await asyncio.wait_for(reader.close(), DEADLINE)
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)

    assert duplicates == []
    assert received == TOTAL and all(seen)
    chan = await stats.channel(nsqd, topic, channel)
    assert chan["message_count"] == TOTAL
    assert chan["requeue_count"] == 0 and chan["timeout_count"] == 0
    assert chan["depth"] == 0 and chan["deferred_count"] == 0


async def _has_channel(stats: Stats, nsqd: NsqdProcess, topic: str, channel: str) -> bool:
    entry = await stats.topic(nsqd, topic)
    return entry is not None and any(c["channel_name"] == channel for c in entry["channels"])
