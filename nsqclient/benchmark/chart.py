"""A PNG chart of a run (needs the ``plot`` extra: ``pip install nsqclient[plot]``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .results import ScenarioResult

if TYPE_CHECKING:
    from .compare_report import PairResult

__all__ = ["matplotlib_available", "write_chart", "write_compare_chart", "write_soak_chart"]


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
    _save(fig, path, title, dpi=110)


def _save(fig: Any, path: str | Path, title: str, *, dpi: int) -> None:
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=dpi)
    plt.close(fig)


def _client_label(pair: PairResult) -> str:
    label = f"{pair.client} {pair.version}".strip()
    gomaxprocs = next((w for w in pair.runtime.split() if w.startswith("GOMAXPROCS=")), None)
    return f"{label} ({gomaxprocs})" if gomaxprocs else label


def write_compare_chart(path: str | Path, pairs: Sequence[PairResult], title: str) -> None:
    """One panel per scenario, one bar per client: median msg/s with the min-max range as an
    error bar. Scenarios differ by an order of magnitude, so each panel keeps its own scale;
    pairs a client cannot do (n/a) are left out, failed pairs are drawn red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    scenarios = list(dict.fromkeys(p.scenario for p in pairs if p.status != "n/a"))
    if not scenarios:
        raise ValueError("nothing to chart: every pair is n/a")
    fig: Any
    fig, axes = plt.subplots(
        len(scenarios), 1, figsize=(10, 1.2 + 2.3 * len(scenarios)), squeeze=False
    )
    for ax, scenario in zip(axes[:, 0], scenarios, strict=True):
        rows = [p for p in pairs if p.scenario == scenario and p.status != "n/a"]
        labels = [_client_label(p) for p in rows]
        rates = [float(p.summary.get("msg_s") or 0.0) for p in rows]
        spans = list(zip(rows, rates, strict=True))
        low = [r - float(p.summary.get("msg_s_min") or r) for p, r in spans]
        high = [float(p.summary.get("msg_s_max") or r) - r for p, r in spans]
        colors = [
            "tab:red" if p.errors else ("tab:blue" if p.client.startswith("nsqclient") else "0.6")
            for p in rows
        ]
        ax.barh(labels, rates, xerr=[low, high], color=colors, capsize=3)
        ax.invert_yaxis()
        ax.set_title(scenario, loc="left", fontsize=10, fontweight="bold")
        ax.set_xlim(0, max(r + h for r, h in zip(rates, high, strict=True)) * 1.25)
        for y, (rate, up) in enumerate(zip(rates, high, strict=True)):
            ax.text(rate + up, y, f"  {rate:,.0f}", va="center", fontsize=8)
        ax.xaxis.set_major_formatter(
            matplotlib.ticker.FuncFormatter(lambda x, _pos: f"{x / 1000:,.0f}k")
        )
        ax.tick_params(axis="y", labelsize=8)
    axes[-1, 0].set_xlabel("messages / s, median of the repeats (bar: min-max; red = errors)")
    _save(fig, path, title, dpi=100)


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
    ax1.plot(t, [s["rss_mib"] for s in samples], marker="o", color="tab:purple")
    ax1.set_ylabel("RSS, MiB")
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
        f"missing, {result['cuts']} cuts; RSS {result['rss_start_mib']:.0f} -> "
        f"{result['rss_end_mib']:.0f} MiB"
    )
    _save(fig, path, title, dpi=100)
