"""``python -m benchmarks.soak``: hours-of-use in minutes, through a link that keeps breaking.

An asyncio Writer and Reader and a SyncWriter thread and a SyncReader thread share one topic
and channel, all four connected through a :class:`~nsqclient.testing.FaultProxy` that cuts
every connection every ``--cut-every`` seconds (alternating FIN and RST). Every
``--sample-every`` seconds the process's RSS, the Python heap that tracemalloc traces (live
allocations, the allocator's free lists excluded) and the publish/consume rates are sampled.

Accounting is per message, in preallocated byte arrays (one byte per message id and source,
their pages touched up front, so the ledger itself does not grow RSS): an id is marked acked
when its publish returned, and counted when a consumer handled it. A message delivered with
``attempts == 1`` twice was stored twice (a duplicate); a delivery with ``attempts > 1`` is a
redelivery (at-least-once at work). The run fails (exit status 1) if an acknowledged message was
lost (never consumed), if one was stored twice, if anything is left in flight or queued at nsqd
at the end, or if RSS grew by more than ``--rss-growth-limit`` MiB over the second half.

At the end of the run (every client still open) and again with the clients closed, the traced
heap is compared with the first sample after warm-up (the ten biggest differences by source line
of each go into the report), and RSS is measured
again after glibc's ``malloc_trim(0)``: what that gives back was free memory the allocator kept,
not live objects.

Without ``--nsqd-tcp-address``/``--nsqd-http-address`` the soak starts its own nsqd (real
binaries when found, else the embedded server; ``--backend``), with ``--msg-timeout`` short so
that deliveries cut in flight come back quickly.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import dataclasses
import gc
import json
import logging
import os
import resource
import struct
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nsqclient
from nsqclient.aio import Message, Reader, Writer
from nsqclient.errors import NSQError
from nsqclient.http import NsqdHTTPClient
from nsqclient.sync import SyncReader, SyncWriter

__all__ = ["SoakSettings", "main", "run_soak"]

_ID = struct.Struct(">BQ")  # source, sequence number: the first 9 bytes of every body
_ASYNC, _SYNC = 0, 1
_TICK = 0.01
_CLIENT: dict[str, Any] = {
    "heartbeat_interval": 2000,
    "reconnect_delay": 50,
    "max_reconnect_delay": 500,
    "publish_timeout": 5000,
}


@dataclasses.dataclass
class SoakSettings:
    duration: float = 600.0
    rate: int = 2000  # asyncio producer, messages per second
    sync_rate: int = 200  # SyncWriter thread, messages per second
    cut_every: float = 30.0
    sample_every: float = 30.0
    payload_size: int = 100
    max_in_flight: int = 200
    rss_growth_limit_mib: float = 8.0
    drain_timeout: float = 120.0
    tracemalloc: bool = True
    nsqd_tcp: str | None = None
    nsqd_http: str | None = None
    backend: str = "auto"
    topic: str = ""


@dataclasses.dataclass
class Sample:
    t: float  # seconds since the start
    rss_mib: float
    traced_mib: float  # live Python allocations (tracemalloc), 0 without --tracemalloc
    acked: int  # publishes acknowledged so far (messages)
    consumed: int  # deliveries handled so far (redeliveries included)
    publish_rate: float  # acknowledged messages per second since the previous sample
    consume_rate: float
    publish_errors: int
    cuts: int


class _Ledger:
    """One byte per message id and source: acked (0/1) and times consumed (saturating)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.acked = [_touched(capacity), _touched(capacity)]
        self.seen = [_touched(capacity), _touched(capacity)]
        self.firsts = [_touched(capacity), _touched(capacity)]  # deliveries with attempts == 1
        self.next = [0, 0]
        self.acked_count = 0
        self.consumed = 0
        self.errors = 0

    def take(self, source: int, n: int) -> range:
        start = self.next[source]
        if start + n > self.capacity:
            raise RuntimeError("soak ledger full: raise the capacity (rate x duration)")
        self.next[source] = start + n
        return range(start, start + n)

    def ack(self, source: int, ids: range) -> None:
        arr = self.acked[source]
        for i in ids:
            arr[i] = 1
        self.acked_count += len(ids)

    def consume(self, body: bytes, attempts: int) -> None:
        source, seq = _ID.unpack_from(body)
        arr = self.seen[source]
        if arr[seq] < 255:
            arr[seq] += 1
        if attempts == 1:
            firsts = self.firsts[source]
            if firsts[seq] < 255:
                firsts[seq] += 1
        self.consumed += 1

    def missing(self) -> int:
        """Acknowledged ids never consumed."""
        return self.audit()[0]

    def audit(self) -> tuple[int, int, int, int]:
        """(acknowledged but never consumed, consumed though its publish raised, deliveries
        beyond the first, ids stored twice): the first and last must be 0; the others are
        at-least-once at work."""
        missing = unacked = extra = twice = 0
        for source in (_ASYNC, _SYNC):
            acked, seen, firsts = self.acked[source], self.seen[source], self.firsts[source]
            for i in range(self.next[source]):
                n = seen[i]
                if firsts[i] > 1:
                    twice += 1
                if not n:
                    missing += acked[i]
                    continue
                extra += n - 1
                if not acked[i]:
                    unacked += 1
        return missing, unacked, extra, twice


