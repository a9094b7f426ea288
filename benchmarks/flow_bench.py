"""Micro-benchmark of the RDY controller's per-message path: ``python benchmarks/flow_bench.py``.

Times 1,000,000
``message_result(Outcome.SUCCESS, now)`` calls outside backoff, and ``messages_received`` for
comparison, and prints ns/call (best of 5 runs).
"""

from __future__ import annotations

import random
import time

from nsqclient.flow import ExponentialBackoff, Outcome, RdyController

N = 1_000_000


def controller() -> RdyController:
    ctl = RdyController(
        100,
        backoff=ExponentialBackoff(1.0),
        max_backoff_duration=120.0,
        low_rdy_idle_timeout=10.0,
        low_rdy_timeout=30.0,
        redistribute_interval=5.0,
        rng=random.Random(0),
    )
    for i in range(4):
        ctl.add_connection(i, 2500, 0.0)
    return ctl


def bench_result(ctl: RdyController) -> float:
    result, success, now = ctl.message_result, Outcome.SUCCESS, 1.0
    t0 = time.perf_counter_ns()
    for _ in range(N):
        result(success, now)
    return (time.perf_counter_ns() - t0) / N


def bench_loop_overhead() -> float:
    def f(a: object, b: float) -> None:
        return None

    success, now = Outcome.SUCCESS, 1.0
    t0 = time.perf_counter_ns()
    for _ in range(N):
        f(success, now)
    return (time.perf_counter_ns() - t0) / N


def bench_received(ctl: RdyController) -> float:
    received, now = ctl.messages_received, 1.0
    t0 = time.perf_counter_ns()
    for _ in range(N):
        received(2, 10, now)
    return (time.perf_counter_ns() - t0) / N


def main() -> None:
    ctl = controller()
    assert not ctl.in_backoff and ctl.message_result(Outcome.SUCCESS, 1.0) == ()
    res = min(bench_result(ctl) for _ in range(5))
    empty = min(bench_loop_overhead() for _ in range(5))
    rec = min(bench_received(ctl) for _ in range(5))
    print(f"message_result(SUCCESS), outside backoff: {res:6.1f} ns/call")
    print(f"  (an empty 2-argument Python function:    {empty:6.1f} ns/call)")
    print(f"messages_received (per batch):            {rec:6.1f} ns/call")


if __name__ == "__main__":
    main()
