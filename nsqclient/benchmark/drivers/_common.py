"""What every benchmark driver shares: message bodies, exact loss/duplicate counting, percentiles,
resource usage, and the driver protocol. Standard library only.

This file is imported by ``nsqclient.benchmark`` *and* run beside the peer drivers with each peer's
own virtualenv python (which has no nsqclient), so it must never import nsqclient.

Bodies: an 8-byte big-endian sequence id, an 8-byte big-endian publish time (``time.time_ns()``,
comparable across processes on one machine), then padding up to the payload size.

The driver protocol (one JSON object per line on stdout, the last one counts)::

    python DRIVER list
        {"nsqbench": 1, "client": ..., "version": ..., "runtime": ...,
         "scenarios": {"pub": "ok", "drain": "<why this client cannot>"}}
    python DRIVER run --scenario pub --nsqd-tcp HOST:PORT --topic T [--channel C]
                      [--messages N --payload-size B --concurrency C --batch-size K
                       --mpub-concurrency M --max-in-flight F --timeout S]
        {"nsqbench": 1, "status": "ok" | "unsupported" | "error", "reason": ...,
         "duration_s": ..., "latency_ms": {"p50":..,"p95":..,"p99":..,"max":..} | null,
         "received": ..., "missing": ..., "duplicates": ..., "publish_errors": ...,
         "fin_errors": ..., "timed_out": false, "cpu_s": ..., "max_rss_kib": ..., "notes": ...}
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import resource
import struct
import sys
import time
import traceback
from array import array
from collections.abc import Callable, Iterable, Mapping
from typing import Any

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">QQ")
HEADER_SIZE = HEADER.size
SCENARIOS = ("pub", "mpub", "e2e", "drain")


# --------------------------------------------------------------------------- bodies


def body_factory(payload_size: int) -> Callable[[int], bytes]:
    """``make(seq)`` -> a body of ``payload_size`` bytes stamped with ``seq`` and the time now."""
    if payload_size < HEADER_SIZE:
        raise ValueError(f"payload size must be at least {HEADER_SIZE} bytes, got {payload_size}")
    padding = b"x" * (payload_size - HEADER_SIZE)
    pack = HEADER.pack
    now = time.time_ns

    def make(seq: int) -> bytes:
        return pack(seq, now()) + padding

    return make


def parse_body(body: bytes) -> tuple[int, int]:
    """(sequence id, publish time in ns) of a benchmark body."""
    seq, sent_ns = HEADER.unpack_from(body)
    return int(seq), int(sent_ns)


# --------------------------------------------------------------------------- exact accounting


class SequenceTracker:
    """Counts deliveries of sequence ids ``0..expected-1`` exactly: unique, duplicates, invalid.

    ``record`` is called once per delivery and returns True on the delivery that completes the
    set, so the caller can stop its clock and signal an event right there (no polling).
    """

    __slots__ = ("duplicates", "expected", "invalid", "latencies_ns", "received", "seen", "unique")

    def __init__(self, expected: int) -> None:
        if expected < 0:
            raise ValueError("expected must be >= 0")
        self.expected = expected
        self.seen = bytearray(expected)
        self.unique = 0
        self.received = 0
        self.duplicates = 0
        self.invalid = 0
        self.latencies_ns: array[int] = array("q")

    def record(self, body: bytes, now_ns: int = 0) -> bool:
        """Note one delivery; ``now_ns`` (time.time_ns) also records publish->now latency."""
        self.received += 1
        if len(body) < HEADER_SIZE:
            self.invalid += 1
            return False
        seq, sent_ns = HEADER.unpack_from(body)
        if seq >= self.expected:
            self.invalid += 1
            return False
        seen = self.seen
        if seen[seq]:
            self.duplicates += 1
            return False
        seen[seq] = 1
        self.unique += 1
        if now_ns:
            self.latencies_ns.append(now_ns - sent_ns)
        return self.unique == self.expected

    @property
    def missing(self) -> int:
        return self.expected - self.unique

    @property
    def complete(self) -> bool:
        return self.unique == self.expected

    def merge(
        self, seen: bytes | bytearray, *, received: int, duplicates: int = 0, invalid: int = 0
    ) -> None:
        """Fold in another consumer's counts and ``seen`` flags (multi-process consumers of one
        channel): an id both have seen counts as a duplicate."""
        if len(seen) != self.expected:
            raise ValueError("seen flags of a different length")
        mine = self.seen
        overlap = 0
        for i, flag in enumerate(seen):
            if flag:
                if mine[i]:
                    overlap += 1
                else:
                    mine[i] = 1
                    self.unique += 1
        self.received += received
        self.invalid += invalid
        self.duplicates += duplicates + overlap


def steady_mark(expected: int) -> int:
    """The delivery count at which the "steady" clock stops: 99% of the messages."""
    return max(1, expected * 99 // 100)


def steady_rate(mark: int, start: float, mark_at: float) -> float | None:
    """Messages per second up to the 99% mark, i.e. without the last partial buffer, which nsqd
    flushes only on its ``output_buffer_timeout`` tick (250 ms by default) once the channel is
    empty and the consumer still has RDY to spare."""
    if not mark_at or mark_at <= start:
        return None
    return mark / (mark_at - start)


def percentile(sorted_values: list[int] | list[float], p: float) -> float | int:
    """Nearest-rank percentile of already sorted values (p in 0..100)."""
    if not sorted_values:
        raise ValueError("no values")
    if not 0 <= p <= 100:
        raise ValueError("p must be within 0..100")
    rank = max(1, math.ceil(len(sorted_values) * p / 100))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(latencies_ns: Iterable[int]) -> dict[str, float] | None:
    """p50/p95/p99/max in milliseconds (nearest rank), or None without samples."""
    ordered = sorted(latencies_ns)
    if not ordered:
        return None
    return {
        "p50": percentile(ordered, 50) / 1e6,
        "p95": percentile(ordered, 95) / 1e6,
        "p99": percentile(ordered, 99) / 1e6,
        "max": ordered[-1] / 1e6,
    }


# --------------------------------------------------------------------------- resources


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_kib() -> int:
    """This process's peak resident set size so far, in KiB.

    Linux: ``VmHWM`` from /proc/self/status, because ``ru_maxrss`` survives ``exec`` and so
    reports the parent's size for a driver started by a big harness.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak // 1024) if sys.platform == "darwin" else int(peak)