def _touched(n: int) -> bytearray:
    arr = bytearray(n)
    for i in range(0, n, 4096):  # fault every page in now, not during the run
        arr[i] = 0
    return arr


def rss_mib() -> float:
    """Resident set size of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def traced_mib() -> float:
    """Live Python allocations that tracemalloc traces (0 when it is not tracing)."""
    return tracemalloc.get_traced_memory()[0] / (1 << 20) if tracemalloc.is_tracing() else 0.0


def trim_heap() -> bool:
    """glibc's ``malloc_trim(0)``: give the allocator's free pages back to the OS (False where
    there is no glibc). RSS that drops here was free memory kept, not live objects."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError, TypeError):
        return False


def heap_diff(
    before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int = 10
) -> list[dict[str, Any]]:
    """The ``top`` biggest changes in live bytes by source line, biggest first."""
    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
    ]
    stats = after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "lineno")
    out = []
    for stat in stats[:top]:
        frame = stat.traceback[0]
        out.append(
            {
                "where": f"{_short(frame.filename)}:{frame.lineno}",
                "kib_diff": round(stat.size_diff / 1024, 1),
                "kib": round(stat.size / 1024, 1),
                "count_diff": stat.count_diff,
            }
        )
    return out


def _short(filename: str) -> str:
    for marker in ("/nsqclient/", "/benchmarks/", "/python3."):
        i = filename.rfind(marker)
        if i >= 0:
            return filename[i + 1 :]
    return filename


def _body(source: int, seq: int, pad: bytes) -> bytes:
    return _ID.pack(source, seq) + pad


