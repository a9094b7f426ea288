"""One result row, the PR-ready markdown table, the JSON report and the exit code rule."""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "MARKDOWN_COLUMNS",
    "ScenarioResult",
    "exit_code",
    "json_report",
    "machine_info",
    "markdown_table",
    "result_from_measurement",
    "write_text",
]

MIB = 1024 * 1024

MARKDOWN_COLUMNS = (
    "scenario",
    "messages",
    "payload",
    "batch",
    "concurrency",
    "duration",
    "msg/s",
    "MiB/s",
    "p50",
    "p95",
    "p99",
    "errors",
    "notes",
)


@dataclasses.dataclass
class ScenarioResult:
    """One scenario's outcome. ``errors`` is the sum of every way a message went wrong; it must
    be 0 (see :func:`exit_code`)."""

    scenario: str
    messages: int
    payload_size: int
    batch_size: int | None
    concurrency: int | None
    duration_s: float
    msg_per_s: float
    mib_per_s: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    missing: int = 0
    duplicates: int = 0
    publish_errors: int = 0
    fin_errors: int = 0
    server_errors: int = 0
    timed_out: bool = False
    failure: str | None = None
    notes: str = ""
    cpu_s: float = 0.0
    cpu_us_per_msg: float = 0.0
    peak_rss_mib: float = 0.0
    publish_duration_s: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def errors(self) -> int:
        return (
            self.missing
            + self.duplicates
            + self.publish_errors
            + self.fin_errors
            + self.server_errors
            + int(self.timed_out)
            + int(self.failure is not None)
        )

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def error_breakdown(self) -> str:
        parts = [
            f"{name} {value}"
            for name, value in (
                ("missing", self.missing),
                ("duplicates", self.duplicates),
                ("publish errors", self.publish_errors),
                ("fin errors", self.fin_errors),
                ("nsqd check", self.server_errors),
            )
            if value
        ]
        if self.timed_out:
            parts.append("TIMED OUT")
        if self.failure is not None:
            parts.append(f"FAILED: {self.failure}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["errors"] = self.errors
        return data


def result_from_measurement(
    scenario: str,
    measurement: Mapping[str, Any],
    *,
    messages: int,
    payload_size: int,
    batch_size: int | None,
    concurrency: int | None,
    cpu_s: float,
    peak_rss_kib: int,
    server_errors: int = 0,
    notes: str | None = None,
) -> ScenarioResult:
    """Build a row from a measurement dict (see :mod:`.params`)."""
    duration = max(float(measurement["duration_s"]), 1e-9)
    deliveries = int(measurement.get("deliveries", messages))
    latency = measurement.get("latency_ms") or {}
    extra = dict(measurement.get("extra") or {})
    if notes is None:
        notes = str(measurement.get("notes", ""))
    steady = measurement.get("steady_msg_s")
    if steady:
        extra["steady_msg_s"] = steady
        steady_note = f"99% at {steady:,.0f} msg/s"
        notes = f"{notes}; {steady_note}" if notes else steady_note
    cpu_total = cpu_s + float(measurement.get("child_cpu_s", 0.0))
    rss_kib = max(peak_rss_kib, int(measurement.get("child_max_rss_kib", 0)))
    return ScenarioResult(
        scenario=scenario,
        messages=deliveries,
        payload_size=payload_size,
        batch_size=batch_size,
        concurrency=measurement.get("concurrency", concurrency),
        duration_s=duration,
        msg_per_s=deliveries / duration,
        mib_per_s=deliveries * payload_size / duration / MIB,
        p50_ms=latency.get("p50"),
        p95_ms=latency.get("p95"),
        p99_ms=latency.get("p99"),
        missing=int(measurement.get("missing", 0)),
        duplicates=int(measurement.get("duplicates", 0)),
        publish_errors=int(measurement.get("publish_errors", 0)),
        fin_errors=int(measurement.get("fin_errors", 0)),
        server_errors=server_errors,
        timed_out=bool(measurement.get("timed_out", False)),
        notes=notes,
        cpu_s=cpu_total,
        cpu_us_per_msg=cpu_total / max(1, deliveries) * 1e6,
        peak_rss_mib=rss_kib / 1024,
        publish_duration_s=measurement.get("publish_duration_s"),
        extra=extra,
    )


# --------------------------------------------------------------------------- formatting


def fmt_int(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def fmt_mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.2f} ms" if value < 100 else f"{value:,.0f} ms"


def fmt_seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f} s"


def fmt_bytes(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,} B"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def markdown_table(results: Iterable[ScenarioResult]) -> str:
    """The PR-ready table: one row per scenario, columns :data:`MARKDOWN_COLUMNS`."""
    align = ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"]
    align += ["---:", "---:", "---"]
    lines = [markdown_row(MARKDOWN_COLUMNS), markdown_row(align)]
    for r in results:
        notes = r.notes
        resources = f"CPU {r.cpu_us_per_msg:,.1f} µs/msg"
        notes = f"{notes}; {resources}" if notes else resources
        if r.errors:
            notes = f"**{r.error_breakdown()}**; {notes}"
        lines.append(
            markdown_row(
                [
                    r.scenario,
                    fmt_int(r.messages),
                    fmt_bytes(r.payload_size),
                    fmt_int(r.batch_size),
                    fmt_int(r.concurrency),
                    fmt_seconds(r.duration_s),
                    fmt_rate(r.msg_per_s),
                    fmt_mib(r.mib_per_s),
                    fmt_ms(r.p50_ms),
                    fmt_ms(r.p95_ms),
                    fmt_ms(r.p99_ms),
                    fmt_int(r.errors),
                    notes,
                ]
            )
        )
    return "\n".join(lines) + "\n"


def machine_info() -> dict[str, Any]:
    import os

    cpu_model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError):
        pass
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": cpu_model,
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "argv": sys.argv,
    }


def json_report(
    results: Iterable[ScenarioResult],
    *,
    settings: Mapping[str, Any],
    machine: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--json`` report; ``machine`` adds to :func:`machine_info` (the repository's
    scripts add the checkout's git revision: an installed package has none)."""
    rows = [r.to_dict() for r in results]
    from .. import __version__

    return {
        "tool": "nsqclient bench",
        "nsqclient": __version__,
        "machine": {**machine_info(), **(machine or {})},
        "settings": dict(settings),
        "results": rows,
        "ok": all(row["errors"] == 0 for row in rows),
    }


def exit_code(results: Iterable[ScenarioResult]) -> int:
    """0 when every row has zero errors, else 1 (lost, duplicated, timed out, not recovered)."""
    return 0 if all(r.ok for r in results) else 1


def write_text(path: str | Path, text: str) -> None:
    target = Path(path)
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def dump_json(path: str | Path, data: Mapping[str, Any]) -> None:
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")