def python_runtime() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


# --------------------------------------------------------------------------- the driver protocol


def emit(obj: Mapping[str, Any]) -> None:
    """Print one protocol line (and flush: the harness reads the last line)."""
    line = json.dumps({"nsqbench": PROTOCOL_VERSION, **obj}, separators=(",", ":"))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def build_parser(client: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{client}-driver", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print the scenarios this client supports")
    run = sub.add_parser("run", help="run one scenario and print its result")
    run.add_argument("--scenario", required=True)
    run.add_argument("--nsqd-tcp", required=True, help="host:port")
    run.add_argument("--topic", required=True)
    run.add_argument("--channel", default="bench")
    run.add_argument("--messages", type=int, default=10_000)
    run.add_argument("--payload-size", type=int, default=512)
    run.add_argument("--concurrency", type=int, default=256)
    run.add_argument("--batch-size", type=int, default=250)
    run.add_argument("--mpub-concurrency", type=int, default=4)
    run.add_argument("--max-in-flight", type=int, default=1024)
    run.add_argument("--timeout", type=float, default=120.0, help="seconds")
    return parser


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


ScenarioFn = Callable[[argparse.Namespace], dict[str, Any]]


def driver_main(
    *,
    client: str,
    version: str,
    scenarios: Mapping[str, ScenarioFn],
    unsupported: Mapping[str, str] | None = None,
    runtime: str | None = None,
    argv: list[str] | None = None,
) -> int:
    """Entry point of a driver: ``list`` or ``run`` (see the module docstring)."""
    args = build_parser(client).parse_args(argv)
    runtime = runtime or python_runtime()
    unsupported = dict(unsupported or {})
    if args.command == "list":
        listing = {name: "ok" for name in scenarios}
        listing.update(unsupported)
        emit({"client": client, "version": version, "runtime": runtime, "scenarios": listing})
        return 0
    base: dict[str, Any] = {
        "client": client,
        "version": version,
        "runtime": runtime,
        "scenario": args.scenario,
        "messages": args.messages,
        "payload_size": args.payload_size,
        "batch_size": args.batch_size,
        "concurrency": args.concurrency,
        "max_in_flight": args.max_in_flight,
    }
    fn = scenarios.get(args.scenario)
    if fn is None:
        reason = unsupported.get(
            args.scenario, f"{client} driver has no scenario {args.scenario!r}"
        )
        emit({**base, "status": "unsupported", "reason": reason})
        return 0
    cpu0 = cpu_seconds()
    try:
        measured = fn(args)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        emit({**base, "status": "error", "reason": f"{type(exc).__name__}: {exc}"})
        return 0
    cpu = cpu_seconds() - cpu0
    result = {
        **base,
        "status": "ok",
        "publish_duration_s": None,
        "latency_ms": None,
        "received": 0,
        "missing": 0,
        "duplicates": 0,
        "publish_errors": 0,
        "fin_errors": 0,
        "timed_out": False,
        "notes": "",
        **measured,
        "cpu_s": cpu,
        "max_rss_kib": peak_rss_kib(),
    }
    emit(result)
    return 0


