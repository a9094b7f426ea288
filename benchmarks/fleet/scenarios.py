"""The fleet scenarios: setup, one run per client, the independent checks, the headline figures.

Every scenario uses its own topic on the first ``nsqd`` nsqd of the fleet (the others are not
producers of it, so lookupd does not list them) and one channel; the consumer discovers them
through nsqlookupd. Times are seconds since the consumer started (``Reader.start()`` /
``ConnectToNSQLookupd``), from its own clock; publishing times are converted with the Unix
time it reports.

* ``spread``: ``nsqd`` nsqd preloaded with ``messages`` each, then the same total on one nsqd
  (a separate nsqd of the same run): msg/s from start to the last handled message, client CPU
  per message, nsqd CPU per message (real processes).
* ``low-mif``: ``nsqd`` > ``max_in_flight``, each preloaded with ``messages``: time until all are
  handled, and each nsqd's first delivery (the last one's is the headline).
* ``skewed``: one busy nsqd (``messages`` preloaded) among ``nsqd`` empty ones, handlers taking
  ``handler_ms``: msg/s (first delivery to the last handled, or to ``max_duration``) as a
  fraction of ``max_in_flight / handler time``.
* ``hot-spot``: ``phases`` phases of ``phase_s`` seconds, each publishing ``rate`` msg/s to one
  nsqd (a different one each phase), then at most ``settle_s`` to finish: per phase, how long
  until the hot nsqd's deliveries reach 80% of the publish rate (over half a second).
* ``fairness``: every nsqd receives ``rate`` msg/s for ``window_s`` seconds, more nsqd than
  ``max_in_flight`` and handlers slower than the offered load: each nsqd's share of what was
  handled in the window, relative to the mean.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .cluster import Fleet, paced_publish
from .harness import ClientRun, ClientSpec

__all__ = ["DEFAULTS", "SCENARIOS", "Settings", "run_scenario"]

SCENARIOS = ("spread", "low-mif", "skewed", "hot-spot", "fairness")
CHANNEL = "fleet"
FOLLOW_FRACTION = 0.8
FOLLOW_WINDOW_S = 0.5


@dataclasses.dataclass
class Settings:
    scenario: str
    nsqd: int
    messages: int = 0
    max_in_flight: int = 1
    handler_ms: float = 0.0
    rate: float = 0.0
    phase_s: float = 3.0
    phases: int = 4
    window_s: float = 30.0
    settle_s: float = 10.0
    max_duration: float = 120.0
    payload_size: int = 512
    bucket_ms: float = 100.0

    @property
    def capacity(self) -> float | None:
        """Handled msg/s at most: ``max_in_flight / handler time`` (None for instant handlers)."""
        return self.max_in_flight * 1000.0 / self.handler_ms if self.handler_ms > 0 else None


#: the issue's sizes (issue 21); every field can be overridden on the command line
DEFAULTS: dict[str, dict[str, Any]] = {
    "spread": {"nsqd": 64, "messages": 3000, "max_in_flight": 2500},
    "low-mif": {"nsqd": 64, "messages": 20, "max_in_flight": 16, "max_duration": 180.0},
    "skewed": {
        "nsqd": 32,
        "messages": 5000,
        "max_in_flight": 64,
        "handler_ms": 20.0,
        "max_duration": 20.0,
    },
    "hot-spot": {
        "nsqd": 32,
        "max_in_flight": 64,
        "handler_ms": 20.0,
        "rate": 1600.0,
        "phase_s": 3.0,
        "phases": 4,
        "settle_s": 10.0,
    },
    "fairness": {
        "nsqd": 64,
        "max_in_flight": 16,
        "handler_ms": 20.0,
        "rate": 20.0,
        "window_s": 30.0,
    },
}


def settings_for(scenario: str, overrides: dict[str, Any]) -> Settings:
    values = {**DEFAULTS[scenario], **{k: v for k, v in overrides.items() if v is not None}}
    return Settings(scenario=scenario, **values)


def _client_args(
    s: Settings, fleet: Fleet, topic: str, nsqd: int, expect: int, max_duration: float
) -> list[str]:
    return [
        "--lookupd-http",
        fleet.lookupd.http_address,
        "--topic",
        topic,
        "--channel",
        CHANNEL,
        "--nsqd-count",
        str(nsqd),
        "--expect",
        str(expect),
        "--max-in-flight",
        str(s.max_in_flight),
        "--handler-ms",
        str(s.handler_ms),
        "--max-duration",
        str(max_duration),
        "--bucket-ms",
        str(s.bucket_ms),
    ]


def _topic(scenario: str, part: str = "") -> str:
    return f"fleet-{scenario}{part}-{uuid.uuid4().hex[:8]}"


def _check(
    run: dict[str, Any],
    published: Sequence[int],
    counts: Sequence[dict[str, int]],
    *,
    complete: bool,
) -> list[str]:
    """What went wrong, from the client's counts and nsqd's own: [] when all is well. Always:
    no duplicates, nothing undecodable, nothing timed out on nsqd, nsqd holds what was
    published. ``complete``: every message handled exactly once, per nsqd, and nsqd left with
    nothing queued, in flight or requeued."""
    problems = [f"{k}={run.get(k)}" for k in ("duplicates", "bad") if run.get(k)]
    total = sum(published)
    if run.get("unique", 0) > total:
        problems.append(f"unique={run.get('unique')} > published={total}")
    message_count = sum(c["message_count"] for c in counts)
    if message_count != total:
        problems.append(f"nsqd message_count={message_count} (published {total})")
    timeouts = sum(c["timeout_count"] for c in counts)
    if timeouts:
        problems.append(f"nsqd timeout_count={timeouts}")
    if complete:
        if run.get("unique") != total:
            problems.append(f"unique={run.get('unique')} (expected {total})")
        if list(run.get("per_nsqd") or []) != list(published):
            problems.append("deliveries per nsqd differ from what each was given")
        for key in ("depth", "in_flight_count", "deferred_count", "requeue_count"):
            value = sum(c[key] for c in counts)
            if value:
                problems.append(f"nsqd {key}={value}")
    return problems


def _finish(run: dict[str, Any], problems: list[str], **extra: Any) -> dict[str, Any]:
    run["problems"] = problems
    run.update(extra)
    return run


def _preloaded_run(
    fleet: Fleet,
    spec: ClientSpec,
    s: Settings,
    nsqds: Sequence[Any],
    counts: Sequence[int],
    topic: str,
    *,
    must_finish: bool,
) -> dict[str, Any]:
    """Preload, run the client until it handled everything (or ``max_duration``), check."""
    fleet.create(nsqds, topic, CHANNEL)
    try:
        fleet.preload(nsqds, topic, counts, s.payload_size)
        expect = sum(counts)
        cpu0 = fleet.cpu_seconds(nsqds)
        client = ClientRun(
            spec,
            _client_args(s, fleet, topic, len(nsqds), expect, s.max_duration),
            stop_on_stdin=False,
        )
        run = client.result(s.max_duration + 60)
        cpu1 = fleet.cpu_seconds(nsqds)
        if run.get("status") != "ok":
            return run
        complete = run.get("stopped_by") == "done"
        if must_finish and not complete:
            run["incomplete"] = f"not all handled within --max-duration {s.max_duration:g} s"
        problems = _check(
            run, counts, fleet.channel_counts(nsqds, topic, CHANNEL), complete=complete
        )
        nsqd_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        return _finish(run, problems, published=list(counts), nsqd_cpu_s=nsqd_cpu)
    finally:
        fleet.delete(nsqds, topic)


def _streaming_run(
    fleet: Fleet,
    spec: ClientSpec,
    s: Settings,
    nsqds: Sequence[Any],
    targets: Callable[[float], list[int]],
    duration: float,
    settle: float,
) -> dict[str, Any]:
    """Start the client, wait until it is subscribed on every nsqd, publish on schedule, give it
    ``settle`` seconds to finish, stop it, check."""
    topic = _topic(s.scenario)
    fleet.create(nsqds, topic, CHANNEL)
    planned = targets(duration)
    expect = sum(planned)
    max_duration = duration + settle + 120
    client = ClientRun(
        spec, _client_args(s, fleet, topic, len(nsqds), expect, max_duration), stop_on_stdin=True
    )
    try:
        subscribe_s = fleet.wait_subscribed(nsqds, topic, CHANNEL, 60, client.alive)
        cpu0 = fleet.cpu_seconds(nsqds)
        sent, pub_start, pub_end = asyncio.run(
            paced_publish(nsqds, topic, targets, duration, s.payload_size)
        )
        if settle > 0:
            client.wait(settle)
        client.stop()
        run = client.result(60)
        cpu1 = fleet.cpu_seconds(nsqds)
        if run.get("status") != "ok":
            return run
        problems = _check(
            run,
            sent,
            fleet.channel_counts(nsqds, topic, CHANNEL),
            complete=run.get("stopped_by") == "done",
        )
        if sent != planned:
            problems.append("published counts differ from the plan")
        start = float(run["start_unix"])
        nsqd_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        return _finish(
            run,
            problems,
            published=sent,
            subscribe_s=subscribe_s,
            publish_start_s=pub_start - start,
            publish_end_s=pub_end - start,
            nsqd_cpu_s=nsqd_cpu,
        )
    finally:
        if client.alive():
            client.stop()
            client.result(30)
        fleet.delete(nsqds, topic)


# --------------------------------------------------------------------------- figures


def _rate(run: dict[str, Any]) -> float | None:
    done = run.get("done_s")
    return run["unique"] / done if done else None


def _rate_from_first(run: dict[str, Any]) -> float | None:
    """msg/s from the first delivery on: without the time to discover and connect."""
    done, firsts = run.get("done_s"), [f for f in run["first_s"] if f is not None]
    return run["unique"] / (done - min(firsts)) if done and firsts and done > min(firsts) else None


def window_counts(run: dict[str, Any], lo: float, hi: float) -> list[int]:
    """Deliveries per nsqd in the buckets that lie within [lo, hi) seconds (bucket edges)."""
    bucket = float(run["bucket_s"])
    out = [0] * len(run["per_nsqd"])
    for b, row in enumerate(run["timeline"]):
        if b * bucket >= lo - 1e-9 and (b + 1) * bucket <= hi + 1e-9:
            for i, n in enumerate(row):
                out[i] += n
    return out


def _follow_s(run: dict[str, Any], hot: int, start: float, end: float, rate: float) -> float | None:
    """Seconds from ``start`` until nsqd ``hot`` delivers >= 80% of ``rate`` over half a second
    (None: not before ``end``)."""
    bucket = float(run["bucket_s"])
    width = max(1, round(FOLLOW_WINDOW_S / bucket))
    need = FOLLOW_FRACTION * rate * width * bucket
    timeline = run["timeline"]
    b = int(start / bucket)
    while (b + width) * bucket <= end + 1e-9:
        got = sum(row[hot] for row in timeline[b : b + width])
        if got >= need:
            return max(0.0, b * bucket - start)
        b += 1
    return None


def _nsqd_cpu_us(run: dict[str, Any]) -> float | None:
    cpu = run.get("nsqd_cpu_s")
    return cpu / run["unique"] * 1e6 if cpu is not None and run.get("unique") else None


def figures(s: Settings, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The headline figures of one client's run(s) of a scenario (empty when a run failed)."""
    if any(r.get("status") != "ok" for r in runs.values()):
        return {}
    run = runs["fleet"]
    cpu_us = run["cpu_s"] / run["unique"] * 1e6 if run.get("unique") else None
    firsts = [f for f in run["first_s"] if f is not None]
    if s.scenario == "spread":
        one = runs["single"]
        fleet_rate, one_rate = _rate(run), _rate(one)
        return {
            "msg_s": fleet_rate,
            "single_msg_s": one_rate,
            "ratio": fleet_rate / one_rate if fleet_rate and one_rate else None,
            "msg_s_from_first_delivery": _rate_from_first(run),
            "single_msg_s_from_first_delivery": _rate_from_first(one),
            "cpu_us_per_msg": cpu_us,
            "single_cpu_us_per_msg": one["cpu_s"] / one["unique"] * 1e6 if one["unique"] else None,
            "nsqd_cpu_us_per_msg": _nsqd_cpu_us(run),
            "single_nsqd_cpu_us_per_msg": _nsqd_cpu_us(one),
        }
    if s.scenario == "low-mif":
        return {
            "drain_s": run.get("done_s"),
            "gave_up_after_s": None if run.get("done_s") is not None else run.get("end_s"),
            "last_first_delivery_s": max(firsts) if len(firsts) == s.nsqd else None,
            "median_first_delivery_s": statistics.median(firsts) if firsts else None,
            "nsqd_never_delivered": s.nsqd - len(firsts),
            "cpu_us_per_msg": cpu_us,
        }
    if s.scenario == "skewed":
        end = run["done_s"] if run.get("done_s") is not None else run["end_s"]
        span = end - min(firsts) if firsts else 0.0
        rate = run["unique"] / span if span > 0 else None
        ideal = s.capacity
        return {
            "msg_s": rate,
            "ideal_msg_s": ideal,
            "fraction": rate / ideal if rate and ideal else None,
            "handled": run["unique"],
            "drained": run.get("stopped_by") == "done",
        }
    if s.scenario == "hot-spot":
        phases = []
        for k, (hot, lo, hi) in enumerate(run["phases"]):
            in_phase = window_counts(run, lo, hi)
            phases.append(
                {
                    "phase": k,
                    "nsqd": hot,
                    "start_s": lo,
                    "follow_s": _follow_s(run, hot, lo, hi, s.rate),
                    "hot_msg_s": in_phase[hot] / (hi - lo) if hi > lo else None,
                }
            )
        follows = [p["follow_s"] for p in phases[1:]]
        return {
            "phases": phases,
            "max_follow_s": None if None in follows or not follows else max(follows),
            "phases_not_followed": sum(f is None for f in follows),
            "publish_msg_s": s.rate,
            "handled": run["unique"],
            "published": sum(run["published"]),
        }
    lo, hi = float(run["publish_start_s"]), float(run["publish_end_s"])
    counts = window_counts(run, lo, hi)
    mean = statistics.fmean(counts) if counts else 0.0
    shares = [c / mean if mean else 0.0 for c in counts]
    return {
        "window_s": hi - lo,
        "msg_s": sum(counts) / (hi - lo) if hi > lo else None,
        "capacity_msg_s": s.capacity,
        "min_share": min(shares) if shares else None,
        "max_share": max(shares) if shares else None,
        "nsqd_within_20pct": sum(0.8 <= x <= 1.2 for x in shares),
        "nsqd_with_nothing": sum(c == 0 for c in counts),
        "last_first_delivery_s": (max(firsts) - lo) if len(firsts) == s.nsqd else None,
        "shares": shares,
    }


