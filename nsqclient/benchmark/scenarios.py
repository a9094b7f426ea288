"""The asyncio measurements: PUB, MPUB, end-to-end, drains, graceful-close requeue, fan-out, HTTP.

Each function measures one thing through the public API and returns a
:data:`~nsqclient.benchmark.params.Measurement`; setting up topics, preloading channels and
checking nsqd's own counters afterwards is the runner's job. Clocks: a publish clock stops when
the last acknowledgement arrives; a delivery clock stops in the handler that FINs the last
missing sequence id, which sets an event (nothing polls).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from array import array
from collections.abc import Awaitable, Callable

from ..aio import Message, Reader, Writer
from .accounting import (
    SequenceTracker,
    body_factory,
    latency_summary,
    publish_result,
    steady_mark,
    steady_rate,
)
from .params import HTTP_CONCURRENCY, Measurement, Params

__all__ = [
    "DRAIN_MODES",
    "measure_drain",
    "measure_e2e",
    "measure_fanout",
    "measure_http_fallback",
    "measure_http_mpub",
    "measure_http_pub",
    "measure_mpub",
    "measure_pub",
    "measure_requeue",
    "publish_with",
]

DRAIN_MODES = ("direct", "iter", "queue", "queue-async")

_perf_ns = time.perf_counter_ns
_now_ns = time.time_ns
_perf = time.perf_counter


async def _gather_workers(
    count: int, worker: Callable[[], Awaitable[None]], timeout: float
) -> bool:
    """Run ``count`` copies of ``worker``; False if ``timeout`` passed first."""
    tasks = [asyncio.ensure_future(worker()) for _ in range(count)]
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*tasks)
    except TimeoutError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return False
    return True


async def publish_with(
    writer: Writer, p: Params, *, latencies: array[int] | None = None
) -> tuple[int, int, bool]:
    """PUB ``p.messages`` bodies with ``p.concurrency`` outstanding.

    Returns (acknowledged, failed, finished_in_time).
    """
    make = body_factory(p.payload_size)
    n = p.messages
    topic = p.topic
    seqs = iter(range(n))
    counts = [0, 0]  # acked, failed
    pub = writer.pub

    async def worker() -> None:
        for seq in seqs:
            t0 = _perf_ns()
            try:
                await pub(topic, make(seq))
            except Exception:
                counts[1] += 1
            else:
                counts[0] += 1
                if latencies is not None:
                    latencies.append(_perf_ns() - t0)

    ok = await _gather_workers(max(1, min(p.concurrency, n)), worker, p.timeout)
    return counts[0], counts[1], ok


async def mpub_with(
    writer: Writer, p: Params, *, latencies: array[int] | None = None
) -> tuple[int, int, bool]:
    """MPUB ``p.messages`` bodies in batches of ``p.batch_size``, ``p.mpub_concurrency``
    batches outstanding. Returns (messages acknowledged, messages failed, finished_in_time)."""
    make = body_factory(p.payload_size)
    n = p.messages
    size = p.batch_size
    topic = p.topic
    starts = iter(range(0, n, size))
    counts = [0, 0]

    async def worker() -> None:
        for lo in starts:
            bodies = [make(seq) for seq in range(lo, min(lo + size, n))]
            t0 = _perf_ns()
            try:
                await writer.mpub(topic, bodies)
            except Exception:
                counts[1] += len(bodies)
            else:
                counts[0] += len(bodies)
                if latencies is not None:
                    latencies.append(_perf_ns() - t0)

    batches = -(-n // size)
    ok = await _gather_workers(max(1, min(p.mpub_concurrency, batches)), worker, p.timeout)
    return counts[0], counts[1], ok


async def measure_pub(p: Params) -> Measurement:
    """TCP PUB with ``p.concurrency`` publishes outstanding; per-message ack latency."""
    latencies: array[int] = array("q")
    async with Writer(p.nsqd_tcp, **p.writer_options) as writer:
        p.probe.count = latencies.__len__
        start = _perf()
        acked, failed, ok = await publish_with(writer, p, latencies=latencies)
        duration = _perf() - start
    return publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=p.messages,
        in_time=ok,
        notes="ack latency per message",
    )


async def measure_mpub(p: Params) -> Measurement:
    """TCP MPUB batches; ack latency per batch."""
    latencies: array[int] = array("q")
    async with Writer(p.nsqd_tcp) as writer:
        p.probe.count = lambda: len(latencies) * p.batch_size
        start = _perf()
        acked, failed, ok = await mpub_with(writer, p, latencies=latencies)
        duration = _perf() - start
    return publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=p.messages,
        in_time=ok,
        notes=f"ack latency per batch; {p.mpub_concurrency} batches outstanding",
        concurrency=p.mpub_concurrency,
    )


class _Collector:
    """A direct handler that FINs, records, and signals the delivery that completes the set."""

    __slots__ = ("done", "end", "latency", "mark", "mark_at", "tracker")

    def __init__(self, expected: int, *, latency: bool) -> None:
        self.tracker = SequenceTracker(expected)
        self.done = asyncio.Event()
        self.end = 0.0
        self.latency = latency
        self.mark = steady_mark(expected)
        self.mark_at = 0.0
        if expected == 0:
            self.done.set()

    def __call__(self, msg: Message) -> None:
        msg.fin()
        tracker = self.tracker
        if tracker.record(msg.body, _now_ns() if self.latency else 0):
            self.end = _perf()
            self.done.set()
        if tracker.unique == self.mark and not self.mark_at:
            self.mark_at = _perf()

    async def wait(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                await self.done.wait()
        except TimeoutError:
            return False
        return True

    def result(self, start: float, completed: bool) -> Measurement:
        t = self.tracker
        end = self.end if completed else _perf()
        return {
            "steady_msg_s": steady_rate(self.mark, start, self.mark_at),
            "duration_s": end - start,
            "latency_ms": latency_summary(t.latencies_ns),
            "received": t.received,
            "missing": t.missing,
            "duplicates": t.duplicates,
            "fin_errors": t.invalid,
            "timed_out": not completed,
        }


def _reader_errors(reader: Reader) -> int:
    stats = reader.stats()
    return int(stats["response_errors"]) + int(stats["lost_on_disconnect"])


async def measure_e2e(p: Params) -> Measurement:
    """Reader up first (direct handler FINs), then PUB with ``p.concurrency`` outstanding;
    the clock runs from the first publish to the last FIN. Latency: publish -> FIN."""
    collector = _Collector(p.messages, latency=True)
    reader = Reader(p.topic, p.channel, max_in_flight=p.max_in_flight, **p.reader_addresses())
    reader.set_message_handler(collector, direct=True)
    p.probe.count = lambda: collector.tracker.unique
    await reader.start()
    try:
        async with Writer(p.nsqd_tcp, **p.writer_options) as writer:
            start = _perf()
            acked, failed, ok = await publish_with(writer, p)
            published = _perf() - start
            completed = await collector.wait(p.timeout - published)
        result = collector.result(start, completed)
    finally:
        await reader.graceful_close()
    result["publish_duration_s"] = published
    result["publish_errors"] = failed + (p.messages - acked - failed)
    result["fin_errors"] += _reader_errors(reader)
    result["timed_out"] = result["timed_out"] or not ok
    result["notes"] = f"publish {p.messages / published:,.0f} msg/s; latency publish->FIN"
    return result


async def measure_drain(p: Params, mode: str = "direct") -> Measurement:
    """Consume a preloaded channel: clock from ``start()`` to the last FIN.

    Modes: ``direct`` (plain handler on the read path), ``iter`` (``async for``),
    ``queue`` (plain handler, queue-backed), ``queue-async`` (coroutine handler,
    ``p.concurrency`` workers).
    """
    if mode not in DRAIN_MODES:
        raise ValueError(f"unknown drain mode {mode!r}")
    collector = _Collector(p.messages, latency=False)
    reader = Reader(p.topic, p.channel, max_in_flight=p.max_in_flight, **p.reader_addresses())
    p.probe.count = lambda: collector.tracker.unique
    consumer: asyncio.Task[None] | None = None
    if mode == "direct":
        reader.set_message_handler(collector, direct=True)
    elif mode == "queue":
        reader.set_message_handler(collector)
    elif mode == "queue-async":
        sync_collect = collector

        async def handler(msg: Message) -> None:
            sync_collect(msg)

        reader.set_message_handler(handler, concurrency=max(1, p.concurrency))
    start = _perf()
    try:
        await reader.start()
        if mode == "iter":
            tracker = collector.tracker

            async def consume() -> None:
                mark = collector.mark
                async for msg in reader:
                    await msg.fin()
                    if tracker.record(msg.body):
                        collector.end = _perf()
                        collector.done.set()
                        return
                    if tracker.unique == mark and not collector.mark_at:
                        collector.mark_at = _perf()

            consumer = asyncio.ensure_future(consume())
        completed = await collector.wait(p.timeout)
        result = collector.result(start, completed)
    finally:
        if consumer is not None and not consumer.done():
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        await reader.graceful_close()
    result["fin_errors"] += _reader_errors(reader)
    result["notes"] = {
        "direct": "set_message_handler(fn, direct=True)",
        "iter": "async for msg in reader: await msg.fin()",
        "queue": "set_message_handler(fn) (queue-backed)",
        "queue-async": f"async handler, concurrency={max(1, p.concurrency)}",
    }[mode]
    result["latency_ms"] = None
    return result


async def measure_requeue(p: Params, hold: int) -> Measurement:
    """Consume ``hold`` messages of a preloaded channel without finishing them, then
    ``graceful_close()`` from the consuming task; a fresh Reader must then recover every message
    (exactly once). Reports the close time and what nsqd saw (``extra``)."""
    first = Reader(p.topic, p.channel, max_in_flight=p.max_in_flight, **p.reader_addresses())
    held: list[Message] = []
    start = _perf()
    close_s = 0.0
    timed_out = False
    await first.start()
    try:
        async with asyncio.timeout(p.timeout):
            async for msg in first:
                held.append(msg)
                if len(held) >= hold:
                    t0 = _perf()
                    await first.graceful_close()
                    close_s = _perf() - t0
                    break
    except TimeoutError:
        timed_out = True
    finally:
        if not first.is_closed:
            t0 = _perf()
            await first.graceful_close()
            close_s = _perf() - t0
    first_stats = first.stats()
    unanswered = sum(1 for m in held if not m.has_responded)
    recovered = await measure_drain(p.replace(timeout=max(1.0, p.timeout - (_perf() - start))))
    recovered["duration_s"] = _perf() - start
    recovered["timed_out"] = recovered["timed_out"] or timed_out
    recovered["extra"] = {
        "held": len(held),
        "first_reader_received": first_stats["received"],
        "first_reader_requeued": first_stats["requeued"],
        "held_left_unanswered": unanswered,
        "graceful_close_s": close_s,
    }
    recovered["fin_errors"] += unanswered
    recovered["notes"] = (
        f"held {len(held)} unfinished, graceful_close {close_s * 1000:.0f} ms requeued "
        f"{first_stats['requeued']}; fresh reader recovered "
        f"{p.messages - recovered['missing']}/{p.messages}"
    )
    return recovered


async def measure_fanout(p: Params, channels: list[str]) -> Measurement:
    """One topic, one Reader per channel; MPUB ``p.messages`` once and time every channel.

    Write rate is messages / publish time; each channel's read rate is messages / (its last
    FIN - first publish); msg/s counts deliveries (messages x channels).
    """
    collectors = [_Collector(p.messages, latency=True) for _ in channels]
    readers = []
    for channel, collector in zip(channels, collectors, strict=True):
        reader = Reader(p.topic, channel, max_in_flight=p.max_in_flight, **p.reader_addresses())
        reader.set_message_handler(collector, direct=True)
        readers.append(reader)
    p.probe.count = lambda: sum(c.tracker.unique for c in collectors)
    try:
        await asyncio.gather(*(r.start() for r in readers))
        async with Writer(p.nsqd_tcp) as writer:
            start = _perf()
            acked, failed, ok = await mpub_with(writer, p)
            published = _perf() - start
        done = await asyncio.gather(*(c.wait(p.timeout - published) for c in collectors))
    finally:
        await asyncio.gather(*(r.graceful_close() for r in readers), return_exceptions=True)
    completed = all(done)
    ends = [c.end if ok_ else _perf() for c, ok_ in zip(collectors, done, strict=True)]
    rates = [p.messages / max(1e-9, end - start) for end in ends]
    latencies: list[int] = []
    for c in collectors:
        latencies.extend(c.tracker.latencies_ns)
    fin_errors = sum(c.tracker.invalid for c in collectors) + sum(map(_reader_errors, readers))
    return {
        "duration_s": max(ends) - start,
        "publish_duration_s": published,
        "latency_ms": latency_summary(latencies),
        "received": sum(c.tracker.received for c in collectors),
        "missing": sum(c.tracker.missing for c in collectors),
        "duplicates": sum(c.tracker.duplicates for c in collectors),
        "publish_errors": failed + (p.messages - acked - failed),
        "fin_errors": fin_errors,
        "timed_out": not (completed and ok),
        "deliveries": p.messages * len(channels),
        "extra": {
            "channels": len(channels),
            "write_msg_s": p.messages / max(1e-9, published),
            "read_msg_s_per_channel": {
                "min": min(rates),
                "median": statistics.median(rates),
                "max": max(rates),
            },
        },
        "notes": (
            f"{len(channels)} channels; write {p.messages / max(1e-9, published):,.0f} msg/s; "
            f"per-channel read min/median/max {min(rates):,.0f}/{statistics.median(rates):,.0f}/"
            f"{max(rates):,.0f} msg/s"
        ),
    }


async def _http_publish(p: Params, http_addresses: list[str], *, batch: bool) -> Measurement:
    make = body_factory(p.payload_size)
    from ..http import NsqdHTTPClient  # here, so TCP scenarios' peak RSS excludes httpx

    clients = [NsqdHTTPClient(a, timeout=p.timeout) for a in http_addresses]
    latencies: array[int] = array("q")
    counts = [0, 0]
    n = p.messages
    size = p.batch_size if batch else 1
    starts = iter(range(0, n, size))
    rr = itertools.cycle(clients)

    async def worker() -> None:
        for lo in starts:
            client = next(rr)
            t0 = _perf_ns()
            try:
                if batch:
                    bodies = [make(seq) for seq in range(lo, min(lo + size, n))]
                    t0 = _perf_ns()
                    await client.mpub(p.topic, bodies)
                else:
                    await client.pub(p.topic, make(lo))
            except Exception:
                counts[1] += min(size, n - lo)
            else:
                counts[0] += min(size, n - lo)
                latencies.append(_perf_ns() - t0)

    concurrency = p.mpub_concurrency if batch else min(p.concurrency, HTTP_CONCURRENCY)
    workers = max(1, min(concurrency, -(-n // size)))
    p.probe.count = lambda: counts[0]
    try:
        start = _perf()
        ok = await _gather_workers(workers, worker, p.timeout)
        duration = _perf() - start
    finally:
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
    return {
        "duration_s": duration,
        "latency_ms": latency_summary(latencies),
        "publish_errors": counts[1] + (n - counts[0] - counts[1]),
        "timed_out": not ok,
        "received": counts[0],
        "concurrency": workers,
        "notes": "NsqdHTTPClient." + ("mpub (binary); latency per batch" if batch else "pub"),
    }


async def measure_http_pub(p: Params, http_addresses: list[str]) -> Measurement:
    return await _http_publish(p, http_addresses, batch=False)


async def measure_http_mpub(p: Params, http_addresses: list[str]) -> Measurement:
    return await _http_publish(p, http_addresses, batch=True)


async def measure_http_fallback(p: Params, http_addresses: list[str]) -> Measurement:
    """``Writer.pub`` with no TCP connection (its address has no listener), so every publish
    takes the HTTP fallback; ``HTTP_CONCURRENCY`` publishes outstanding."""
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{probe.getsockname()[1]}"
    latencies: array[int] = array("q")
    workers = min(p.concurrency, HTTP_CONCURRENCY)
    async with Writer(
        [nowhere],
        http_fallback_addresses=http_addresses,
        reconnect_delay=60_000,
        max_reconnect_delay=60_000,
    ) as writer:
        p.probe.count = latencies.__len__
        start = _perf()
        acked, failed, ok = await publish_with(
            writer, p.replace(concurrency=workers), latencies=latencies
        )
        duration = _perf() - start
        over_http = writer.published_over_http
    return publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=p.messages,
        in_time=ok,
        notes=f"Writer.pub over the HTTP fallback ({over_http} of {acked} by HTTP)",
        concurrency=workers,
    )
