"""``python -m benchmarks.run --consumer-processes N`` (repository tooling, not installed):
the ``e2e-procs`` and ``drain-procs`` scenarios, added to the installed benchmark's. N
processes, each with its own event loop and Reader, share one channel; the parent starts them
together, publishes (end-to-end) or not (drain), and merges the exact accounting.

Children are started with the ``spawn`` method (never fork a process that may own a loop thread).
Each child counts locally and adds its count to one shared counter once per read batch (a
``call_soon`` after the handler calls of that batch), so the child whose batch completes the set
sets the shared ``done`` event: nothing polls. Every child reports its last-FIN time
(``time.monotonic``, one clock for all processes on Linux), its ``seen`` flags, latencies, CPU time
and peak RSS; the parent's clock stops at the latest last-FIN.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.synchronize
import queue
import time
from array import array
from collections.abc import Coroutine
from typing import Any

from nsqclient.aio import Message, Reader, Writer
from nsqclient.benchmark.accounting import (
    HEADER,
    HEADER_SIZE,
    SequenceTracker,
    cpu_seconds,
    latency_summary,
    peak_rss_kib,
)
from nsqclient.benchmark.params import Measurement, Params
from nsqclient.benchmark.runner import ExtraScenario
from nsqclient.benchmark.scenarios import publish_with

__all__ = ["extra_scenarios", "measure_multiprocess"]

_READY_TIMEOUT = 30.0


def _child(
    index: int,
    topic: str,
    channel: str,
    readers: dict[str, Any],
    expected: int,
    max_in_flight: int,
    latency: bool,
    total: Any,
    done: multiprocessing.synchronize.Event,
    go: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
    results: multiprocessing.Queue[dict[str, Any]],
    ready: multiprocessing.Queue[int],
) -> None:
    try:
        report = asyncio.run(
            _consume(
                topic,
                channel,
                readers,
                expected,
                max_in_flight,
                latency,
                total,
                done,
                go,
                stop,
                ready,
                index,
            )
        )
    except BaseException as exc:  # report, so the parent does not wait for nothing
        report = {"index": index, "error": f"{type(exc).__name__}: {exc}"}
        ready.put(index)
    results.put(report)


async def _consume(
    topic: str,
    channel: str,
    readers: dict[str, Any],
    expected: int,
    max_in_flight: int,
    latency: bool,
    total: Any,
    done: multiprocessing.synchronize.Event,
    go: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
    ready: multiprocessing.Queue[int],
    index: int,
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    seen = bytearray(expected)
    latencies: array[int] = array("q")
    state = {"received": 0, "duplicates": 0, "invalid": 0, "pending": 0, "last": 0.0, "first": 0.0}
    unpack = HEADER.unpack_from
    now_ns = time.time_ns
    mono = time.monotonic

    def flush() -> None:
        pending = state["pending"]
        state["pending"] = 0
        with total.get_lock():
            total.value += pending
            reached = total.value >= expected
        if reached:
            done.set()

    def handler(msg: Message) -> None:
        msg.fin()
        state["received"] += 1
        body = msg.body
        if len(body) < HEADER_SIZE:
            state["invalid"] += 1
            return
        seq, sent = unpack(body)
        if seq >= expected:
            state["invalid"] += 1
            return
        if seen[seq]:
            state["duplicates"] += 1
            return
        seen[seq] = 1
        if latency:
            latencies.append(now_ns() - sent)
        state["last"] = mono()
        if not state["pending"]:
            loop.call_soon(flush)
        state["pending"] += 1

    reader = Reader(topic, channel, max_in_flight=max_in_flight, **readers)
    reader.set_message_handler(handler, direct=True)
    ready.put(index)
    await loop.run_in_executor(None, go.wait)
    cpu0 = cpu_seconds()
    state["first"] = mono()
    await reader.start()
    await loop.run_in_executor(None, stop.wait)
    await reader.graceful_close()
    stats = reader.stats()
    return {
        "index": index,
        "seen": bytes(seen),
        "received": state["received"],
        "unique": sum(seen),
        "duplicates": state["duplicates"],
        "invalid": state["invalid"],
        "latencies": latencies.tobytes(),
        "last_fin": state["last"],
        "cpu_s": cpu_seconds() - cpu0,
        "max_rss_kib": peak_rss_kib(),
        "reader_errors": int(stats["response_errors"]) + int(stats["lost_on_disconnect"]),
    }


async def measure_multiprocess(p: Params, processes: int, *, publish: bool) -> Measurement:
    """``processes`` consumers on ``p.channel``; with ``publish`` the parent PUBs ``p.messages``
    after starting them (end-to-end), else the channel must already hold them (drain)."""
    ctx = multiprocessing.get_context("spawn")
    total = ctx.Value("q", 0)
    done = ctx.Event()
    go = ctx.Event()
    stop = ctx.Event()
    results: multiprocessing.Queue[dict[str, Any]] = ctx.Queue()
    ready: multiprocessing.Queue[int] = ctx.Queue()
    per_process_mif = max(1, p.max_in_flight // processes)
    children = [
        ctx.Process(
            target=_child,
            args=(
                i,
                p.topic,
                p.channel,
                p.reader_addresses(),
                p.messages,
                per_process_mif,
                publish,
                total,
                done,
                go,
                stop,
                results,
                ready,
            ),
            name=f"nsqclient-bench-consumer-{i}",
            daemon=True,
        )
        for i in range(processes)
    ]
    loop = asyncio.get_running_loop()
    for child in children:
        child.start()
    p.probe.count = lambda: int(total.value)
    reports: list[dict[str, Any]] = []
    start = time.monotonic()
    completed = False
    acked, failed, pub_ok, published = p.messages, 0, True, 0.0
    try:
        for _ in children:
            await loop.run_in_executor(None, ready.get, True, _READY_TIMEOUT)
        start = time.monotonic()
        go.set()
        if publish:
            async with Writer(p.nsqd_tcp) as writer:
                acked, failed, pub_ok = await publish_with(writer, p)
                published = time.monotonic() - start
        completed = await loop.run_in_executor(
            None, done.wait, max(0.0, p.timeout - (time.monotonic() - start))
        )
        stop.set()
        for _ in children:
            try:
                reports.append(await loop.run_in_executor(None, results.get, True, 30.0))
            except queue.Empty:
                break
    finally:
        go.set()
        stop.set()
        for child in children:
            await loop.run_in_executor(None, child.join, 10.0)
            if child.is_alive():
                child.terminate()
    tracker = SequenceTracker(p.messages)
    latencies: array[int] = array("q")
    errors = processes - len(reports)
    cpu = 0.0
    rss: list[int] = []
    per_process: list[dict[str, Any]] = []
    last_fin = start
    for report in sorted(reports, key=lambda r: int(r["index"])):
        if "error" in report:
            errors += 1
            per_process.append({"index": report["index"], "error": report["error"]})
            continue
        tracker.merge(
            report["seen"],
            received=report["received"],
            duplicates=report["duplicates"],
            invalid=report["invalid"],
        )
        errors += report["reader_errors"]
        chunk: array[int] = array("q")
        chunk.frombytes(report["latencies"])
        latencies.extend(chunk)
        cpu += report["cpu_s"]
        rss.append(report["max_rss_kib"])
        if report["last_fin"]:
            last_fin = max(last_fin, report["last_fin"])
        span = max(1e-9, (report["last_fin"] or start) - start)
        per_process.append(
            {
                "index": report["index"],
                "messages": report["unique"],
                "msg_s": report["unique"] / span,
                "cpu_s": report["cpu_s"],
                "max_rss_kib": report["max_rss_kib"],
            }
        )
    duration = (last_fin if completed else time.monotonic()) - start
    rates = ", ".join(f"{pp.get('msg_s', 0):,.0f}" for pp in per_process)
    counts = ", ".join(str(pp.get("messages", 0)) for pp in per_process)
    return {
        "duration_s": duration,
        "publish_duration_s": published if publish else None,
        "latency_ms": latency_summary(latencies) if publish else None,
        "received": tracker.received,
        "missing": tracker.missing,
        "duplicates": tracker.duplicates,
        "publish_errors": failed + (p.messages - acked - failed),
        "fin_errors": tracker.invalid + errors,
        "timed_out": not (completed and pub_ok),
        "child_cpu_s": cpu,
        "child_max_rss_kib": max(rss) if rss else 0,
        "extra": {"processes": processes, "per_process": per_process},
        "notes": (
            f"{processes} processes x max_in_flight {per_process_mif}; "
            f"per-process msgs [{counts}], msg/s [{rates}]"
        ),
    }


def extra_scenarios(processes: int) -> dict[str, ExtraScenario]:
    """``e2e-procs`` (publish while N processes consume) and ``drain-procs`` (a preloaded
    channel), for the installed runner."""

    def e2e(p: Params) -> Coroutine[Any, Any, Measurement]:
        return measure_multiprocess(p, processes, publish=True)

    def drain(p: Params) -> Coroutine[Any, Any, Measurement]:
        return measure_multiprocess(p, processes, publish=False)

    return {"e2e-procs": ExtraScenario("e2e", e2e), "drain-procs": ExtraScenario("drain", drain)}
