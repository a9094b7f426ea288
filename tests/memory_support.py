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
import fnmatch
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
# snapshot() matches file names only: every filter is on a file name, for any domain and line
assert all(f.lineno is None and f.domain is None for f in _FILTERS)
_INCLUDE = [i for i, f in enumerate(_FILTERS) if f.inclusive]
_EXCLUDE = [i for i, f in enumerate(_FILTERS) if not f.inclusive]


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
    """The library's live allocations now (after a collection): see :func:`library_only`."""
    gc.collect()
    return library_only(tracemalloc.take_snapshot())


def library_only(raw: tracemalloc.Snapshot) -> tracemalloc.Snapshot:
    """``raw.filter_traces(_FILTERS)``, the same traces, faster.

    ``Snapshot.filter_traces`` matches every frame of every trace against every pattern with
    ``fnmatch``: a third of a second on a quiet machine and over three under load, all of it
    on the thread that samples and holding the GIL, so that the event loop a test measured
    missed two heartbeats and dropped its connections (issue 51). Here each file name is
    matched once, and each distinct stack judged once; tests/test_support.py checks that both
    ways keep the same traces."""
    traces = getattr(raw.traces, "_traces", None)  # the raw tuples (CPython's tracemalloc.py)
    if traces is None:
        return raw.filter_traces(_FILTERS)
    verdicts: dict[str, tuple[bool, ...]] = {}
    judged: dict[tuple[tuple[str, int], ...], bool] = {}

    def verdict(filename: str) -> tuple[bool, ...]:
        found = verdicts.get(filename)
        if found is None:
            found = verdicts[filename] = tuple(
                fnmatch.fnmatch(filename, f.filename_pattern) for f in _FILTERS
            )
        return found

    def kept(frames: tuple[tuple[str, int], ...]) -> bool:
        found = judged.get(frames)
        if found is not None:
            return found
        if not frames:
            found = not _INCLUDE
        else:
            columns = zip(*(verdict(name) for name, _ in frames), strict=True)
            any_frame = [any(column) for column in columns]
            first = verdict(frames[0][0])  # the most recent frame
            hits = [any_frame[i] if f.all_frames else first[i] for i, f in enumerate(_FILTERS)]
            found = (not _INCLUDE or any(hits[i] for i in _INCLUDE)) and not any(
                hits[i] for i in _EXCLUDE
            )
        judged[frames] = found
        return found

    return tracemalloc.Snapshot([t for t in traces if kept(t[2])], raw.traceback_limit)


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
