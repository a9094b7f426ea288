"""gnsq 1.0.2's driver (gevent), run with the gnsq virtualenv's python.

``Producer.publish()`` / ``multipublish()`` (blocking per greenlet) from ``--concurrency`` /
``--mpub-concurrency`` greenlets on one connection; consumers are a ``Consumer`` with
``max_in_flight`` and a handler connected to ``on_message`` (gnsq FINs when it returns).
"""

from __future__ import annotations

import argparse
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
    return importlib.import_module("gnsq")


def _gevent() -> Any:
    return importlib.import_module("gevent")


def _producer(a: argparse.Namespace) -> Any:
    producer = _lib().Producer([a.nsqd_tcp])
    producer.start()
    return producer


def _publish(
    producer: Any, a: argparse.Namespace, latencies: array[int] | None
) -> tuple[int, int, bool]:
    gevent = _gevent()
    make = common.body_factory(a.payload_size)
    seqs = iter(range(a.messages))
    counts = [0, 0]

    def worker() -> None:
        for seq in seqs:
            t0 = perf_ns()
            try:
                producer.publish(a.topic, make(seq))
            except Exception:
                counts[1] += 1
            else:
                counts[0] += 1
                if latencies is not None:
                    latencies.append(perf_ns() - t0)

    greenlets = [gevent.spawn(worker) for _ in range(max(1, min(a.concurrency, a.messages)))]
    done = gevent.joinall(greenlets, timeout=a.timeout)
    ok = len(done) == len(greenlets)
    gevent.killall(greenlets, block=False)
    return counts[0], counts[1], ok


def pub(a: argparse.Namespace) -> dict[str, Any]:
    producer = _producer(a)
    latencies: array[int] = array("q")
    start = perf()
    acked, failed, ok = _publish(producer, a, latencies)
    duration = perf() - start
    producer.close()
    return common.publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=acked,
        failed=failed,
        expected=a.messages,
        in_time=ok,
        notes=f"producer.publish() from {a.concurrency} greenlets",
    )


def mpub(a: argparse.Namespace) -> dict[str, Any]:
    gevent = _gevent()
    producer = _producer(a)
    make = common.body_factory(a.payload_size)
    starts = iter(range(0, a.messages, a.batch_size))
    latencies: array[int] = array("q")
    counts = [0, 0]

    def worker() -> None:
        for lo in starts:
            bodies = [make(s) for s in range(lo, min(lo + a.batch_size, a.messages))]
            t0 = perf_ns()
            try:
                producer.multipublish(a.topic, bodies)
            except Exception:
                counts[1] += len(bodies)
            else:
                counts[0] += len(bodies)
                latencies.append(perf_ns() - t0)

    start = perf()
    greenlets = [gevent.spawn(worker) for _ in range(a.mpub_concurrency)]
    done = gevent.joinall(greenlets, timeout=a.timeout)
    duration = perf() - start
    producer.close()
    return common.publish_result(
        duration_s=duration,
        latencies_ns=latencies,
        acked=counts[0],
        failed=counts[1],
        expected=a.messages,
        in_time=len(done) == len(greenlets),
        concurrency=a.mpub_concurrency,
        notes=f"producer.multipublish() from {a.mpub_concurrency} greenlets; latency per batch",
    )


def _consumer(a: argparse.Namespace, collector: common.Collector) -> Any:
    def handler(_consumer: Any, message: Any) -> None:
        collector.record(message.body)

    consumer = _lib().Consumer(
        a.topic,
        a.channel,
        nsqd_tcp_addresses=[a.nsqd_tcp],
        max_in_flight=a.max_in_flight,
        message_handler=handler,
        output_buffer_timeout=25,  # gnsq sends 250 by default; same flush as nsqd's flag
    )
    consumer.start(block=False)
    return consumer


def e2e(a: argparse.Namespace) -> dict[str, Any]:
    event = importlib.import_module("gevent.event").Event()
    collector = common.Collector(a.messages, latency=True, on_done=event.set)
    consumer = _consumer(a, collector)
    producer = _producer(a)
    start = perf()
    acked, failed, ok = _publish(producer, a, None)
    published = perf() - start
    completed = bool(event.wait(max(0.0, a.timeout - published)))
    result = collector.result(start, completed=completed)
    consumer.close()
    producer.close()
    result.update(
        publish_duration_s=published,
        publish_errors=failed + (a.messages - acked - failed),
        timed_out=result["timed_out"] or not ok,
        notes="Consumer on_message handler (auto FIN); publish from greenlets",
    )
    return result


def drain(a: argparse.Namespace) -> dict[str, Any]:
    event = importlib.import_module("gevent.event").Event()
    collector = common.Collector(a.messages, latency=False, on_done=event.set)
    start = perf()
    consumer = _consumer(a, collector)
    completed = bool(event.wait(a.timeout))
    result = collector.result(start, completed=completed)
    consumer.close()
    _gevent().sleep(0.05)  # let the FINs written before close leave the socket
    result["notes"] = f"Consumer(max_in_flight={a.max_in_flight}) on_message handler (auto FIN)"
    return result


def main() -> int:
    return common.driver_main(
        client="gnsq",
        version=getattr(_lib(), "__version__", "?"),
        scenarios={"pub": pub, "mpub": mpub, "e2e": e2e, "drain": drain},
    )


if __name__ == "__main__":
    sys.exit(main())
