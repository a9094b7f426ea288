"""A short tour of nsqclient against a running NSQ cluster (``bash test_service/demo.sh``).

1. publish with the asyncio ``Writer``, spread over every nsqd of the cluster (``pub`` and
   ``mpub``), and with the blocking ``SyncWriter`` from two threads;
2. consume everything back with an asyncio ``Reader`` that finds the nsqd through nsqlookupd,
   and a second channel with a blocking ``SyncReader``;
3. print who delivered what, the client-side stats and nsqd's own ``/stats``; close gracefully.

Addresses come from the environment, as ``test_service/start.sh`` writes them to
``cluster.env``: ``NSQD_TCP_ADDRESSES``, ``NSQD_HTTP_ADDRESSES``, ``NSQLOOKUPD_HTTP_ADDRESSES``
(comma-separated). Exits 0 when every message arrived exactly once on each channel.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import threading
import time
import uuid

from nsqclient.aio import Reader, Writer
from nsqclient.http import NsqdHTTPClient
from nsqclient.sync import SyncReader, SyncWriter

ASYNC_PUBS = 6  # single PUBs from the asyncio Writer
ASYNC_BATCH = 4  # one MPUB of this many
SYNC_THREADS, SYNC_PER_THREAD = 2, 5
TOTAL = ASYNC_PUBS + ASYNC_BATCH + SYNC_THREADS * SYNC_PER_THREAD
DEADLINE = 20.0  # seconds for consuming everything; the demo normally takes a few


def addresses(name: str, default: str) -> list[str]:
    return [a.strip() for a in os.environ.get(name, default).split(",") if a.strip()]


async def publish_async(nsqd_tcp: list[str], topic: str) -> dict[str, object]:
    async with Writer(nsqd_tcp) as writer:  # round-robin over the healthy connections
        for i in range(ASYNC_PUBS):
            await writer.pub(topic, f"aio pub #{i}".encode())
        await writer.mpub(topic, [f"aio mpub #{i}".encode() for i in range(ASYNC_BATCH)])
        stats = writer.stats()
    print(f"asyncio Writer: {stats['published']} messages acknowledged over {len(nsqd_tcp)} nsqd")
    return stats


def publish_sync(nsqd_tcp: list[str], topic: str) -> None:
    # One SyncWriter shared by threads, as a web app would share it between request threads.
    with SyncWriter(nsqd_tcp) as writer:

        def worker(n: int) -> None:
            for i in range(SYNC_PER_THREAD):
                writer.pub(topic, f"thread {n} pub #{i}".encode())  # blocks until acknowledged

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(SYNC_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"SyncWriter:     {writer.stats()['published']} messages from {SYNC_THREADS} threads")


async def consume_async(lookupd_http: list[str], topic: str) -> collections.Counter[str]:
    """Read ``TOTAL`` messages through lookupd; count them per delivering nsqd."""
    by_nsqd: collections.Counter[str] = collections.Counter()
    bodies: set[bytes] = set()
    reader = Reader(
        topic,
        "demo-aio",
        lookupd_http_addresses=lookupd_http,
        lookupd_poll_interval=1000,  # find new nsqd within a second (default: a minute)
        max_in_flight=50,
    )
    async with reader:
        async with asyncio.timeout(DEADLINE):
            async for msg in reader:
                by_nsqd[msg.nsqd_address or "?"] += 1
                bodies.add(msg.body)
                await msg.fin()
                if len(bodies) == TOTAL:
                    break
        stats = reader.stats()
    print(
        f"asyncio Reader (channel demo-aio, via lookupd {', '.join(lookupd_http)}): "
        f"{stats['received']} received, {stats['finished']} finished, "
        f"{len(stats['connections'])} nsqd connections"
    )
    for address, count in sorted(by_nsqd.items()):
        print(f"    {count:3d} delivered by nsqd {address}")
    if len(bodies) != TOTAL:
        raise SystemExit(f"expected {TOTAL} distinct messages, got {len(bodies)}")
    return by_nsqd


def consume_sync(nsqd_tcp: list[str], topic: str) -> int:
    seen: set[bytes] = set()
    deadline = time.monotonic() + DEADLINE
    with SyncReader(topic, "demo-sync", nsqd_tcp_addresses=nsqd_tcp, max_in_flight=50) as reader:
        while len(seen) < TOTAL and time.monotonic() < deadline:
            msg = reader.get(timeout=1.0)
            if msg is not None:
                seen.add(msg.body)
                msg.fin()  # from any thread; never blocks
        stats = reader.stats()
    print(
        f"SyncReader (channel demo-sync, direct to nsqd): {len(seen)} distinct messages, "
        f"{stats['finished']} finished"
    )
    if len(seen) != TOTAL:
        raise SystemExit(f"expected {TOTAL} distinct messages on demo-sync, got {len(seen)}")
    return len(seen)


async def show_nsqd_stats(nsqd_tcp: list[str], nsqd_http: list[str], topic: str) -> None:
    for tcp, address in zip(nsqd_tcp, nsqd_http, strict=False):
        async with NsqdHTTPClient(address) as http:
            stats = await http.stats(topic=topic)
        for t in stats["topics"]:
            if t["topic_name"] != topic:
                continue
            channels = ", ".join(
                f"{c['channel_name']}: {c['message_count']} in, {c['depth']} waiting"
                for c in t["channels"]
            )
            print(f"    nsqd {tcp}: {t['message_count']} published; {channels}")


async def main() -> int:
    nsqd_tcp = addresses("NSQD_TCP_ADDRESSES", "127.0.0.1:4150")
    nsqd_http = addresses("NSQD_HTTP_ADDRESSES", "127.0.0.1:4151")
    lookupd_http = addresses("NSQLOOKUPD_HTTP_ADDRESSES", "127.0.0.1:4161")
    topic = f"nsqclient-demo-{uuid.uuid4().hex[:8]}"  # a fresh topic: reruns never mix
    started = time.monotonic()
    print(f"topic {topic}: {TOTAL} messages to {len(nsqd_tcp)} nsqd, lookupd {lookupd_http}\n")

    # Create both channels first, so every message published from here on reaches both.
    for address in nsqd_http:
        async with NsqdHTTPClient(address) as http:
            await http.create_topic(topic)
            await http.create_channel(topic, "demo-aio")
            await http.create_channel(topic, "demo-sync")

    await publish_async(nsqd_tcp, topic)
    await asyncio.to_thread(publish_sync, nsqd_tcp, topic)
    print()
    await consume_async(lookupd_http, topic)
    await asyncio.to_thread(consume_sync, nsqd_tcp, topic)
    print("\nnsqd's view (/stats):")
    await show_nsqd_stats(nsqd_tcp, nsqd_http, topic)
    print(f"\ndone in {time.monotonic() - started:.1f}s: every message arrived once per channel")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
