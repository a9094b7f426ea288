"""The compare report: one (scenario, client) pair's repeats, their median and min-max, and the
markdown table. Pure functions over the runs' JSON, so the arithmetic is unit-tested alone."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nsqclient.benchmark.results import (
    fmt_bytes,
    fmt_int,
    fmt_mib,
    fmt_ms,
    fmt_rate,
    fmt_seconds,
    markdown_row,
)

__all__ = ["COMPARE_COLUMNS", "PairResult", "compare_markdown", "run_errors", "summarize_runs"]

MIB = 1024 * 1024


@dataclasses.dataclass
class PairResult:
    """One (scenario, client) pair: its repeats and their summary."""

    scenario: str
    client: str
    status: str  # "ok", "n/a" or "failed"
    reason: str = ""
    version: str = ""
    runtime: str = ""
    messages: int = 0
    payload_size: int = 0
    batch_size: int | None = None
    concurrency: int | None = None
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: str = ""

    @property
    def errors(self) -> int:
        if self.status == "n/a":
            return 0
        if self.status == "failed":
            return max(1, int(self.summary.get("errors", 0)))
        return int(self.summary.get("errors", 0))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["errors"] = self.errors
        return data


def run_errors(run: Mapping[str, Any]) -> int:
    """Every way one run went wrong, as a count."""
    return (
        int(run.get("missing", 0))
        + int(run.get("duplicates", 0))
        + int(run.get("publish_errors", 0))
        + int(run.get("fin_errors", 0))
        + int(run.get("server_errors", 0))
        + int(bool(run.get("timed_out", False)))
        + int(run.get("status", "ok") != "ok")
    )


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def summarize_runs(runs: Sequence[Mapping[str, Any]], *, payload_size: int) -> dict[str, Any]:
    """Median and min-max over repeats: msg/s, MiB/s, duration, latency percentiles, CPU per
    message; the largest peak RSS; errors summed over all repeats."""
    ok = [r for r in runs if r.get("status") == "ok" and float(r.get("duration_s") or 0) > 0]
    rates = [int(r["messages"]) / float(r["duration_s"]) for r in ok]
    median_run = None
    if ok:  # the run whose rate is the median (the lower middle one for an even count)
        order = sorted(range(len(ok)), key=rates.__getitem__)
        median_run = runs.index(ok[order[(len(order) - 1) // 2]])
    summary: dict[str, Any] = {
        "repeats": len(runs),
        "median_run": median_run,
        "errors": sum(run_errors(r) for r in runs),
        "msg_s": _median(rates),
        "msg_s_min": min(rates) if rates else None,
        "msg_s_max": max(rates) if rates else None,
        "mib_s": None,
        "duration_s": _median([float(r["duration_s"]) for r in ok]),
        "cpu_us_per_msg": _median(
            [float(r.get("cpu_s", 0)) / max(1, int(r["messages"])) * 1e6 for r in ok]
        ),
        "peak_rss_mib": max((int(r.get("max_rss_kib", 0)) for r in ok), default=0) / 1024,
        "steady_msg_s": _median([float(r["steady_msg_s"]) for r in ok if r.get("steady_msg_s")]),
    }
    if summary["msg_s"] is not None:
        summary["mib_s"] = summary["msg_s"] * payload_size / MIB
    for key in ("p50", "p95", "p99"):
        summary[key] = _median([float(r["latency_ms"][key]) for r in ok if r.get("latency_ms")])
    return summary


COMPARE_COLUMNS = (
    "scenario",
    "client",
    "messages",
    "payload",
    "batch",
    "concurrency",
    "duration",
    "msg/s median (min-max)",
    "MiB/s",
    "p50",
    "p95",
    "p99",
    "CPU µs/msg",
    "peak RSS",
    "errors",
    "notes",
)


def compare_markdown(pairs: Sequence[PairResult]) -> str:
    align = ["---", "---", *["---:"] * 13, "---"]
    lines = [markdown_row(COMPARE_COLUMNS), markdown_row(align)]
    for pr in pairs:
        s = pr.summary
        if pr.status == "n/a":
            cells: list[object] = [pr.scenario, pr.client, *["n/a"] * 13, pr.reason]
            lines.append(markdown_row(cells))
            continue
        rate = "n/a"
        if s.get("msg_s") is not None:
            rate = f"{fmt_rate(s['msg_s'])} ({fmt_rate(s['msg_s_min'])}-{fmt_rate(s['msg_s_max'])})"
        notes = pr.notes
        if pr.status == "failed" or pr.errors:
            notes = f"**{pr.reason or 'errors'}**; {notes}" if notes else f"**{pr.reason}**"
        if s.get("steady_msg_s"):
            notes = f"{notes}; 99% at {fmt_rate(s['steady_msg_s'])} msg/s".lstrip("; ")
        cpu = s.get("cpu_us_per_msg")
        lines.append(
            markdown_row(
                [
                    pr.scenario,
                    f"{pr.client} {pr.version}".strip(),
                    fmt_int(pr.messages),
                    fmt_bytes(pr.payload_size),
                    fmt_int(pr.batch_size),
                    fmt_int(pr.concurrency),
                    fmt_seconds(s.get("duration_s")),
                    rate,
                    fmt_mib(s.get("mib_s")),
                    fmt_ms(s.get("p50")),
                    fmt_ms(s.get("p95")),
                    fmt_ms(s.get("p99")),
                    "n/a" if cpu is None else f"{cpu:,.1f}",
                    f"{s.get('peak_rss_mib', 0):,.0f} MiB",
                    fmt_int(pr.errors),
                    notes,
                ]
            )
        )
    return "\n".join(lines) + "\n"
