"""The same measurements through the blocking facade: SyncWriter from threads, SyncReader.

These run in ordinary threads (never on the loop thread), so the runner calls them directly,
outside ``asyncio.run``. CPU time covers the whole process, the loop thread included.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
import threading
import time
from array import array
from typing import Any, cast

from ..message import Message
from ..sync import SyncReader, SyncWriter
from .accounting import SequenceTracker, body_factory, latency_summary, publish_result
from .params import Measurement, Params

__all__ = [
    "measure_sync_drain",
    "measure_sync_e2e",
    "measure_sync_http_pub",
    "measure_sync_mpub_nowait",
    "measure_sync_pub_nowait",
    "measure_sync_pub_threads",
    "sync_pub_threads",
]

_perf = time.perf_counter
_perf_ns = time.perf_counter_ns
_now_ns = time.time_ns


def sync_pub_threads(
    writer: SyncWriter, p: Params, *, latencies: array[int] | None = None
) -> tuple[int, int]:
    """``p.threads`` threads calling the blocking ``pub()``; returns (acked, failed)."""
    make = body_factory(p.payload_size)
    seqs = iter(range(p.messages))
    lock = threading.Lock()
    counts = [0, 0]
    topic = p.topic

    def work() -> None:
        while True:
            with lock:
                seq = next(seqs, None)
            if seq is None:
                return
            t0 = _perf_ns()
            try:
                writer.pub(topic, make(seq))
            except Exception:
                with lock:
                    counts[1] += 1
            else:
                elapsed = _perf_ns() - t0
                with lock:
                    counts[0] += 1
                    if latencies is not None:
                        latencies.append(elapsed)

    threads = [
        threading.Thread(target=work, name=f"bench-pub-{i}", daemon=True)
        for i in range(max(1, min(p.threads, p.messages)))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(p.timeout)
    return counts[0], counts[1]


def measure_sync_pub_threads(p: Params) -> Measurement:
    """SyncWriter.pub() from ``p.threads`` threads; per-message ack latency."""
    latencies: array[int] = array("q")
    with SyncWriter(p.nsqd_tcp, **p.writer_options) as writer:
        p.probe.count = latencies.__len__
        start = _perf()
        acked, failed = sync_pub_threads(writer, p, latencies=latencies)
        duration = _perf() - start
    return publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=p.messages,
        in_time=acked + failed >= p.messages,
        notes=f"pub() from {max(1, min(p.threads, p.messages))} threads",
        concurrency=max(1, min(p.threads, p.messages)),
    )


def _windowed(p: Params, *, batch: bool) -> tuple[float, array[int], int, int, bool]:
    make = body_factory(p.payload_size)
    latencies: array[int] = array("q")
    n = p.messages
    size = p.batch_size if batch else 1
    window = p.mpub_concurrency if batch else p.concurrency
    pending: collections.deque[tuple[concurrent.futures.Future[None], int]] = collections.deque()
    counts = [0, 0]
    deadline = _perf() + p.timeout
    p.probe.count = lambda: counts[0]

    def settle(fut: concurrent.futures.Future[None], count: int) -> bool:
        try:
            fut.result(timeout=max(0.0, deadline - _perf()))
        except concurrent.futures.TimeoutError:
            return False
        except Exception:
            counts[1] += count
        else:
            counts[0] += count
        return True

    def stamp(t0: int, fut: concurrent.futures.Future[None]) -> None:
        latencies.append(_perf_ns() - t0)  # runs on the loop thread when the ack arrives

    in_time = True
    with SyncWriter(p.nsqd_tcp, **p.writer_options) as writer:
        start = _perf()
        for lo in range(0, n, size):
            while len(pending) >= window and in_time:
                in_time = settle(*pending.popleft())
            if not in_time:
                break
            t0 = _perf_ns()
            if batch:
                bodies = [make(seq) for seq in range(lo, min(lo + size, n))]
                t0 = _perf_ns()
                fut = writer.mpub_nowait(p.topic, bodies)
            else:
                fut = writer.pub_nowait(p.topic, make(lo))
            fut.add_done_callback(functools.partial(stamp, t0))
            pending.append((fut, min(size, n - lo)))
        while pending and in_time:
            in_time = settle(*pending.popleft())
        duration = _perf() - start
    return duration, latencies, counts[0], counts[1], in_time


def measure_sync_pub_nowait(p: Params) -> Measurement:
    """One thread, ``pub_nowait()`` with ``p.concurrency`` futures outstanding."""
    duration, latencies, acked, failed, in_time = _windowed(p, batch=False)
    return publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=p.messages,
        in_time=in_time,
        notes=f"pub_nowait() from 1 thread, window {p.concurrency}",
    )


def measure_sync_mpub_nowait(p: Params) -> Measurement:
    """One thread, ``mpub_nowait()`` with ``p.mpub_concurrency`` batches outstanding."""
    duration, latencies, acked, failed, in_time = _windowed(p, batch=True)
    return publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=p.messages,
        in_time=in_time,
        notes=f"mpub_nowait() from 1 thread, {p.mpub_concurrency} batches outstanding",
        concurrency=p.mpub_concurrency,
    )


class _ThreadCollector:
    """FIN + exact accounting shared by handler threads; an Event marks the last FIN."""

    def __init__(self, expected: int, *, latency: bool) -> None:
        self.tracker = SequenceTracker(expected)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.end = 0.0
        self.latency = latency

    def __call__(self, msg: Message) -> None:
        msg.fin()
        now = _now_ns() if self.latency else 0
        with self.lock:
            if self.tracker.record(msg.body, now):
                self.end = _perf()
                self.done.set()

    def result(self, start: float, completed: bool) -> Measurement:
        t = self.tracker
        return {
            "duration_s": (self.end if completed else _perf()) - start,
            "latency_ms": latency_summary(t.latencies_ns),
            "received": t.received,
            "missing": t.missing,
            "duplicates": t.duplicates,
            "fin_errors": t.invalid,
            "timed_out": not completed,
        }


def _reader_errors(reader: SyncReader) -> int:
    stats = reader.stats()
    return stats["response_errors"] + stats["lost_on_disconnect"]


def measure_sync_drain(p: Params, mode: str = "iter") -> Measurement:
    """Drain a preloaded channel with SyncReader: ``iter`` (``for msg in reader``) or ``run``
    (``reader.run(handler, threads=p.threads)``)."""
    collector = _ThreadCollector(p.messages, latency=False)
    p.probe.count = lambda: collector.tracker.unique
    reader = SyncReader(p.topic, p.channel, max_in_flight=p.max_in_flight, **p.reader_addresses())
    start = _perf()
    errors = 0
    try:
        if mode == "iter":
            reader.start()
            tracker = collector.tracker
            deadline = start + p.timeout
            while not collector.done.is_set():
                msg = reader.get(timeout=max(0.0, deadline - _perf()))
                if msg is None:
                    break
                msg.fin()
                if tracker.record(msg.body):
                    collector.end = _perf()
                    collector.done.set()
            notes = "for msg in reader: msg.fin()"
        elif mode == "run":
            stats_errors = [0]

            def stopper() -> None:
                collector.done.wait(p.timeout)
                # run() closes the reader when it returns, and a closed SyncReader refuses stats()
                stats_errors[0] = _reader_errors(reader)
                reader.stop()

            watcher = threading.Thread(target=stopper, name="bench-stopper", daemon=True)
            watcher.start()
            reader.run(collector, threads=p.threads, timeout=p.timeout)
            watcher.join(5)
            notes = f"reader.run(handler, threads={p.threads})"
            errors = stats_errors[0]
        else:
            raise ValueError(f"unknown sync drain mode {mode!r}")
        result = collector.result(start, collector.done.is_set())
        if mode == "iter":
            errors = _reader_errors(reader)
    finally:
        reader.graceful_close()
    result["fin_errors"] += errors
    result["notes"] = notes
    result["latency_ms"] = None
    return result


def measure_sync_e2e(p: Params, publisher: str = "threads") -> Measurement:
    """SyncReader iterating in one thread while ``p.threads`` threads ``pub()``
    (``publisher="nowait"``: one thread, ``pub_nowait()`` with ``p.concurrency`` outstanding)."""
    collector = _ThreadCollector(p.messages, latency=True)
    p.probe.count = lambda: collector.tracker.unique
    reader = SyncReader(p.topic, p.channel, max_in_flight=p.max_in_flight, **p.reader_addresses())
    reader.start()
    tracker = collector.tracker

    def consume() -> None:
        deadline = _perf() + p.timeout
        while not collector.done.is_set():
            msg = reader.get(timeout=max(0.0, deadline - _perf()))
            if msg is None:
                return
            msg.fin()
            if tracker.record(msg.body, _now_ns()):
                collector.end = _perf()
                collector.done.set()

    consumer = threading.Thread(target=consume, name="bench-consumer", daemon=True)
    try:
        with SyncWriter(p.nsqd_tcp, **p.writer_options) as writer:
            consumer.start()
            start = _perf()
            if publisher == "nowait":
                acked, failed = _nowait_publish(writer, p)
            else:
                acked, failed = sync_pub_threads(writer, p)
            published = _perf() - start
        collector.done.wait(max(0.0, p.timeout - published))
        consumer.join(5)
        result = collector.result(start, collector.done.is_set())
        errors = _reader_errors(reader)
    finally:
        reader.graceful_close()
    result["publish_duration_s"] = published
    result["publish_errors"] = failed + (p.messages - acked - failed)
    result["fin_errors"] += errors
    how = (
        f"pub_nowait() window {p.concurrency}"
        if publisher == "nowait"
        else f"pub() from {p.threads} threads"
    )
    result["notes"] = (
        f"{how} ({p.messages / published:,.0f} msg/s); SyncReader iteration; latency publish->FIN"
    )
    return result


def _nowait_publish(writer: SyncWriter, p: Params) -> tuple[int, int]:
    make = body_factory(p.payload_size)
    pending: collections.deque[concurrent.futures.Future[None]] = collections.deque()
    counts = [0, 0]

    def settle(fut: concurrent.futures.Future[None]) -> None:
        try:
            fut.result(timeout=p.timeout)
        except Exception:
            counts[1] += 1
        else:
            counts[0] += 1

    for seq in range(p.messages):
        if len(pending) >= p.concurrency:
            settle(pending.popleft())
        pending.append(writer.pub_nowait(p.topic, make(seq)))
    while pending:
        settle(pending.popleft())
    return counts[0], counts[1]


class _RoundRobinHTTP:
    """``pub`` over several SyncNsqdHTTPClients in turn (what ``sync_pub_threads`` calls)."""

    def __init__(self, clients: list[Any]) -> None:
        self._next = itertools.cycle(clients).__next__

    def pub(self, topic: str, body: bytes) -> None:
        self._next().pub(topic, body)


def measure_sync_http_pub(p: Params, http_addresses: list[str]) -> Measurement:
    """SyncNsqdHTTPClient.pub() from ``p.threads`` threads (one client per nsqd, shared)."""
    from ..http import SyncNsqdHTTPClient

    clients = [SyncNsqdHTTPClient(a, timeout=p.timeout) for a in http_addresses]
    latencies: array[int] = array("q")
    threads = max(1, min(p.threads, p.messages))
    try:
        p.probe.count = latencies.__len__
        start = _perf()
        acked, failed = sync_pub_threads(
            cast(SyncWriter, _RoundRobinHTTP(clients)), p, latencies=latencies
        )
        duration = _perf() - start
    finally:
        for client in clients:
            client.close()
    return publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=p.messages,
        in_time=acked + failed >= p.messages,
        notes=f"SyncNsqdHTTPClient.pub() from {threads} threads",
        concurrency=threads,
    )
