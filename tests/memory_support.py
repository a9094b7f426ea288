"""Live memory of the library itself, for the memory-bound tests (tests/*/test_memory_bounds.py).

:func:`library_bytes` is what tracemalloc traces with a frame of ``nsqclient`` (and not of
``nsqclient/testing``: the fault proxy and the embedded nsqd run in this process too) anywhere
on the allocating stack, after ``gc.collect()``: the library's live objects, the asyncio
transports' buffers it writes to included, the test's own allocations (its bodies, its tasks)
excluded. The tests compare it before, during and after a fault with the bounds stated in
docs/configuration.md, "Memory while nsqd is away".
"""

from __future__ import annotations

import contextlib
import gc
import logging
import tracemalloc
from collections.abc import Iterator

#: frames kept per allocation: deep enough to reach the library's frame under asyncio's
FRAMES = 8
_FILTERS = [
    tracemalloc.Filter(True, "*/nsqclient/*", all_frames=True),
    tracemalloc.Filter(False, "*/nsqclient/testing/*", all_frames=True),
    tracemalloc.Filter(False, tracemalloc.__file__, all_frames=True),
    tracemalloc.Filter(False, "*/tests/*"),  # allocated by a test itself (its handler, say)
]
KiB = 1024


@contextlib.contextmanager
def traced() -> Iterator[None]:
    """tracemalloc on for the block (off after, unless it was on before)."""
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start(FRAMES)
    try:
        yield
    finally:
        if not was:
            tracemalloc.stop()


def snapshot() -> tracemalloc.Snapshot:
    gc.collect()
    return tracemalloc.take_snapshot().filter_traces(_FILTERS)


def library_bytes(snap: tracemalloc.Snapshot | None = None) -> int:
    """Bytes the library holds now (live, after a collection)."""
    snap = snapshot() if snap is None else snap
    return sum(stat.size for stat in snap.statistics("filename"))


def top_diff(after: tracemalloc.Snapshot, before: tracemalloc.Snapshot, n: int = 8) -> str:
    """The biggest differences by line (for a failing assertion's message)."""
    stats = after.compare_to(before, "lineno")[:n]
    return "\n".join(str(stat) for stat in stats)


@contextlib.contextmanager
def unrecorded_logs() -> Iterator[None]:
    """The library's log records go nowhere for the block: pytest's log capture keeps every
    record until the test ends, and with it the exceptions a record names (a failed connect's
    traceback keeps its connection alive): the harness's memory, not the library's."""
    logger = logging.getLogger("nsqclient")
    propagate, handler = logger.propagate, logging.NullHandler()
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
