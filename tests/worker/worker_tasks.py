"""Handlers the worker tests run: ``nsqclient worker worker_tasks:NAME`` started in this folder
(the worker imports the target with the current directory on ``sys.path``).

Each handler writes one line per event to stdout with a single ``os.write`` (atomic on a pipe,
whichever process or thread writes): ``start PID BODY`` as it begins, ``done PID BODY`` as it
returns. A body starting with ``hang`` hangs on its first delivery (until the child is killed
or stopped at once); with ``$WORKER_TEST_GATE`` (a path) every handler waits until that file
exists, so a test holds handlers running for as long as it needs, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

GATE = os.environ.get("WORKER_TEST_GATE")
_metrics: Any = None


def say(event: str, body: bytes, extra: str = "") -> None:
    os.write(1, f"{event} {os.getpid()} {body.decode()}{extra}\n".encode())


def plain(msg: Any) -> None:
    say("start", msg.body)
    if msg.body.startswith(b"hang") and msg.attempts == 1:
        time.sleep(120)
    while GATE and not os.path.exists(GATE):
        time.sleep(0.01)
    say("done", msg.body)


async def coro(msg: Any) -> None:
    say("start", msg.body)
    if msg.body.startswith(b"hang") and msg.attempts == 1:
        await asyncio.sleep(120)
    while GATE and not os.path.exists(GATE):  # noqa: ASYNC110, ASYNC240 - another process opens it
        await asyncio.sleep(0.01)
    say("done", msg.body)


def explode(index: int) -> None:
    """An ``--init`` that fails: the child dies during start-up."""
    raise RuntimeError(f"init of worker {index} fails on purpose")


def otel_init(index: int) -> None:
    """An ``--init`` instrumenting the child with an in-memory metric reader (the pattern the
    docs give: OpenTelemetry set up in each child)."""
    global _metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from nsqclient.observability import instrument

    _metrics = InMemoryMetricReader()
    instrument(meter_provider=MeterProvider(metric_readers=[_metrics]), traces=False)


def otel(msg: Any) -> None:
    """Report the ``nsq.worker.process`` values on this child's metric points so far."""
    seen: set[str] = set()
    points = 0
    data = _metrics.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points += 1
                    seen.add(str(point.attributes.get("nsq.worker.process")))
    say("done", msg.body, f" points={points} process={','.join(sorted(seen))}")
