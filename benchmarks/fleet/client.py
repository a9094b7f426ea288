"""nsqclient's side of the fleet benchmark: one aio Reader discovering every nsqd via nsqlookupd.

``python -m benchmarks.fleet.client --lookupd-http ADDR --topic T ...`` (run by
:mod:`.harness` from the checkout's top folder) consumes until it has handled ``--expect``
messages, ``--max-duration`` passes, or (``--stop-on-stdin``) a line or EOF arrives on stdin,
then prints one JSON line (``"fleetbench": 1``): the :class:`~.body.Recorder`'s counts per nsqd
and per time bucket, the client's CPU and peak memory. The Go program's ``fleet`` command
(``benchmarks/compare/gobench/fleet.go``) takes the same flags and prints the same fields.

Handlers: ``--handler-ms 0`` is a plain function on the read path (``direct=True``, the fast
path); otherwise a coroutine that sleeps that long, ``--concurrency`` of them at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import sys
import threading
import time
from typing import Any

from nsqclient import __version__
from nsqclient.aio import Reader
from nsqclient.message import Message

from .body import Recorder

_perf = time.perf_counter


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _peak_rss_kib() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--option wants KEY=VALUE, got {text!r}")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw  # a bare string such as rdy_strategy=even
    return key.strip(), value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lookupd-http", required=True, help="nsqlookupd HTTP host:port")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--channel", default="fleet")
    ap.add_argument("--nsqd-count", type=int, required=True, help="source indexes in the bodies")
    ap.add_argument("--expect", type=int, required=True, help="messages published in all")
    ap.add_argument("--max-in-flight", type=int, default=1)
    ap.add_argument("--handler-ms", type=float, default=0.0)
    ap.add_argument("--concurrency", type=int, default=0, help="0: --max-in-flight")
    ap.add_argument("--max-duration", type=float, default=120.0, help="seconds")
    ap.add_argument("--bucket-ms", type=float, default=100.0)
    ap.add_argument("--stop-on-stdin", action="store_true")
    ap.add_argument(
        "--option",
        type=_option,
        action="append",
        default=[],
        help="a Reader option, KEY=VALUE (JSON or a bare string); repeatable",
    )
    return ap.parse_args(argv)


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    def wait() -> None:
        sys.stdin.readline()  # a line or EOF
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=wait, name="fleet-stdin", daemon=True).start()


async def consume(a: argparse.Namespace) -> dict[str, Any]:
    options = dict(a.option)
    reader = Reader(
        a.topic,
        a.channel,
        lookupd_http_addresses=[a.lookupd_http],
        max_in_flight=a.max_in_flight,
        **options,
    )
    stop = asyncio.Event()
    rec = Recorder(a.expect, a.nsqd_count, a.bucket_ms / 1000.0, _perf())
    record, finish = rec.record, rec.finish
    concurrency = a.concurrency or a.max_in_flight
    if a.handler_ms <= 0:

        def handler(msg: Message) -> None:
            now = _perf()
            if record(msg.body, now) and finish(now):
                stop.set()

        reader.set_message_handler(handler, direct=True)
        notes = "set_message_handler(fn, direct=True)"
    else:
        delay = a.handler_ms / 1000.0

        async def slow(msg: Message) -> None:
            new = record(msg.body, _perf())
            await asyncio.sleep(delay)
            if new and finish(_perf()):
                stop.set()

        reader.set_message_handler(slow, concurrency=concurrency)
        notes = f"async handler, asyncio.sleep({delay:g}), concurrency={concurrency}"
    if a.stop_on_stdin:
        _watch_stdin(asyncio.get_running_loop(), stop)
    cpu0 = _cpu_s()
    t0 = rec.t0 = _perf()  # the clock starts here, as go-nsq's at ConnectToNSQLookupd
    start_unix = time.time()
    await reader.start()
    try:
        await asyncio.wait_for(stop.wait(), a.max_duration)
        stopped_by = "done" if rec.done_s is not None else "stdin"
    except TimeoutError:
        stopped_by = "max-duration"
    end_s = _perf() - t0
    cpu_s = _cpu_s() - cpu0
    connections = len(reader.connections)
    stats = reader.stats()
    await reader.graceful_close()
    return {
        "fleetbench": 1,
        "client": "nsqclient",
        "version": __version__,
        "runtime": f"{platform.python_implementation()} {platform.python_version()}",
        "status": "ok",
        **rec.as_dict(),
        "start_unix": start_unix,
        "end_s": end_s,
        "stopped_by": stopped_by,
        "cpu_s": cpu_s,
        "max_rss_kib": _peak_rss_kib(),
        "connections": connections,
        "max_in_flight": a.max_in_flight,
        "handler_ms": a.handler_ms,
        "concurrency": 1 if a.handler_ms <= 0 else concurrency,
        "options": options,
        "reader_errors": {k: stats[k] for k in ("timed_out", "response_errors", "given_up")},
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        result = asyncio.run(consume(a))
    except Exception as exc:  # reported as a result line, as the compare drivers do
        result = {
            "fleetbench": 1,
            "client": "nsqclient",
            "status": "error",
            "reason": f"{type(exc).__name__}: {exc}",
        }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