async def run_soak(settings: SoakSettings, log: Any = None) -> dict[str, Any]:
    """Run the soak; return the report (``result.ok`` says whether every promise held)."""
    from nsqclient.testing import FaultProxy, start_nsqd

    say = log if log is not None else (lambda _line: None)
    own = None
    started_tracing = settings.tracemalloc and not tracemalloc.is_tracing()
    if started_tracing:
        tracemalloc.start()
    warm: tracemalloc.Snapshot | None = None
    warm_at: tuple[float, float, float] = (0.0, 0.0, 0.0)  # t, rss, traced after warm-up
    running: tracemalloc.Snapshot | None = None  # at the end of the run, the clients open
    if settings.nsqd_tcp is None or settings.nsqd_http is None:
        own = await asyncio.to_thread(
            start_nsqd, settings.backend, extra_args=["--msg-timeout=10s"]
        )
        tcp, http = own.tcp_address, own.http_address
        nsqd_kind = "embedded" if type(own).__name__.startswith("Threaded") else "real nsqd"
    else:
        tcp, http = settings.nsqd_tcp, settings.nsqd_http
        nsqd_kind = "given"
    topic = settings.topic or f"soak-{uuid.uuid4().hex[:8]}"
    channel = "soak"
    capacity = int((settings.rate + settings.sync_rate) * (settings.duration + 60) * 1.2) + 10_000
    ledger = _Ledger(capacity)
    pad = b"x" * max(0, settings.payload_size - _ID.size)
    proxy = FaultProxy(tcp).start_in_thread()
    loop = asyncio.get_running_loop()
    http_client = NsqdHTTPClient(http)
    samples: list[Sample] = []
    stop = threading.Event()
    missing = in_flight = depth = -1
    proxy_counters: dict[str, int] = {}
    load_start = os.getloadavg()
    try:
        await http_client.create_topic(topic)
        await http_client.create_channel(topic, channel)
        writer = Writer([proxy.address], **_CLIENT)
        await writer.start()
        reader = Reader(
            topic,
            channel,
            nsqd_tcp_addresses=[proxy.address],
            max_in_flight=settings.max_in_flight,
            **_CLIENT,
        )

        def on_message(msg: Message) -> None:
            ledger.consume(msg.body, msg.attempts)

        reader.set_message_handler(on_message, direct=True)
        await reader.start()
        sync_writer = SyncWriter([proxy.address], **_CLIENT)
        sync_reader = SyncReader(
            topic, channel, nsqd_tcp_addresses=[proxy.address], max_in_flight=50, **_CLIENT
        )
        threads = [
            threading.Thread(
                target=_sync_producer,
                args=(sync_writer, topic, settings, ledger, pad, stop),
                name="soak-sync-writer",
                daemon=True,
            ),
            threading.Thread(
                target=_sync_consumer,
                args=(sync_reader, ledger, stop),
                name="soak-sync-reader",
                daemon=True,
            ),
        ]
        await asyncio.to_thread(sync_reader.start)
        for t in threads:
            t.start()
        start = loop.time()
        producing = asyncio.create_task(_async_producer(writer, topic, settings, ledger, pad))
        cuts = 0
        next_cut, next_sample = settings.cut_every, settings.sample_every
        last = (0.0, 0, 0)
        samples.append(
            Sample(0.0, round(rss_mib(), 2), round(traced_mib(), 2), 0, 0, 0.0, 0.0, 0, 0)
        )
        while (now := loop.time() - start) < settings.duration:
            await asyncio.sleep(min(next_cut, next_sample, settings.duration) - now)
            now = loop.time() - start
            if now >= next_cut and now < settings.duration:
                proxy.cut(rst=cuts % 2 == 1)
                cuts += 1
                next_cut += settings.cut_every
            if now >= next_sample or now >= settings.duration:
                dt = max(now - last[0], 1e-9)
                sample = Sample(
                    round(now, 1),
                    round(rss_mib(), 2),
                    round(traced_mib(), 2),
                    ledger.acked_count,
                    ledger.consumed,
                    round((ledger.acked_count - last[1]) / dt, 1),
                    round((ledger.consumed - last[2]) / dt, 1),
                    ledger.errors,
                    cuts,
                )
                samples.append(sample)
                last = (now, ledger.acked_count, ledger.consumed)
                next_sample += settings.sample_every
                if warm is None and tracemalloc.is_tracing():
                    # the first sample: every client connected and past its first cut or two
                    warm = tracemalloc.take_snapshot()
                    warm_at = (sample.t, sample.rss_mib, sample.traced_mib)
                say(
                    f"soak {sample.t:6.0f}s  rss {sample.rss_mib:6.1f} MiB  "
                    f"traced {sample.traced_mib:5.1f} MiB  "
                    f"pub {sample.publish_rate:8,.0f}/s  sub {sample.consume_rate:8,.0f}/s  "
                    f"acked {sample.acked:,}  errors {sample.publish_errors:,}  cuts {cuts}"
                )
        # still running, every client open: what grew since warm-up is held by someone now
        gc.collect()
        running = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
        producing.cancel()
        await asyncio.gather(producing, return_exceptions=True)
        stop.set()
        await asyncio.to_thread(threads[0].join, 30)
        await writer.graceful_close()
        await asyncio.to_thread(sync_writer.graceful_close)
        # everything acknowledged must come out (cut deliveries come back after msg-timeout)
        deadline = loop.time() + settings.drain_timeout
        missing = ledger.missing()
        while missing and loop.time() < deadline:
            await asyncio.sleep(1.0)
            missing = ledger.missing()
        in_flight = depth = -1
        while loop.time() < deadline:
            in_flight, depth = await _channel_left(http_client, topic, channel)
            if in_flight == 0 and depth == 0:
                break
            await asyncio.sleep(0.5)
        await reader.graceful_close()
        await asyncio.to_thread(sync_reader.graceful_close)
        await asyncio.to_thread(threads[1].join, 30)
    finally:
        stop.set()
        await http_client.aclose()
        proxy_counters = dataclasses.asdict(proxy.counters())
        proxy.stop()
        if own is not None:
            await asyncio.to_thread(own.stop)
    # after: every client closed, so what is still traced is what closing left behind
    gc.collect()
    after = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
    end_rss, end_traced = rss_mib(), traced_mib()
    trimmed = trim_heap()
    trimmed_rss = rss_mib()
    diff = heap_diff(warm, after) if warm is not None and after is not None else []
    running_diff = heap_diff(warm, running) if warm is not None and running is not None else []
    if started_tracing:
        tracemalloc.stop()
    _missing, delivered_unacked, redelivered, stored_twice = ledger.audit()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    half = [s for s in samples if s.t >= settings.duration / 2]
    growth = (samples[-1].rss_mib - half[0].rss_mib) if half else 0.0
    result = {
        "ok": missing == 0
        and stored_twice == 0
        and in_flight == 0
        and depth == 0
        and growth <= settings.rss_growth_limit_mib,
        "acked": ledger.acked_count,
        "consumed": ledger.consumed,
        "publish_errors": ledger.errors,
        "missing_acknowledged": missing,
        "lost": missing,
        "duplicates_stored_twice": stored_twice,
        "delivered_though_publish_raised": delivered_unacked,
        "redelivered": redelivered,
        "client_cpu_seconds": round(cpu.ru_utime + cpu.ru_stime, 1),
        "left_in_flight": in_flight,
        "left_queued": depth,
        "cuts": samples[-1].cuts if samples else 0,
        "connections_cut": proxy_counters.get("connections_cut", 0),
        "connections_accepted": proxy_counters.get("connections_accepted", 0),
        "rss_start_mib": samples[0].rss_mib,
        "rss_end_mib": samples[-1].rss_mib,
        "rss_growth_second_half_mib": round(growth, 2),
        "rss_growth_limit_mib": settings.rss_growth_limit_mib,
        "traced_start_mib": samples[0].traced_mib,
        "traced_end_mib": samples[-1].traced_mib,
        "warm_sample_t": warm_at[0],
        "warm_rss_mib": warm_at[1],
        "warm_traced_mib": warm_at[2],
        "closed_rss_mib": round(end_rss, 2),
        "closed_traced_mib": round(end_traced, 2),
        "closed_rss_after_malloc_trim_mib": round(trimmed_rss, 2) if trimmed else None,
        "traced_diff_since_warm_by_line": diff,
        "traced_diff_running_by_line": running_diff,
    }
    return {
        "settings": dataclasses.asdict(settings)
        | {"topic": topic, "nsqd_tcp": tcp, "nsqd_http": http, "nsqd": nsqd_kind},
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": [round(x, 2) for x in load_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "python": sys.version.split()[0],
            "nsqclient": str(Path(nsqclient.__file__).parent),
        },
        "samples": [dataclasses.asdict(s) for s in samples],
        "result": result,
    }


