"""``nsqclient bench``: every scenario against a cluster that is already up.

For each scenario: a unique topic, setup (channels, preloading) outside the clock, the
measurement, then independent checks (the published sequence ids drained back exactly; nsqd's
own counters), then the topic is deleted. The exit status is 1 when any row has errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..sync.portal import LOOP_ENV, loop_factory
from .accounting import peak_rss_kib
from .latency import LATENCY_DEFAULT_VARIANTS, is_latency, nsqd_cpu_seconds, nsqd_pid
from .nsqd_admin import NsqdAdmin
from .params import HTTP_CONCURRENCY, Measurement, Params
from .profiles import Profile
from .progress import Progress
from .results import (
    ScenarioResult,
    result_from_measurement,
)

__all__ = [
    "ExtraScenario",
    "Settings",
    "kind_of",
    "run_benchmark",
    "run_scenario",
    "scenario_names",
]


# scenario -> kind: which setup and checks it needs
_BASE_SCENARIOS: dict[str, str] = {
    "tcp-pub": "publish",
    "tcp-mpub": "publish",
    "e2e": "e2e",
    "graceful-requeue": "requeue",
    "drain-direct": "drain",
    "drain-iter": "drain",
    "drain-queue": "drain",
    "drain-queue-async": "drain",
    "sync-pub": "publish",
    "sync-pub-nowait": "publish",
    "sync-mpub-nowait": "publish",
    "sync-e2e": "e2e",
    "sync-drain-iter": "drain",
    "sync-drain-run": "drain",
    "http-pub": "publish",
    "http-mpub": "publish",
    "sync-http-pub": "publish",
    "http-fallback": "publish",
}


@dataclasses.dataclass(frozen=True)
class ExtraScenario:
    """A scenario the caller adds (the repository's ``python -m benchmarks.run`` adds the
    multi-process ones): its kind, which decides setup and checks, and its measurement, run on a
    fresh event loop like the others."""

    kind: str
    measure: Callable[[Params], Coroutine[Any, Any, Measurement]]


@dataclasses.dataclass
class Settings:
    profile: Profile
    nsqd_tcp: list[str]
    nsqd_http: list[str]
    lookupd_http: list[str]
    scenarios: list[str]
    fanout_channels: list[int]
    extra: dict[str, ExtraScenario] = dataclasses.field(default_factory=dict)
    use_lookupd: bool = False
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:8])
    keep_topics: bool = False
    otel: str = "off"  # --otel: OpenTelemetry instrumentation during the run
    latency_rate: float = 100.0  # msgs/s of the latency scenarios
    latency_duration: float = 10.0  # seconds of publishing in each
    reader_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # every Reader's
    writer_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # every Writer's
    #: the event loop of every scenario (``--loop``): "asyncio" or "uvloop"
    loop: str = "asyncio"

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.as_dict(),
            "nsqd_tcp": self.nsqd_tcp,
            "nsqd_http": self.nsqd_http,
            "lookupd_http": self.lookupd_http,
            "scenarios": self.scenarios,
            "fanout_channels": self.fanout_channels,
            "extra_scenarios": sorted(self.extra),
            "readers_via_lookupd": self.use_lookupd,
            "run_id": self.run_id,
            "otel": self.otel,
            "latency_rate": self.latency_rate,
            "latency_duration": self.latency_duration,
            "reader_options": self.reader_options,
            "writer_options": self.writer_options,
            "loop": self.loop,
        }


def scenario_names(fanout_channels: Sequence[int], extra: Iterable[str] = ()) -> list[str]:
    """Every scenario this configuration runs, in order (``extra``: the caller's, last)."""
    names = list(_BASE_SCENARIOS)
    names += LATENCY_DEFAULT_VARIANTS
    names += [f"fanout-{n}" for n in fanout_channels]
    names += extra
    return names


def kind_of(name: str, extra: Mapping[str, ExtraScenario] | None = None) -> str:
    if extra and name in extra:
        return extra[name].kind
    if is_latency(name):
        return "latency"
    if name.startswith("fanout-"):
        return "fanout"
    return _BASE_SCENARIOS[name]


# --------------------------------------------------------------------------- one scenario


def _params(s: Settings, topic: str, messages: int, channel: str = "bench") -> Params:
    prof = s.profile
    return Params(
        nsqd_tcp=s.nsqd_tcp,
        topic=topic,
        channel=channel,
        messages=messages,
        payload_size=prof.payload_size,
        concurrency=prof.concurrency,
        batch_size=prof.batch_size,
        mpub_concurrency=prof.mpub_concurrency,
        max_in_flight=prof.max_in_flight,
        threads=prof.threads,
        timeout=prof.timeout,
        lookupd_http=s.lookupd_http if s.use_lookupd else [],
        reader_options=dict(s.reader_options),
        writer_options=dict(s.writer_options),
    )


def _messages_for(name: str, s: Settings) -> int:
    prof = s.profile
    if is_latency(name):
        return max(1, round(s.latency_rate * s.latency_duration))
    if name.startswith(("http-", "sync-http-")):
        return prof.http_messages
    if name.startswith("fanout-"):
        return prof.fanout_messages
    if name == "graceful-requeue":
        return prof.requeue_messages
    return prof.messages


def _measure(name: str, p: Params, s: Settings) -> Measurement:
    """Dispatch to the measurement; aio ones get a fresh event loop each (of ``s.loop``)."""
    from . import scenarios, sync_scenarios

    def aio(coro: Coroutine[Any, Any, Measurement]) -> Measurement:
        with asyncio.Runner(loop_factory=loop_factory(s.loop)) as runner:
            return runner.run(coro)

    table: dict[str, Callable[[], Measurement]] = {
        "tcp-pub": lambda: aio(scenarios.measure_pub(p)),
        "tcp-mpub": lambda: aio(scenarios.measure_mpub(p)),
        "e2e": lambda: aio(scenarios.measure_e2e(p)),
        "graceful-requeue": lambda: aio(
            scenarios.measure_requeue(p, hold=max(1, min(p.messages, p.max_in_flight // 2)))
        ),
        "drain-direct": lambda: aio(scenarios.measure_drain(p, "direct")),
        "drain-iter": lambda: aio(scenarios.measure_drain(p, "iter")),
        "drain-queue": lambda: aio(scenarios.measure_drain(p, "queue")),
        "drain-queue-async": lambda: aio(scenarios.measure_drain(p, "queue-async")),
        "sync-pub": lambda: sync_scenarios.measure_sync_pub_threads(p),
        "sync-pub-nowait": lambda: sync_scenarios.measure_sync_pub_nowait(p),
        "sync-mpub-nowait": lambda: sync_scenarios.measure_sync_mpub_nowait(p),
        "sync-e2e": lambda: sync_scenarios.measure_sync_e2e(p),
        "sync-drain-iter": lambda: sync_scenarios.measure_sync_drain(p, "iter"),
        "sync-drain-run": lambda: sync_scenarios.measure_sync_drain(p, "run"),
        "http-pub": lambda: aio(scenarios.measure_http_pub(p, s.nsqd_http)),
        "http-mpub": lambda: aio(scenarios.measure_http_mpub(p, s.nsqd_http)),
        "sync-http-pub": lambda: sync_scenarios.measure_sync_http_pub(p, s.nsqd_http),
        "http-fallback": lambda: aio(scenarios.measure_http_fallback(p, s.nsqd_http)),
    }
    if name in s.extra:
        return aio(s.extra[name].measure(p))
    if name.startswith("fanout-"):
        count = int(name.split("-", 1)[1])
        channels = [f"fan{i:03d}" for i in range(count)]
        return aio(scenarios.measure_fanout(p, channels))
    if is_latency(name):
        from .latency import measure_latency

        return aio(
            measure_latency(p, variant=name, rate=s.latency_rate, duration=s.latency_duration)
        )
    return table[name]()


def _batch_and_concurrency(name: str, p: Params) -> tuple[int | None, int | None]:
    if name in ("tcp-mpub", "http-mpub", "sync-mpub-nowait") or name.startswith("fanout-"):
        return p.batch_size, p.mpub_concurrency
    if name in ("sync-pub", "sync-e2e", "sync-drain-run", "sync-http-pub"):
        return None, p.threads
    if name in ("http-pub", "http-fallback"):
        return None, min(p.concurrency, HTTP_CONCURRENCY)
    if name.startswith("drain") or name in ("sync-drain-iter", "graceful-requeue"):
        return None, p.max_in_flight
    if is_latency(name):
        return None, p.max_in_flight
    if name == "drain-queue-async":
        return None, p.concurrency
    return None, p.concurrency


def run_scenario(
    name: str, s: Settings, admin: NsqdAdmin, progress: Progress, index: int, count: int
) -> ScenarioResult:
    kind = kind_of(name, s.extra)
    topic = f"nsqbench-{s.run_id}-{name}"[:64]
    messages = _messages_for(name, s)
    channel = "verify" if kind == "publish" else "bench"
    p = _params(s, topic, messages, channel)
    batch, concurrency = _batch_and_concurrency(name, p)
    if name == "drain-queue-async":
        concurrency = p.concurrency
    server_errors = 0
    problems: list[str] = []
    try:
        if kind in ("drain", "requeue"):
            admin.preload(s.nsqd_tcp, topic, channel, p)
        elif kind == "fanout":
            fan = int(name.split("-", 1)[1])
            admin.create(topic, [f"fan{i:03d}" for i in range(fan)])
        else:
            admin.create(topic, [channel])
        progress.start(index, count, name, messages, p.probe)
        pids = [nsqd_pid(address) for address in s.nsqd_tcp]
        nsqd_cpu0 = _nsqd_cpu(pids)
        cpu0 = time.process_time()
        measurement = _measure(name, p, s)
        cpu = time.process_time() - cpu0
        nsqd_cpu1 = _nsqd_cpu(pids)
        extra_notes: list[str] = []
        if kind != "latency" and nsqd_cpu0 is not None and nsqd_cpu1 is not None:
            # every local nsqd of the cluster, during the measurement (checks excluded)
            per_msg = (nsqd_cpu1 - nsqd_cpu0) / max(1, messages) * 1e6
            measurement["extra"] = {**measurement.get("extra", {}), "nsqd_cpu_us_per_msg": per_msg}
            extra_notes.append(f"nsqd CPU {per_msg:,.1f} µs/msg")
        if kind == "publish":
            # drain what was published and check every sequence id (untimed)
            acked_failed = int(measurement.get("publish_errors", 0))
            short = admin.channel_counts(topic, channel)["depth"] < messages - acked_failed
            verify_timeout = 2.0 if short else max(30.0, p.timeout)
            verify = asyncio.run(_verify_drain(p.replace(timeout=verify_timeout)))
            measurement["missing"] = max(0, int(verify["missing"]) - acked_failed)
            measurement["duplicates"] = int(verify["duplicates"])
            measurement["fin_errors"] = int(measurement.get("fin_errors", 0)) + int(
                verify["fin_errors"]
            )
            if verify["timed_out"] and not measurement["missing"]:
                measurement["missing"] = int(verify["missing"])
            problems = admin.check_consumed(
                topic, channel, messages=messages - acked_failed, requeues=0
            )
        elif kind == "fanout":
            fan = int(name.split("-", 1)[1])
            for i in range(fan):
                problems += [
                    f"fan{i:03d}: {x}"
                    for x in admin.check_consumed(topic, f"fan{i:03d}", messages=messages)
                ]
        elif kind == "requeue":
            extra = measurement.get("extra", {})
            problems = admin.check_consumed(
                topic, channel, messages=messages, requeues=int(extra["first_reader_requeued"])
            )
            if int(extra["first_reader_requeued"]) < int(extra["held"]):
                problems.append(
                    f"only {extra['first_reader_requeued']} of {extra['held']} held messages "
                    "were requeued"
                )
        else:
            problems = admin.check_consumed(topic, channel, messages=messages)
        server_errors = len(problems)
        if problems:
            extra_notes.append("nsqd: " + "; ".join(problems[:5]))
        notes = "; ".join([str(measurement.get("notes", "")), *extra_notes]).strip("; ")
        result = result_from_measurement(
            name,
            measurement,
            messages=messages,
            payload_size=p.payload_size,
            batch_size=batch,
            concurrency=concurrency,
            cpu_s=cpu,
            peak_rss_kib=peak_rss_kib(),
            server_errors=server_errors,
            notes=notes,
        )
    except Exception as exc:  # one broken scenario must not hide the others
        result = ScenarioResult(
            scenario=name,
            messages=messages,
            payload_size=p.payload_size,
            batch_size=batch,
            concurrency=concurrency,
            duration_s=0.0,
            msg_per_s=0.0,
            mib_per_s=0.0,
            p50_ms=None,
            p95_ms=None,
            p99_ms=None,
            failure=f"{type(exc).__name__}: {exc}",
        )
    finally:
        if not s.keep_topics:
            admin.delete_topic(topic)
    summary = (
        f"{result.msg_per_s:,.0f} msg/s in {result.duration_s:.2f} s, errors {result.errors}"
        + (f" ({result.error_breakdown()})" if result.errors else "")
    )
    progress.finish(summary)
    return result


def _nsqd_cpu(pids: list[int | None]) -> float | None:
    """CPU seconds of the cluster's nsqd processes, if all of them run on this machine."""
    total = 0.0
    for pid in pids:
        seconds = nsqd_cpu_seconds(pid)
        if seconds is None:
            return None
        total += seconds
    return total


async def _verify_drain(p: Params) -> Measurement:
    from .scenarios import measure_drain

    return await measure_drain(p, "direct")


def run_benchmark(s: Settings, progress: Progress | None = None) -> list[ScenarioResult]:
    progress = progress or Progress(enabled=False)
    results: list[ScenarioResult] = []
    with _loop_env(s.loop), NsqdAdmin(s.nsqd_http) as admin:
        admin.ping()
        for i, name in enumerate(s.scenarios, 1):
            results.append(run_scenario(name, s, admin, progress, i, len(s.scenarios)))
    return results


@contextlib.contextmanager
def _loop_env(loop: str) -> Iterator[None]:
    """The sync scenarios' loop thread reads ``$NSQCLIENT_LOOP`` when it starts: set it to
    ``loop`` for the run (and for consumer processes started meanwhile), then restore it."""
    loop_factory(loop)  # an unknown name or a missing uvloop fails before any scenario
    before = os.environ.get(LOOP_ENV)
    os.environ[LOOP_ENV] = loop
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LOOP_ENV, None)
        else:
            os.environ[LOOP_ENV] = before
