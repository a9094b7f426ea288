"""Per-nsqd deliveries over time, one panel per (scenario, client): a heat map with one row per
nsqd and one column per time bucket (needs matplotlib, the ``plot`` extra; imported only when
a plot is asked for). Streaming scenarios show msg/s; preloaded ones the share of each nsqd's
messages handled so far (rotation shows as a staircase). First deliveries are dots; the
hot-spot phases are dashed lines with the hot nsqd of each marked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["matplotlib_missing", "write_fleet_plot"]


def matplotlib_missing() -> str | None:
    """Why a plot cannot be drawn here (None when it can)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no plot drawn"
    return None


PRELOADED = ("spread", "low-mif", "skewed")


def _cumulative_share(row: list[int], given: int) -> list[float]:
    out, done = [], 0
    for n in row:
        done += n
        out.append(done / given if given else 0.0)
    return out


def write_fleet_plot(path: str | Path, results: Sequence[dict[str, Any]], title: str) -> int:
    """Draw every result that has a timeline; returns how many panels were drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..chart import save_figure  # one figure style for every benchmark

    panels = [
        (r, part, run)
        for r in results
        for part, run in r.get("runs", {}).items()
        if run.get("status") == "ok" and run.get("timeline")
    ]
    if not panels:
        return 0
    fig: Any
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.6 + 2.6 * len(panels)), squeeze=False)
    for ax, (result, part, run) in zip(axes[:, 0], panels, strict=True):
        bucket = float(run["bucket_s"])
        timeline = run["timeline"]
        grid = [list(col) for col in zip(*timeline, strict=True)]  # nsqd x bucket
        preloaded = result["scenario"] in PRELOADED
        if preloaded:  # a rate would be a thin stripe per nsqd: colour what is done so far
            values = [
                _cumulative_share(row, given)
                for row, given in zip(grid, run["published"], strict=True)
            ]
            label = "share handled"
        else:
            values = [[n / bucket for n in row] for row in grid]
            label = "msg/s"
        end = len(timeline) * bucket
        image = ax.imshow(
            values,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            extent=(0.0, end, -0.5, len(grid) - 0.5),
            cmap="viridis",
        )
        fig.colorbar(image, ax=ax, pad=0.01, label=label)
        firsts = [(f, i) for i, f in enumerate(run["first_s"]) if f is not None]
        if firsts:
            ax.scatter(
                [f for f, _ in firsts],
                [i for _, i in firsts],
                s=6,
                color="white",
                edgecolors="black",
                linewidths=0.3,
                label="first delivery",
            )
        for hot, lo, _hi in run.get("phases") or []:
            ax.axvline(lo, color="white", linestyle="--", linewidth=0.8)
            ax.annotate(f"-> nsqd {hot}", (lo, hot), color="white", fontsize=7)
        title_ = f"{result['scenario']} / {result['client']}" + (
            f" ({part})" if part != "fleet" else ""
        )
        ax.set_title(title_, loc="left", fontsize=10, fontweight="bold")
        ax.set_ylabel("nsqd")
        ax.set_xlim(0, end)
    axes[-1, 0].set_xlabel("seconds since the consumer started")
    save_figure(fig, path, title, dpi=100)
    return len(panels)
