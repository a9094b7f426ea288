"""asyncnsq 2.0.1's driver, run with the asyncnsq virtualenv's python.

Driven the way asyncnsq's own ``benchmarks/nsq_benchmark.py`` drives it: ``create_writer`` and
``await writer.pub()`` from ``--concurrency`` tasks, ``await writer.mpub(topic, *bodies)``;
consumers use ``create_reader`` + ``set_message_handler(fn, direct=True)`` (auto FIN) +
``subscribe``, closed with ``graceful_close()``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from array import array
from typing import Any

try:
    from . import _common as common
except ImportError:  # run as a script
    import _common as common  # type: ignore[import-not-found, no-redef]

perf = time.perf_counter
perf_ns = time.perf_counter_ns


def _lib() -> Any:
    return importlib.import_module("asyncnsq")


async def _writer(a: argparse.Namespace) -> Any:
    host, port = common.split_address(a.nsqd_tcp)
    return await _lib().create_writer(host=host, port=port)


async def _publish(
    writer: Any, a: argparse.Namespace, latencies: array[int] | None
) -> tuple[int, int, bool]:
    make = common.body_factory(a.payload_size)
    seqs = iter(range(a.messages))
    counts = [0, 0]

    async def worker() -> None:
        for seq in seqs:
            t0 = perf_ns()
            try:
                await writer.pub(a.topic, make(seq))
            except Exception:
                counts[1] += 1
            else:
                counts[0] += 1
                if latencies is not None:
                    latencies.append(perf_ns() - t0)

    ok = await common.run_workers(min(a.concurrency, a.messages), worker, a.timeout)
    return counts[0], counts[1], ok


async def pub(a: argparse.Namespace) -> dict[str, Any]:
    writer = await _writer(a)
    latencies: array[int] = array("q")
    start = perf()
    acked, failed, ok = await _publish(writer, a, latencies)
    duration = perf() - start
    writer.close()
    return common.publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=a.messages,
        in_time=ok,
        notes=f"writer.pub() from {a.concurrency} tasks",
    )


async def mpub(a: argparse.Namespace) -> dict[str, Any]:
    writer = await _writer(a)
    make = common.body_factory(a.payload_size)
    starts = iter(range(0, a.messages, a.batch_size))
    latencies: array[int] = array("q")
    counts = [0, 0]

    async def worker() -> None:
        for lo in starts:
            bodies = [make(s) for s in range(lo, min(lo + a.batch_size, a.messages))]
            t0 = perf_ns()
            try:
                await writer.mpub(a.topic, *bodies)
            except Exception:
                counts[1] += len(bodies)
            else:
                counts[0] += len(bodies)
                latencies.append(perf_ns() - t0)

    start = perf()
    ok = await common.run_workers(a.mpub_concurrency, worker, a.timeout)
    duration = perf() - start
    writer.close()
    return common.publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=counts[0],
        failed=counts[1],
        expected=a.messages,
        in_time=ok,
        concurrency=a.mpub_concurrency,
        notes=f"writer.mpub(topic, *bodies) from {a.mpub_concurrency} tasks; latency per batch",
    )


async def _reader(a: argparse.Namespace, collector: common.Collector) -> Any:
    reader = await _lib().create_reader(
        nsqd_tcp_addresses=[a.nsqd_tcp], max_in_flight=a.max_in_flight
    )

    def handler(msg: Any) -> None:
        collector.record(msg.body)

    reader.set_message_handler(handler, direct=True)  # returns -> fin_nowait()
    await reader.subscribe(a.topic, a.channel)
    return reader


async def _wait(done: asyncio.Event, timeout: float) -> bool:
    try:
        await asyncio.wait_for(done.wait(), max(0.0, timeout))
    except TimeoutError:
        return False
    return True


async def e2e(a: argparse.Namespace) -> dict[str, Any]:
    done = asyncio.Event()
    collector = common.Collector(a.messages, latency=True, on_done=done.set)
    reader = await _reader(a, collector)
    writer = await _writer(a)
    start = perf()
    acked, failed, ok = await _publish(writer, a, None)
    published = perf() - start
    completed = await _wait(done, a.timeout - published)
    result = collector.result(start, completed=completed)
    await reader.graceful_close()
    writer.close()
    result.update(
        publish_duration_s=published,
        publish_errors=failed + (a.messages - acked - failed),
        timed_out=result["timed_out"] or not ok,
        notes="direct handler (auto FIN); publish from writer.pub() tasks",
    )
    return result


async def drain(a: argparse.Namespace) -> dict[str, Any]:
    done = asyncio.Event()
    collector = common.Collector(a.messages, latency=False, on_done=done.set)
    start = perf()
    reader = await _reader(a, collector)
    completed = await _wait(done, a.timeout)
    result = collector.result(start, completed=completed)
    await reader.graceful_close()
    result["notes"] = "create_reader + set_message_handler(fn, direct=True) (auto FIN)"
    return result


def _sync(fn: Any) -> common.ScenarioFn:
    def run(a: argparse.Namespace) -> dict[str, Any]:
        result: dict[str, Any] = asyncio.run(fn(a))
        return result

    return run


def main() -> int:
    return common.driver_main(
        client="asyncnsq",
        version=getattr(_lib(), "__version__", "?"),
        scenarios={
            "pub": _sync(pub),
            "mpub": _sync(mpub),
            "e2e": _sync(e2e),
            "drain": _sync(drain),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