async def _async_producer(
    writer: Writer, topic: str, settings: SoakSettings, ledger: _Ledger, pad: bytes
) -> None:
    """``rate`` messages a second: every tick one MPUB, or PUBs in flight together."""
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()
    owed, tick, start = 0.0, 0, loop.time()

    async def send(ids: range, mpub: bool) -> None:
        bodies = [_body(_ASYNC, i, pad) for i in ids]
        try:
            if mpub:
                await writer.mpub(topic, bodies)
            else:
                await asyncio.gather(*(writer.pub(topic, b) for b in bodies))
        except NSQError:
            ledger.errors += 1
            return
        ledger.ack(_ASYNC, ids)

    try:
        while True:
            tick += 1
            owed += settings.rate * _TICK
            n = int(owed)
            if n:
                owed -= n
                task = loop.create_task(send(ledger.take(_ASYNC, n), tick % 2 == 0))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await asyncio.sleep(max(0.0, start + tick * _TICK - loop.time()))
    finally:
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def _sync_producer(
    writer: SyncWriter,
    topic: str,
    settings: SoakSettings,
    ledger: _Ledger,
    pad: bytes,
    stop: threading.Event,
) -> None:
    interval = 1.0 / settings.sync_rate
    next_at = time.monotonic()
    while not stop.is_set():
        (seq,) = ledger.take(_SYNC, 1)
        try:
            writer.pub(topic, _body(_SYNC, seq, pad))
        except NSQError:
            ledger.errors += 1
        else:
            ledger.ack(_SYNC, range(seq, seq + 1))
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()  # behind (a cut): do not burst to catch up


