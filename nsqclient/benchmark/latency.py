"""The ``latency`` scenarios: a low, steady publish rate, and the time from publish to handler.

A Reader with many messages in flight allowed (``max_in_flight`` > 1) never reaches its RDY limit
on a quiet topic, so nsqd holds its deliveries in the connection's output buffer until the
``output_buffer_timeout`` ticker flushes them (250 ms by default): at low rates that, not the
network, is the latency. The scenario publishes one message every ``1/rate`` seconds (absolute
deadlines, no drift) for ``duration`` seconds to one nsqd, with a Reader on the same nsqd; each
body carries its publish time, and the direct handler records ``now - publish``. Variants set the
Reader's buffering: ``latency`` (the Config defaults), ``latency-nsqd`` (nsqd's own 250 ms),
``latency-obt<N>`` (``output_buffer_timeout=N`` ms) and ``latency-unbuffered``
(``output_buffer_size=-1``). nsqd's CPU (utime + stime from ``/proc``, when it runs on this
machine) is measured over the same span and reported per message.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from .accounting import SequenceTracker, body_factory, latency_summary
from .params import Measurement, Params

if TYPE_CHECKING:  # the CLI imports this module for the names; the client only when measuring
    from ..aio import Message

__all__ = [
    "LATENCY_DEFAULT_VARIANTS",
    "is_latency",
    "measure_latency",
    "nsqd_cpu_seconds",
    "nsqd_pid",
    "reader_options",
]

#: the variants a run of every scenario includes
LATENCY_DEFAULT_VARIANTS = ("latency", "latency-nsqd", "latency-obt25", "latency-unbuffered")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def is_latency(name: str) -> bool:
    return name == "latency" or name.startswith("latency-")


def reader_options(name: str) -> dict[str, Any]:
    """The Reader options of a latency variant (``ValueError`` for an unknown name)."""
    variant = name.removeprefix("latency").removeprefix("-")
    if variant == "":
        return {}
    if variant == "nsqd":
        return {"output_buffer_timeout": 0, "output_buffer_size": 0}
    if variant == "unbuffered":
        return {"output_buffer_size": -1}
    if variant.startswith("obt") and variant[3:].isdigit():
        return {"output_buffer_timeout": int(variant[3:])}
    raise ValueError(
        f"unknown latency variant {name!r}: use latency, latency-nsqd, latency-obt<ms> "
        "or latency-unbuffered"
    )


def nsqd_pid(tcp_address: str) -> int | None:
    """The pid of the local nsqd listening on ``tcp_address`` (found by its command line), or
    None when there is none on this machine (or no ``/proc``)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if not args or not os.path.basename(args[0]).startswith("nsqd"):
            continue
        for i, arg in enumerate(args):
            if arg.lstrip("-") == f"tcp-address={tcp_address}" or (
                arg.lstrip("-") == "tcp-address" and args[i + 1 : i + 2] == [tcp_address]
            ):
                return int(entry)
    return None


def nsqd_cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process, in seconds (None when it cannot be read)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of proc(5)


async def measure_latency(p: Params, *, variant: str, rate: float, duration: float) -> Measurement:
    """Publish ``rate`` msgs/s for ``duration`` s; latency publish -> handler, and nsqd's CPU."""
    from ..aio import Reader, Writer

    options = {**p.reader_options, **reader_options(variant)}
    address = p.nsqd_tcp[0]
    count = max(1, round(rate * duration))
    interval = 1.0 / rate
    make = body_factory(p.payload_size)
    tracker = SequenceTracker(count)
    done = asyncio.Event()
    now_ns = time.time_ns

    def handler(msg: Message) -> None:
        msg.fin()
        if tracker.record(msg.body, now_ns()):
            done.set()

    reader = Reader(
        p.topic,
        p.channel,
        nsqd_tcp_addresses=[address],
        max_in_flight=p.max_in_flight,
        **options,
    )
    reader.set_message_handler(handler, direct=True)
    p.probe.count = tracker.latencies_ns.__len__
    pid = nsqd_pid(address)
    loop = asyncio.get_running_loop()
    publish_errors = 0
    completed = False
    await reader.start()
    try:
        async with Writer([address]) as writer:
            cpu0 = nsqd_cpu_seconds(pid)
            start = loop.time()
            for seq in range(count):
                delay = start + seq * interval - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    await writer.pub(p.topic, make(seq))
                except Exception:
                    publish_errors += 1
            try:
                async with asyncio.timeout(max(1.0, p.timeout - (loop.time() - start))):
                    await done.wait()
                completed = True
            except TimeoutError:
                pass
            elapsed = loop.time() - start
            cpu1 = nsqd_cpu_seconds(pid)
    finally:
        await reader.graceful_close()
    summary = latency_summary(tracker.latencies_ns)
    nsqd_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    extra: dict[str, Any] = {
        "variant": variant,
        "reader_options": options,
        "max_in_flight": p.max_in_flight,
        "rate_msg_s": rate,
        "nsqd_cpu_s": nsqd_cpu,
        "nsqd_cpu_us_per_msg": None if nsqd_cpu is None else nsqd_cpu / count * 1e6,
        "latency_ms": summary,
    }
    opts = ", ".join(f"{k}={v}" for k, v in options.items()) or "Config defaults"
    cpu_note = f"; nsqd CPU {nsqd_cpu / count * 1e6:,.0f} µs/msg" if nsqd_cpu is not None else ""
    max_note = f"; max {summary['max']:.2f} ms" if summary else ""
    return {
        "duration_s": elapsed,
        "latency_ms": summary,
        "received": tracker.received,
        "missing": tracker.missing,
        "duplicates": tracker.duplicates,
        "fin_errors": tracker.invalid,
        "publish_errors": publish_errors,
        "timed_out": not completed,
        "extra": extra,
        "notes": (
            f"{rate:g} msg/s for {duration:g} s, max_in_flight={p.max_in_flight}, {opts}; "
            f"latency publish->handler{max_note}{cpu_note}"
        ),
    }
