"""pynsq 0.9.1's driver (tornado IOLoop), run with the pynsq virtualenv's python.

``nsq.Writer.pub(topic, body, callback)`` / ``mpub`` keeping ``--concurrency`` /
``--mpub-concurrency`` outstanding (the next one is sent from the callback of the last), and
``nsq.Reader(..., message_handler=fn, max_in_flight=N)`` whose handler returns True (FIN).
Everything runs on one IOLoop (``IOLoop.run_sync``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from array import array
from typing import Any

try:
    from . import _common as common
except ImportError:  # run as a script
    import _common as common  # type: ignore[import-not-found, no-redef]

perf = time.perf_counter
perf_ns = time.perf_counter_ns


def _lib() -> Any:
    return importlib.import_module("nsq")


def _ioloop() -> Any:
    return importlib.import_module("tornado.ioloop").IOLoop


async def _connected(client: Any, timeout: float = 10.0) -> None:
    deadline = perf() + timeout
    while not client.conns:  # setup only
        if perf() > deadline:
            raise TimeoutError("pynsq did not connect")
        await asyncio.sleep(0.005)


async def _windowed(
    writer: Any, a: argparse.Namespace, *, batch: bool, latencies: array[int] | None
) -> tuple[int, int, bool]:
    """Keep ``window`` commands outstanding; each callback sends the next."""
    nsq = _lib()
    make = common.body_factory(a.payload_size)
    size = a.batch_size if batch else 1
    window = a.mpub_concurrency if batch else a.concurrency
    starts = iter(range(0, a.messages, size))
    counts = [0, 0]
    done = asyncio.get_running_loop().create_future()
    total = a.messages

    def send() -> bool:
        lo = next(starts, None)
        if lo is None:
            return False
        n = min(size, total - lo)
        if batch:
            bodies = [make(s) for s in range(lo, lo + n)]
            t0 = perf_ns()
            writer.mpub(a.topic, bodies, callback=lambda conn, data: finish(data, t0, n))
        else:
            t0 = perf_ns()
            writer.pub(a.topic, make(lo), callback=lambda conn, data: finish(data, t0, n))
        return True

    def finish(data: Any, t0: int, n: int) -> None:
        if isinstance(data, nsq.Error | Exception):
            counts[1] += n
        else:
            counts[0] += n
            if latencies is not None:
                latencies.append(perf_ns() - t0)
        if counts[0] + counts[1] >= total:
            if not done.done():
                done.set_result(None)
            return
        send()

    for _ in range(window):
        if not send():
            break
    try:
        await asyncio.wait_for(asyncio.shield(done), a.timeout)
    except TimeoutError:
        return counts[0], counts[1], False
    return counts[0], counts[1], True


def _close(client: Any) -> None:
    for conn in list(client.conns.values()):
        conn.close()


def _publish_scenario(batch: bool) -> common.ScenarioFn:
    def run(a: argparse.Namespace) -> dict[str, Any]:
        async def main() -> dict[str, Any]:
            writer = _lib().Writer([a.nsqd_tcp])
            await _connected(writer)
            latencies: array[int] = array("q")
            start = perf()
            acked, failed, ok = await _windowed(writer, a, batch=batch, latencies=latencies)
            duration = perf() - start
            _close(writer)
            more = {"concurrency": a.mpub_concurrency} if batch else {}
            return common.publish_result(
                duration_s=duration,
                latencies_ns=latencies,
                acked=acked,
                failed=failed,
                expected=a.messages,
                in_time=ok,
                **more,
                notes=(
                    f"writer.mpub(callback=) window {a.mpub_concurrency}; latency per batch"
                    if batch
                    else f"writer.pub(callback=) window {a.concurrency}"
                ),
            )

        result: dict[str, Any] = _ioloop().current().run_sync(main)
        return result

    return run


def _consume_scenario(publish: bool) -> common.ScenarioFn:
    def run(a: argparse.Namespace) -> dict[str, Any]:
        async def main() -> dict[str, Any]:
            nsq = _lib()
            done = asyncio.Event()
            collector = common.Collector(a.messages, latency=publish, on_done=done.set)

            def handler(message: Any) -> bool:
                collector.record(message.body)
                return True  # pynsq FINs

            start = perf()
            reader = nsq.Reader(
                topic=a.topic,
                channel=a.channel,
                message_handler=handler,
                nsqd_tcp_addresses=[a.nsqd_tcp],
                max_in_flight=a.max_in_flight,
                output_buffer_timeout=25,  # pynsq sends 250 by default; same flush as nsqd's flag
            )
            published = 0.0
            acked, failed, ok = a.messages, 0, True
            if publish:
                await _connected(reader)
                writer = nsq.Writer([a.nsqd_tcp])
                await _connected(writer)
                start = perf()
                acked, failed, ok = await _windowed(writer, a, batch=False, latencies=None)
                published = perf() - start
            try:
                await asyncio.wait_for(done.wait(), max(0.0, a.timeout - published))
                completed = True
            except TimeoutError:
                completed = False
            result = collector.result(start, completed=completed)
            await asyncio.sleep(0.05)  # let the last FINs leave before closing
            reader.close()
            if publish:
                _close(writer)
                result.update(
                    publish_duration_s=published,
                    publish_errors=failed + (a.messages - acked - failed),
                    timed_out=result["timed_out"] or not ok,
                )
            result["notes"] = f"nsq.Reader(max_in_flight={a.max_in_flight}), handler returns True"
            return result

        result: dict[str, Any] = _ioloop().current().run_sync(main)
        return result

    return run


def main() -> int:
    nsq = _lib()
    return common.driver_main(
        client="pynsq",
        version=getattr(nsq, "__version__", "?"),
        scenarios={
            "pub": _publish_scenario(False),
            "mpub": _publish_scenario(True),
            "e2e": _consume_scenario(True),
            "drain": _consume_scenario(False),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