def _sync_consumer(reader: SyncReader, ledger: _Ledger, stop: threading.Event) -> None:
    while not (stop.is_set() and reader.is_closed):
        try:
            msg = reader.get(timeout=0.2)
        except NSQError:
            return  # closed
        if msg is None:
            if reader.is_closed:
                return
            continue
        ledger.consume(msg.body, msg.attempts)
        msg.fin()


async def _channel_left(http: NsqdHTTPClient, topic: str, channel: str) -> tuple[int, int]:
    stats = await http.stats(topic=topic)
    for t in stats.get("topics") or ():
        if t["topic_name"] == topic:
            for c in t.get("channels") or ():
                if c["channel_name"] == channel:
                    return int(c["in_flight_count"]), int(c["depth"])
    return 0, 0


# --------------------------------------------------------------------------- command line


def build_parser(prog: str = "python -m benchmarks.soak") -> argparse.ArgumentParser:
    defaults = SoakSettings()
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Long run through a fault proxy that cuts every connection periodically: "
        "fails on a lost acknowledged message, anything left in flight, or RSS growth.",
    )
    parser.add_argument("--duration", type=float, default=defaults.duration, help="seconds")
    parser.add_argument("--rate", type=int, default=defaults.rate, help="asyncio msg/s")
    parser.add_argument(
        "--sync-rate", type=int, default=defaults.sync_rate, help="SyncWriter msg/s"
    )
    parser.add_argument("--cut-every", type=float, default=defaults.cut_every, help="seconds")
    parser.add_argument("--sample-every", type=float, default=defaults.sample_every)
    parser.add_argument("--payload-size", type=int, default=defaults.payload_size)
    parser.add_argument(
        "--rss-growth-limit",
        type=float,
        default=defaults.rss_growth_limit_mib,
        help="MiB of RSS growth allowed over the second half (default %(default)s)",
    )
    parser.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout)
    parser.add_argument(
        "--no-tracemalloc",
        dest="tracemalloc",
        action="store_false",
        help="do not trace the Python heap (tracing costs CPU per allocation)",
    )
    # the names of every nsqclient command; the old short ones stay as hidden aliases
    parser.add_argument(
        "--nsqd-tcp-address", dest="nsqd_tcp", metavar="HOST:PORT", help="default: start an nsqd"
    )
    parser.add_argument("--nsqd-http-address", dest="nsqd_http", metavar="HOST:PORT")
    parser.add_argument("--nsqd-tcp", dest="nsqd_tcp", help=argparse.SUPPRESS)
    parser.add_argument("--nsqd-http", dest="nsqd_http", help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=["auto", "real", "embedded"], default="auto")
    parser.add_argument("--json", type=Path, help="write samples and the verdict here")
    parser.add_argument(
        "--chart", type=Path, help="write a PNG of RSS and rates (needs matplotlib)"
    )
    parser.add_argument("--quiet", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m benchmarks.soak") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if (args.nsqd_tcp is None) != (args.nsqd_http is None):
        parser.error("give both --nsqd-tcp-address and --nsqd-http-address, or neither")
    if args.chart is not None:
        from .chart import matplotlib_available

        if not matplotlib_available():
            parser.error("--chart needs matplotlib: pip install matplotlib")
    settings = SoakSettings(
        duration=args.duration,
        rate=args.rate,
        sync_rate=args.sync_rate,
        cut_every=args.cut_every,
        sample_every=args.sample_every,
        payload_size=args.payload_size,
        rss_growth_limit_mib=args.rss_growth_limit,
        drain_timeout=args.drain_timeout,
        tracemalloc=args.tracemalloc,
        nsqd_tcp=args.nsqd_tcp,
        nsqd_http=args.nsqd_http,
        backend=args.backend,
    )
    # the cuts are the point: the clients' connection-loss warnings would drown the samples
    # (and restored after, for a caller that runs this in its own process, as the tests do)
    clients_log = logging.getLogger("nsqclient")
    level = clients_log.level
    clients_log.setLevel(logging.ERROR)

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        report = asyncio.run(run_soak(settings, say))
    finally:
        clients_log.setLevel(level)
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    if args.chart is not None:
        from .chart import write_soak_chart

        write_soak_chart(args.chart, report)
    result = report["result"]
    print(json.dumps(result, indent=2))
    if not result["ok"]:
        say(f"{prog}: FAILED (see the result above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
