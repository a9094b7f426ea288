"""What every driver of the peer comparison shares: the driver protocol, and the exact accounting
of :mod:`nsqclient.benchmark.accounting` (re-exported here). Standard library only.

The peer drivers run with each peer's own virtualenv python, which has no nsqclient, so this file
never imports nsqclient there: the harness, which runs where nsqclient is installed, names the
installed accounting module's file in ``$NSQBENCH_ACCOUNTING`` (:data:`ACCOUNTING_ENV`) and this
file loads it from there (it is standard library only). Under the harness's own python
(nsqclient's driver) the module is imported. Either way the nsqclient being measured holds the
one copy of the arithmetic, and nothing here knows where it is installed.

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
         "fin_errors": ..., "timed_out": false, "cpu_s": ..., "cpu_sys_s": ...,
         "max_rss_kib": ..., "notes": ...}  (cpu_sys_s: the kernel's part of cpu_s)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

PROTOCOL_VERSION = 1
SCENARIOS = ("pub", "mpub", "e2e", "drain")

#: the file of the installed ``nsqclient.benchmark.accounting``, set by the harness for peers
ACCOUNTING_ENV = "NSQBENCH_ACCOUNTING"


def _load_accounting() -> ModuleType:
    try:
        from nsqclient.benchmark import accounting
    except ImportError:  # a peer's virtualenv: the file the harness names
        path = os.environ.get(ACCOUNTING_ENV, "")
        if not path:
            raise ImportError(
                f"no nsqclient here and ${ACCOUNTING_ENV} is not set: run the drivers through "
                "`python -m benchmarks.compare` (which sets it), or set it to the file of "
                "nsqclient.benchmark.accounting (python -c 'import nsqclient.benchmark."
                "accounting as a; print(a.__file__)')"
            ) from None
        spec = importlib.util.spec_from_file_location("nsqbench_accounting", Path(path))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} (${ACCOUNTING_ENV})") from None
        accounting = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = accounting
        spec.loader.exec_module(accounting)
    return accounting


if TYPE_CHECKING:
    from nsqclient.benchmark.accounting import (
        HEADER,
        HEADER_SIZE,
        SequenceTracker,
        body_factory,
        cpu_seconds,
        latency_summary,
        peak_rss_kib,
        percentile,
        publish_result,
        steady_mark,
        steady_rate,
    )
else:
    _accounting = _load_accounting()
    globals().update({name: getattr(_accounting, name) for name in _accounting.__all__})

__all__ = [
    "ACCOUNTING_ENV",
    "HEADER",
    "HEADER_SIZE",
    "PROTOCOL_VERSION",
    "SCENARIOS",
    "Collector",
    "ScenarioFn",
    "SequenceTracker",
    "body_factory",
    "build_parser",
    "consume_result",
    "cpu_seconds",
    "driver_main",
    "emit",
    "latency_summary",
    "parse_body",
    "peak_rss_kib",
    "percentile",
    "publish_result",
    "python_runtime",
    "run_workers",
    "split_address",
    "steady_mark",
    "steady_rate",
]


def parse_body(body: bytes) -> tuple[int, int]:
    """(sequence id, publish time in ns) of a benchmark body."""
    seq, sent_ns = HEADER.unpack_from(body)
    return int(seq), int(sent_ns)


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
    before = resource.getrusage(resource.RUSAGE_SELF)  # one snapshot: kernel part <= total
    try:
        measured = fn(args)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        emit({**base, "status": "error", "reason": f"{type(exc).__name__}: {exc}"})
        return 0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_sys = after.ru_stime - before.ru_stime
    cpu = after.ru_utime - before.ru_utime + cpu_sys
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
        "cpu_sys_s": cpu_sys,  # of cpu_s, the kernel's part (syscalls: sockets, epoll, futex)
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