def consume_result(
    tracker: SequenceTracker, *, duration_s: float, timed_out: bool
) -> dict[str, Any]:
    """The common fields of an e2e/drain result from a tracker."""
    return {
        "duration_s": duration_s,
        "latency_ms": latency_summary(tracker.latencies_ns),
        "received": tracker.received,
        "missing": tracker.missing,
        "duplicates": tracker.duplicates,
        "fin_errors": tracker.invalid,
        "timed_out": timed_out,
    }


class Collector:
    """FIN-side accounting for a driver: records each delivery, stops the clock on the one that
    completes the set and calls ``on_done`` (an event's ``set``: no polling), and notes when 99%
    had arrived (:func:`steady_rate`)."""

    __slots__ = ("end", "latency", "mark", "mark_at", "on_done", "tracker")

    def __init__(self, expected: int, *, latency: bool, on_done: Callable[[], Any]) -> None:
        self.tracker = SequenceTracker(expected)
        self.latency = latency
        self.on_done = on_done
        self.end = 0.0
        self.mark = steady_mark(expected)
        self.mark_at = 0.0

    def record(self, body: bytes) -> bool:
        tracker = self.tracker
        if tracker.record(body, time.time_ns() if self.latency else 0):
            self.end = time.perf_counter()
            self.on_done()
            return True
        if tracker.unique == self.mark and not self.mark_at:
            self.mark_at = time.perf_counter()
        return False

    def result(self, start: float, *, completed: bool) -> dict[str, Any]:
        end = self.end if completed else time.perf_counter()
        out = consume_result(self.tracker, duration_s=end - start, timed_out=not completed)
        out["steady_msg_s"] = steady_rate(self.mark, start, self.mark_at)
        if not self.latency:
            out["latency_ms"] = None
        return out


async def run_workers(count: int, worker: Callable[[], Any], timeout: float) -> bool:
    """asyncio: run ``count`` copies of the coroutine function ``worker``; False on timeout."""
    import asyncio

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, count))]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), timeout)
    except TimeoutError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return False
    return True


def publish_result(
    *,
    duration_s: float,
    latencies_ns: Iterable[int],
    acked: int,
    failed: int,
    expected: int,
    in_time: bool,
    notes: str,
    **more: Any,
) -> dict[str, Any]:
    """The fields of a pub/mpub result; unacknowledged messages count as publish errors."""
    return {
        "duration_s": duration_s,
        "latency_ms": latency_summary(latencies_ns),
        "received": acked,
        "publish_errors": failed + max(0, expected - acked - failed),
        "timed_out": not in_time,
        "notes": notes,
        **more,
    }
