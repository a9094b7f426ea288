"""A test scheduler: real threads, run one line at a time in an order the test chooses.

Each thread runs its function under a line tracer limited to the modules under test; at every
line of theirs it stops and waits for its turn. :func:`run` grants steps following a schedule
(thread indices; when the schedule runs out, round robin), so one interleaving of the code under
test runs exactly as written, and :func:`every_schedule` enumerates them. A thread that does not
come back to a line of its own within ``blocked_after`` seconds is waiting on a lock another
(stopped) thread holds: the scheduler moves on to another, which is just another interleaving
(the code is correct in all of them or wrong in one), so a slow machine changes which orders
are tried, never a verdict on one that ran.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

__all__ = ["every_schedule", "run"]


class _Stepper:
    def __init__(self, index: int, fn: Callable[[], Any], files: set[str]) -> None:
        self.index = index
        self.fn = fn
        self.files = files
        self.go = threading.Semaphore(0)
        self.arrived = threading.Event()
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename not in self.files:
            return None  # not traced inside: lines elsewhere run freely
        if event == "line":
            self.arrived.set()
            self.go.acquire()
        return self._trace

    def _main(self) -> None:
        sys.settrace(self._trace)
        try:
            self.result = self.fn()
        except BaseException as exc:  # (handed to the test)
            self.error = exc
        finally:
            sys.settrace(None)
            self.done = True
            self.arrived.set()


def run(
    fns: Sequence[Callable[[], Any]],
    schedule: Sequence[int],
    modules: Sequence[Any],
    blocked_after: float = 0.05,
    limit: float = 10.0,
) -> list[Any]:
    """Run ``fns`` in threads, one line of ``modules`` at a time, in ``schedule``'s order
    (then round robin); their results (an exception is raised here, the first one)."""
    files = {m.__file__ for m in modules}
    steppers = [_Stepper(i, fn, files) for i, fn in enumerate(fns)]
    for s in steppers:
        s.thread.start()
        if not s.arrived.wait(limit):
            raise AssertionError(f"thread {s.index} never reached the code under test")
    order: Iterator[int] = itertools.chain(schedule, itertools.cycle(range(len(fns))))
    steps = 0
    for i in order:
        live = [s for s in steppers if not s.done]
        if not live:
            break
        steps += 1
        if steps > 100_000:
            raise AssertionError("the threads did not finish (a livelock?)")
        s = steppers[i % len(steppers)]
        if s.done:
            continue
        if not s.arrived.is_set():  # still on its way (blocked on a lock a stopped one holds)
            if not any(t.arrived.is_set() for t in live):  # none can be granted: wait for one
                end = time.monotonic() + limit
                while not any(t.arrived.is_set() for t in live):
                    if time.monotonic() > end:
                        raise AssertionError("no thread gets anywhere (a deadlock?)")
                    time.sleep(0.0005)
            continue  # another can run now: that is this interleaving
        s.arrived.clear()
        s.go.release()
        s.arrived.wait(blocked_after)  # (not arrived: blocked; looked at again when picked)
    for s in steppers:
        s.thread.join(limit)
        if s.thread.is_alive():
            raise AssertionError(f"thread {s.index} did not finish")
    for s in steppers:
        if s.error is not None:
            raise s.error
    return [s.result for s in steppers]


def every_schedule(threads: int, length: int) -> Iterator[tuple[int, ...]]:
    """Every schedule of ``length`` steps over ``threads`` threads (the rest round robin)."""
    return itertools.product(range(threads), repeat=length)
