"""The blocking facade against the asyncio core, on one nsqd, in one run.

    python benchmarks/sync_bench.py [--messages 50000] [--size 512] [--publishes 50000]

1. Consume: preload ``--messages`` bodies of ``--size`` bytes into a topic (over HTTP /mpub, not
   through the client under test), then drain them with the aio Reader (``async for`` + fin) and
   with SyncReader (``for msg in reader: msg.fin()``), same max_in_flight. Target: sync >= 0.8x.
2. Publish: ``--publishes`` PUBs of ``--size`` bytes from 16 threads through one SyncWriter, and
   from 256 concurrent tasks through one aio Writer. Target: sync >= 0.5x. Blocking ``pub()``
   from 16 threads can have only 16 publishes outstanding, so it is also measured with
   ``pub_nowait()`` keeping 16 outstanding per thread (256 in all, like the aio side).

Each figure is the best of ``--rounds`` rounds (messages per second). Uses only the public API and
:class:`nsqclient.testing.daemons.NsqdProcess`; needs the nsqd binary (test_service/build_nsq.sh;
``python -m benchmarks.sync_bench`` finds it there, see :mod:`benchmarks`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import sys
import threading
import time
from collections.abc import Callable

from nsqclient.aio import Reader, Writer
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess

MAX_IN_FLIGHT = 2500
# nsqd flushes a partly filled output buffer only on its output_buffer_timeout tick (250 ms by
# default), which a 50,000-message run hits once or twice: measured that way the figure is the
# tick, not the client. Both readers ask for nsqd's smallest tick.
OUTPUT_BUFFER_TIMEOUT_MS = 25
CHUNK = 2000  # bodies per HTTP /mpub when preloading


def preload(nsqd: NsqdProcess, topic: str, count: int, size: int) -> None:
    body = b"x" * size
    for start in range(0, count, CHUNK):
        n = min(CHUNK, count - start)
        nsqd.http_post("/mpub", b"\n".join([body] * n), {"topic": topic})
    wait_depth(nsqd, topic, count)


def wait_depth(nsqd: NsqdProcess, topic: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for t in nsqd.stats(topic=topic).get("topics", []):
            if t["topic_name"] == topic and t["message_count"] >= count:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nsqd never counted {count} messages on {topic}")


def consume_aio(address: str, topic: str, count: int) -> float:
    async def main() -> float:
        got = 0
        async with Reader(
            topic,
            "bench",
            nsqd_tcp_addresses=[address],
            max_in_flight=MAX_IN_FLIGHT,
            output_buffer_timeout=OUTPUT_BUFFER_TIMEOUT_MS,
        ) as reader:
            start = time.perf_counter()
            async for msg in reader:
                msg.fin()
                got += 1
                if got == count:
                    break
            elapsed = time.perf_counter() - start
        return count / elapsed

    return asyncio.run(main())


def consume_sync(address: str, topic: str, count: int) -> float:
    got = 0
    with SyncReader(
        topic,
        "bench",
        nsqd_tcp_addresses=[address],
        max_in_flight=MAX_IN_FLIGHT,
        output_buffer_timeout=OUTPUT_BUFFER_TIMEOUT_MS,
    ) as reader:
        start = time.perf_counter()
        for msg in reader:
            msg.fin()
            got += 1
            if got == count:
                break
        elapsed = time.perf_counter() - start
    return count / elapsed


def publish_aio(address: str, topic: str, count: int, size: int, concurrency: int = 256) -> float:
    body = b"y" * size

    async def main() -> float:
        async with Writer([address]) as writer:
            per = count // concurrency

            async def worker() -> None:
                for _ in range(per):
                    await writer.pub(topic, body)

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - start
        return per * concurrency / elapsed

    return asyncio.run(main())


def publish_sync(address: str, topic: str, count: int, size: int, threads: int = 16) -> float:
    body = b"y" * size
    per = count // threads
    with SyncWriter(nsqd_tcp_addresses=[address]) as writer:
        barrier = threading.Barrier(threads + 1)

        def worker() -> None:
            barrier.wait()
            for _ in range(per):
                writer.pub(topic, body)

        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for t in workers:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - start
    return per * threads / elapsed


def publish_sync_nowait(
    address: str, topic: str, count: int, size: int, threads: int = 16, window: int = 16
) -> float:
    """16 threads, each keeping ``window`` pub_nowait futures outstanding (256 in all)."""
    body = b"y" * size
    per = count // threads
    with SyncWriter(nsqd_tcp_addresses=[address]) as writer:
        barrier = threading.Barrier(threads + 1)

        def worker() -> None:
            barrier.wait()
            pending: collections.deque[concurrent.futures.Future[None]] = collections.deque()
            for _ in range(per):
                if len(pending) >= window:
                    pending.popleft().result()
                pending.append(writer.pub_nowait(topic, body))
            for future in pending:
                future.result()

        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for t in workers:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - start
    return per * threads / elapsed


def interleaved(rounds: int, **variants: Callable[[int], float]) -> dict[str, float]:
    """Best of ``rounds`` for each variant, run in turns (so a noisy moment hits all alike)."""
    best = dict.fromkeys(variants, 0.0)
    for i in range(rounds):
        for name, fn in variants.items():
            best[name] = max(best[name], fn(i))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--publishes", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["consume", "publish"], default=None)
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, switch interval {sys.getswitchinterval() * 1e3:g} ms")
    with NsqdProcess() as nsqd:
        address = nsqd.tcp_address
        if args.only in (None, "consume"):

            def aio_round(i: int) -> float:
                topic = f"bench_aio_{i}"
                preload(nsqd, topic, args.messages, args.size)
                return consume_aio(address, topic, args.messages)

            def sync_round(i: int) -> float:
                topic = f"bench_sync_{i}"
                preload(nsqd, topic, args.messages, args.size)
                return consume_sync(address, topic, args.messages)

            rates = interleaved(args.rounds, aio=aio_round, sync=sync_round)
            aio_rate, sync_rate = rates["aio"], rates["sync"]
            print(
                f"consume {args.messages} x {args.size} B: aio {aio_rate:,.0f}/s, "
                f"sync {sync_rate:,.0f}/s, ratio {sync_rate / aio_rate:.2f} (target >= 0.8)"
            )
        if args.only in (None, "publish"):
            n, size = args.publishes, args.size
            rates = interleaved(
                args.rounds,
                aio=lambda i: publish_aio(address, f"bench_pub_aio_{i}", n, size),
                sync=lambda i: publish_sync(address, f"bench_pub_sync_{i}", n, size),
                nowait=lambda i: publish_sync_nowait(address, f"bench_pub_nowait_{i}", n, size),
            )
            aio_rate, sync_rate, nowait_rate = rates["aio"], rates["sync"], rates["nowait"]
            print(
                f"publish {args.publishes} x {args.size} B: aio (256 tasks) {aio_rate:,.0f}/s; "
                f"sync pub() from 16 threads (16 outstanding) {sync_rate:,.0f}/s, ratio "
                f"{sync_rate / aio_rate:.2f}; sync pub_nowait() from 16 threads x 16 (256 "
                f"outstanding) {nowait_rate:,.0f}/s, ratio {nowait_rate / aio_rate:.2f} "
                "(target >= 0.5)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
