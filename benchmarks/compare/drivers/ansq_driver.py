"""ansq 0.3.0's driver, run with the ansq virtualenv's python.

``create_writer`` + ``await writer.pub()`` from ``--concurrency`` tasks and
``await writer.mpub(topic, *bodies)``. ansq's ``Reader`` keeps RDY at 1 per connection (its
``set_max_in_flight`` raises NotImplementedError), so consumers use ansq's documented low-level
fast path instead: ``open_connection`` + ``subscribe(topic, channel, messages_count=max_in_flight)``
+ ``async for msg in conn.messages(): await msg.fin()``.
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
    return importlib.import_module("ansq")


def _version() -> str:
    from importlib import metadata

    return metadata.version("ansq")


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
                resp = await writer.pub(a.topic, make(seq))
                if not resp:  # ansq returns an error schema (falsy) instead of raising
                    raise RuntimeError(str(resp))
            except Exception:
                counts[1] += 1
            else:
                counts[0] += 1
                if latencies is not None:
                    latencies.append(perf_ns() - t0)

    ok = await common.run_workers(min(a.concurrency, a.messages), worker, a.timeout)
    return counts[0], counts[1], ok


async def pub(a: argparse.Namespace) -> dict[str, Any]:
    writer = await _lib().create_writer(nsqd_tcp_addresses=[a.nsqd_tcp])
    latencies: array[int] = array("q")
    start = perf()
    acked, failed, ok = await _publish(writer, a, latencies)
    duration = perf() - start
    await writer.close()
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
    writer = await _lib().create_writer(nsqd_tcp_addresses=[a.nsqd_tcp])
    make = common.body_factory(a.payload_size)
    starts = iter(range(0, a.messages, a.batch_size))
    latencies: array[int] = array("q")
    counts = [0, 0]

    async def worker() -> None:
        for lo in starts:
            bodies = [make(s) for s in range(lo, min(lo + a.batch_size, a.messages))]
            t0 = perf_ns()
            try:
                resp = await writer.mpub(a.topic, *bodies)
                if not resp:
                    raise RuntimeError(str(resp))
            except Exception:
                counts[1] += len(bodies)
            else:
                counts[0] += len(bodies)
                latencies.append(perf_ns() - t0)

    start = perf()
    ok = await common.run_workers(a.mpub_concurrency, worker, a.timeout)
    duration = perf() - start
    await writer.close()
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


async def _consume(a: argparse.Namespace, collector: common.Collector) -> Any:
    host, port = common.split_address(a.nsqd_tcp)
    conn = await _lib().open_connection(host, port)
    await conn.subscribe(a.topic, a.channel, a.max_in_flight)

    async def loop() -> None:
        async for msg in conn.messages():
            await msg.fin()
            if collector.record(msg.body):
                return

    return conn, asyncio.ensure_future(loop())


async def _finish(conn: Any, task: Any, timeout: float) -> bool:
    try:
        await asyncio.wait_for(asyncio.shield(task), max(0.0, timeout))
        completed = True
    except TimeoutError:
        completed = False
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await conn.close()
    return completed


async def e2e(a: argparse.Namespace) -> dict[str, Any]:
    collector = common.Collector(a.messages, latency=True, on_done=lambda: None)
    conn, task = await _consume(a, collector)
    writer = await _lib().create_writer(nsqd_tcp_addresses=[a.nsqd_tcp])
    start = perf()
    acked, failed, ok = await _publish(writer, a, None)
    published = perf() - start
    completed = await _finish(conn, task, a.timeout - published)
    await writer.close()
    result = collector.result(start, completed=completed)
    result.update(
        publish_duration_s=published,
        publish_errors=failed + (a.messages - acked - failed),
        timed_out=result["timed_out"] or not ok,
        notes=f"open_connection + subscribe(messages_count={a.max_in_flight}); async for + fin",
    )
    return result


async def drain(a: argparse.Namespace) -> dict[str, Any]:
    collector = common.Collector(a.messages, latency=False, on_done=lambda: None)
    start = perf()
    conn, task = await _consume(a, collector)
    completed = await _finish(conn, task, a.timeout)
    result = collector.result(start, completed=completed)
    result["notes"] = (
        f"open_connection + subscribe(messages_count={a.max_in_flight}); async for + fin"
    )
    return result


def _sync(fn: Any) -> common.ScenarioFn:
    def run(a: argparse.Namespace) -> dict[str, Any]:
        result: dict[str, Any] = asyncio.run(fn(a))
        return result

    return run


def main() -> int:
    _lib()
    return common.driver_main(
        client="ansq",
        version=_version(),
        scenarios={
            "pub": _sync(pub),
            "mpub": _sync(mpub),
            "e2e": _sync(e2e),
            "drain": _sync(drain),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
