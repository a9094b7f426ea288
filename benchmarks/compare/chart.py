"""The PNG chart of a comparison (needs matplotlib: the dev extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..chart import save_figure  # one figure style for every benchmark
from .report import PairResult

__all__ = ["write_compare_chart"]


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
    save_figure(fig, path, title, dpi=100)
