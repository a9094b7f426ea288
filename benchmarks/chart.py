"""PNG charts of the benchmarks' runs (needs matplotlib, in nsqclient's dev extra): ``nsqclient
bench``'s results (``python -m benchmarks.run --chart``, or ``python -m benchmarks.chart
results.json chart.png`` from a ``--json`` report) and the soak's samples; :func:`save_figure`
is every benchmark's figure style."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsqclient.benchmark.results import ScenarioResult

__all__ = [
    "main",
    "matplotlib_available",
    "results_from_report",
    "save_figure",
    "write_chart",
    "write_soak_chart",
]


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_chart(path: str | Path, results: Sequence[ScenarioResult], title: str) -> None:
    """Throughput per scenario (bars, log scale) and p50/p95/p99 where measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.scenario for r in results]
    rates = [r.msg_per_s for r in results]
    colors = ["tab:blue" if r.ok else "tab:red" for r in results]
    with_latency = [r for r in results if r.p50_ms is not None]
    fig: Any
    fig, axes = plt.subplots(
        1, 2, figsize=(14, max(4.0, 0.4 * len(results) + 1.5)), width_ratios=[3, 2]
    )
    ax = axes[0]
    ax.barh(names, rates, color=colors)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("messages / s (log scale; red = errors)")
    for y, rate in enumerate(rates):
        ax.text(rate, y, f" {rate:,.0f}", va="center", fontsize=8)
    ax2 = axes[1]
    if with_latency:
        labels = [r.scenario for r in with_latency]
        ys = range(len(with_latency))
        for offset, (attr, color) in enumerate(
            (("p50_ms", "tab:green"), ("p95_ms", "tab:orange"), ("p99_ms", "tab:red"))
        ):
            ax2.barh(
                [y + (offset - 1) * 0.27 for y in ys],
                [getattr(r, attr) or 0 for r in with_latency],
                height=0.27,
                color=color,
                label=attr.removesuffix("_ms"),
            )
        ax2.set_yticks(list(ys), labels)
        ax2.invert_yaxis()
        ax2.set_xscale("log")
        ax2.set_xlabel("latency, ms (log scale)")
        ax2.legend(loc="lower right")
    else:
        ax2.set_axis_off()
    save_figure(fig, path, title, dpi=110)


def save_figure(fig: Any, path: str | Path, title: str, *, dpi: int) -> None:
    """Title, tight layout, write the PNG (its folder created), free the figure."""
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=dpi)
    plt.close(fig)


def write_soak_chart(path: str | Path, report: dict[str, Any]) -> None:
    """The soak's samples: RSS over time, and publish/consume rates with the cuts marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report["samples"]
    settings = report["settings"]
    t = [s["t"] / 60 for s in samples]
    fig: Any
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    ax1.plot(t, [s["rss_mib"] for s in samples], marker="o", color="tab:purple", label="RSS")
    if any(s.get("traced_mib") for s in samples):
        traced = [s.get("traced_mib", 0.0) for s in samples]
        ax1.plot(t, traced, marker=".", color="tab:green", label="traced (tracemalloc)")
        ax1.legend(loc="lower right")
    ax1.set_ylabel("MiB")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3)
    ax2.plot(t[1:], [s["publish_rate"] for s in samples[1:]], marker="o", label="acknowledged/s")
    ax2.plot(t[1:], [s["consume_rate"] for s in samples[1:]], marker="x", label="consumed/s")
    cut_every = float(settings["cut_every"])
    cut = cut_every
    while cut < float(settings["duration"]):
        ax2.axvline(cut / 60, color="0.85", linewidth=0.8, zorder=0)
        cut += cut_every
    ax2.set_ylabel("messages / s (sample mean)")
    ax2.set_xlabel("minutes (grey lines: every connection cut)")
    top = max([s["publish_rate"] for s in samples] + [s["consume_rate"] for s in samples] + [1])
    ax2.set_ylim(0, top * 1.15)
    ax2.grid(alpha=0.3)
    ax2.legend(loc="lower right")
    result = report["result"]
    title = (
        f"nsqclient soak: {result['acked']:,} acknowledged, {result['missing_acknowledged']} "
        f"lost, {result['cuts']} cuts; RSS {result['rss_start_mib']:.0f} -> "
        f"{result['rss_end_mib']:.0f} MiB"
    )
    save_figure(fig, path, title, dpi=100)


def results_from_report(report: dict[str, Any]) -> list[ScenarioResult]:
    """The rows of a ``nsqclient bench --json`` report."""
    fields = {f for f in ScenarioResult.__dataclass_fields__}
    return [
        ScenarioResult(**{k: v for k, v in row.items() if k in fields}) for row in report["results"]
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.chart REPORT.json CHART.png``: draw a ``--json`` report."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m benchmarks.chart REPORT.json CHART.png", file=sys.stderr)
        return 2
    if not matplotlib_available():
        print("benchmarks.chart: needs matplotlib: pip install matplotlib", file=sys.stderr)
        return 2
    report = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    profile = report.get("settings", {}).get("profile", {}).get("name", "?")
    write_chart(args[1], results_from_report(report), f"nsqclient bench, profile {profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