# --------------------------------------------------------------------------- running


def run_scenario(fleet: Fleet, spec: ClientSpec, s: Settings, single: Any = None) -> dict[str, Any]:
    """One client on one scenario: its raw run(s), problems and figures."""
    nsqds = fleet.nsqds[: s.nsqd]
    runs: dict[str, dict[str, Any]] = {}
    if s.scenario == "spread":
        runs["fleet"] = _preloaded_run(
            fleet, spec, s, nsqds, [s.messages] * s.nsqd, _topic(s.scenario), must_finish=True
        )
        runs["single"] = _preloaded_run(
            fleet,
            spec,
            s,
            [single],
            [s.messages * s.nsqd],
            _topic(s.scenario, "-one"),
            must_finish=True,
        )
    elif s.scenario == "low-mif":
        runs["fleet"] = _preloaded_run(
            fleet, spec, s, nsqds, [s.messages] * s.nsqd, _topic(s.scenario), must_finish=True
        )
    elif s.scenario == "skewed":
        counts = [s.messages] + [0] * (s.nsqd - 1)
        runs["fleet"] = _preloaded_run(
            fleet, spec, s, nsqds, counts, _topic(s.scenario), must_finish=False
        )
    elif s.scenario == "hot-spot":
        stride = max(1, s.nsqd // max(1, s.phases))
        hots = [(k * stride) % s.nsqd for k in range(s.phases)]
        per_phase = round(s.rate * s.phase_s)

        def hot_targets(elapsed: float) -> list[int]:
            want = [0] * s.nsqd
            for k, hot in enumerate(hots):
                done = min(max(elapsed - k * s.phase_s, 0.0), s.phase_s)
                want[hot] += min(per_phase, int(s.rate * done))
            if elapsed >= s.phase_s * s.phases:
                want = [0] * s.nsqd
                for hot in hots:
                    want[hot] += per_phase
            return want

        run = _streaming_run(fleet, spec, s, nsqds, hot_targets, s.phase_s * s.phases, s.settle_s)
        if run.get("status") == "ok":
            lo = run["publish_start_s"]
            run["phases"] = [
                (hot, lo + k * s.phase_s, lo + (k + 1) * s.phase_s) for k, hot in enumerate(hots)
            ]
        runs["fleet"] = run
    elif s.scenario == "fairness":
        per_nsqd = round(s.rate * s.window_s)

        def even_targets(elapsed: float) -> list[int]:
            n = per_nsqd if elapsed >= s.window_s else min(per_nsqd, int(s.rate * elapsed))
            return [n] * s.nsqd

        runs["fleet"] = _streaming_run(fleet, spec, s, nsqds, even_targets, s.window_s, 0.0)
    else:
        raise ValueError(f"unknown scenario {s.scenario!r}")
    problems = [f"{part}: {p}" for part, r in runs.items() for p in r.get("problems", [])]
    failed = [f"{part}: {r.get('reason')}" for part, r in runs.items() if r.get("status") != "ok"]
    incomplete = [f"{part}: {r['incomplete']}" for part, r in runs.items() if r.get("incomplete")]
    status = "failed" if failed else "errors" if problems else "incomplete" if incomplete else "ok"
    return {
        "scenario": s.scenario,
        "client": spec.name,
        "status": status,
        "reason": "; ".join(failed + incomplete),
        "problems": problems,
        "settings": dataclasses.asdict(s),
        "figures": figures(s, runs),
        "runs": runs,
        "finished_unix": time.time(),
    }
