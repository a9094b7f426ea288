"""The benchmark's exact accounting: message bodies, loss/duplicate counting, percentiles and
resource usage. Standard library only: the arithmetic, with nothing of the client it judges.

Bodies: an 8-byte big-endian sequence id, an 8-byte big-endian publish time (``time.time_ns()``,
comparable across processes on one machine), then padding up to the payload size.
"""

from __future__ import annotations

import math
import resource
import struct
import sys
import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "SequenceTracker",
    "body_factory",
    "cpu_seconds",
    "latency_summary",
    "peak_rss_kib",
    "percentile",
    "publish_result",
    "steady_mark",
    "steady_rate",
]

HEADER = struct.Struct(">QQ")
HEADER_SIZE = HEADER.size


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
    """The fields of a publishing scenario's result (ours and the compare drivers');
    unacknowledged messages count as publish errors."""
    return {
        "duration_s": duration_s,
        "latency_ms": latency_summary(latencies_ns),
        "received": acked,
        "publish_errors": failed + max(0, expected - acked - failed),
        "timed_out": not in_time,
        "notes": notes,
        **more,
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
