"""The fleet benchmark's message body and the per-nsqd record every client keeps.

A body is ``seq`` (8 bytes), the index of the nsqd it was published to (4) and the publish time
(8, Unix ns), big-endian, padded to the payload size. The source index lets any client attribute
a delivery to its nsqd without asking its library which connection it came on; ``seq`` makes
loss and duplicates exact. The Go program (``benchmarks/compare/gobench/fleet.go``) reads the
same layout.
"""

from __future__ import annotations

import struct
import time
from typing import Any

__all__ = ["HEADER", "Recorder", "make_bodies", "make_body"]

HEADER = struct.Struct(">QIq")


def make_body(seq: int, source: int, pad: bytes) -> bytes:
    return HEADER.pack(seq, source, time.time_ns()) + pad


def make_bodies(first_seq: int, count: int, source: int, payload_size: int) -> list[bytes]:
    """``count`` bodies with consecutive ``seq`` from ``first_seq``, all from nsqd ``source``."""
    pad = b"x" * max(0, payload_size - HEADER.size)
    return [make_body(first_seq + i, source, pad) for i in range(count)]


class Recorder:
    """What one consumer saw, per nsqd and per time bucket (seconds since ``t0``).

    ``record()`` runs once per delivery (cheap: one unpack, a few list updates); ``finish()``
    once per unique message after its handler ran.
    """

    def __init__(self, expected: int, nsqd_count: int, bucket_s: float, t0: float) -> None:
        self.expected = expected
        self.nsqd_count = nsqd_count
        self.bucket_s = bucket_s
        self.t0 = t0
        self.seen = bytearray(expected)
        self.received = self.unique = self.duplicates = self.bad = self.finished = 0
        self.first: list[float | None] = [None] * nsqd_count
        self.last: list[float | None] = [None] * nsqd_count
        self.per_nsqd = [0] * nsqd_count
        self.timeline: list[list[int]] = []
        self.done_s: float | None = None

    def record(self, body: bytes, now: float) -> bool:
        """Count one delivery at ``now`` (perf_counter); True when it is the first of its seq."""
        self.received += 1
        try:
            seq, source, _ = HEADER.unpack_from(body)
        except struct.error:
            self.bad += 1
            return False
        if seq >= self.expected or source >= self.nsqd_count:
            self.bad += 1
            return False
        if self.seen[seq]:
            self.duplicates += 1
            return False
        self.seen[seq] = 1
        self.unique += 1
        t = now - self.t0
        if self.first[source] is None:
            self.first[source] = t
        self.last[source] = t
        self.per_nsqd[source] += 1
        b = int(t / self.bucket_s)
        timeline = self.timeline
        while len(timeline) <= b:
            timeline.append([0] * self.nsqd_count)
        timeline[b][source] += 1
        return True

    def finish(self, now: float) -> bool:
        """One unique message handled; True once every expected message is."""
        self.finished += 1
        if self.finished >= self.expected and self.done_s is None:
            self.done_s = now - self.t0
            return True
        return False

    def as_dict(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "received": self.received,
            "unique": self.unique,
            "duplicates": self.duplicates,
            "bad": self.bad,
            "finished": self.finished,
            "done_s": self.done_s,
            "first_s": self.first,
            "last_s": self.last,
            "per_nsqd": self.per_nsqd,
            "bucket_s": self.bucket_s,
            "timeline": self.timeline,
        }
