"""The fleet benchmark (``python -m benchmarks.fleet``) at a tiny size on embedded nsqd: each
scenario runs end to end, its JSON has the documented shape, and the counts add up (every
message published is in nsqd's counters, none delivered twice; the preloaded ones all handled,
each from the nsqd it was given to). No timing is asserted. go-nsq's side runs once; its program
is built here through the Go module proxy when it is missing (as
``bash test_service/benchmark_fleet.sh`` does), so CI runs it too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fleet.cli import main as fleet_main
from benchmarks.fleet.harness import DEFAULT_GOBENCH
from benchmarks.fleet.scenarios import SCENARIOS, _follow_s, window_counts

pytestmark = pytest.mark.timeout(60)

TINY: dict[str, list[str]] = {
    "spread": ["--nsqd", "4", "--messages", "30", "--max-in-flight", "16"],
    # more nsqd than max_in_flight: today's even split rotates RDY after low_rdy_idle_timeout,
    # shortened (its floor is 1 s) so that this drains in a few seconds whatever the policy
    "low-mif": ["--nsqd", "4", "--messages", "5", "--max-in-flight", "3"],
    "skewed": ["--nsqd", "4", "--messages", "40", "--max-in-flight", "8", "--handler-ms", "5"],
    "hot-spot": ["--nsqd", "4", "--max-in-flight", "8", "--handler-ms", "5", "--rate", "60",
                 "--phase-s", "0.4", "--phases", "2", "--settle-s", "5"],
    "fairness": ["--nsqd", "4", "--max-in-flight", "3", "--handler-ms", "5", "--rate", "30",
                 "--window-s", "0.6"],
}  # fmt: skip
CLIENT = "nsqclient+low_rdy_idle_timeout=1000+rdy_redistribute_interval=50"
FIGURES = {
    "spread": {"msg_s", "single_msg_s", "ratio", "cpu_us_per_msg", "single_cpu_us_per_msg"},
    "low-mif": {"drain_s", "last_first_delivery_s", "median_first_delivery_s"},
    "skewed": {"msg_s", "ideal_msg_s", "fraction"},
    "hot-spot": {"phases", "publish_msg_s", "handled", "published"},
    "fairness": {"msg_s", "capacity_msg_s", "min_share", "max_share", "shares"},
}
RUN_KEYS = {"expected", "received", "unique", "duplicates", "bad", "per_nsqd", "first_s",
            "last_s", "bucket_s", "timeline", "start_unix", "end_s", "stopped_by", "cpu_s",
            "connections", "published", "problems"}  # fmt: skip


def _run(tmp_path: Path, scenario: str, client: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"{scenario}.json"
    argv = ["--scenario", scenario, "--clients", client, "--backend", "embedded",
            "--bucket-ms", "50", "--payload-size", "64", "--json", str(out), "--quiet",
            *TINY[scenario], *extra]  # fmt: skip
    assert fleet_main(argv) == 0, out.read_text() if out.exists() else "no JSON written"
    report: dict[str, Any] = json.loads(out.read_text())
    assert report["fleetbench"] == 1 and report["backend"] == "embedded"
    assert len(report["results"]) == 1
    return report


def _check_counts(result: dict[str, Any], nsqd: int) -> None:
    for part, run in result["runs"].items():
        assert set(run) >= RUN_KEYS, part
        assert run["duplicates"] == 0 and run["bad"] == 0 and run["problems"] == []
        published = run["published"]
        assert len(run["per_nsqd"]) == len(published) == len(run["first_s"])
        assert run["received"] == run["unique"] <= sum(published) == run["expected"]
        assert sum(run["per_nsqd"]) == run["unique"]
        assert sum(map(sum, run["timeline"])) == run["unique"]  # every delivery bucketed
        assert run["connections"] == len(published) == (nsqd if part == "fleet" else 1)
        if run["stopped_by"] == "done":
            assert run["per_nsqd"] == published  # each from the nsqd it was given to


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fleet_scenario_runs_and_counts_add_up(tmp_path: Path, scenario: str) -> None:
    plotted = scenario in ("low-mif", "hot-spot")  # the two kinds of panel: share, rate
    extra = ["--plot", str(tmp_path / "fleet.png")] if plotted else []
    result = _run(tmp_path, scenario, CLIENT, *extra)["results"][0]
    assert result["scenario"] == scenario and result["client"] == CLIENT
    assert result["status"] == "ok", (result["reason"], result["problems"])
    assert FIGURES[scenario] <= set(result["figures"])
    _check_counts(result, nsqd=4)
    runs = result["runs"]
    if scenario in ("spread", "low-mif", "skewed", "hot-spot"):  # everything handled
        assert all(r["stopped_by"] == "done" for r in runs.values())
        assert all(r["unique"] == sum(r["published"]) for r in runs.values())
    if scenario == "spread":
        assert runs["single"]["unique"] == runs["fleet"]["unique"] == 4 * 30
    if scenario == "skewed":
        assert runs["fleet"]["published"] == [40, 0, 0, 0]
        assert result["figures"]["fraction"] > 0
    if scenario == "hot-spot":
        assert [p["nsqd"] for p in result["figures"]["phases"]] == [0, 2]
        assert runs["fleet"]["published"] == [24, 0, 24, 0]
    if plotted:
        assert (tmp_path / "fleet.png").stat().st_size > 0
    if scenario == "fairness":
        assert runs["fleet"]["published"] == [18] * 4
        assert len(result["figures"]["shares"]) == 4


def _built_gobench() -> Path:
    """The go-nsq program, built when missing; without Go it skips, except under CI."""
    if DEFAULT_GOBENCH.exists():
        return DEFAULT_GOBENCH
    fallback = Path("/usr/local/go/bin/go")
    go = shutil.which("go") or (str(fallback) if fallback.exists() else None)
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Go is needed to build go-nsq's side of the fleet benchmark")
        pytest.skip("Go is not installed: go-nsq's side of the fleet benchmark cannot be built")
    source = Path(__file__).resolve().parents[2] / "benchmarks" / "compare" / "gobench"
    DEFAULT_GOBENCH.parent.mkdir(parents=True, exist_ok=True)
    ignore = DEFAULT_GOBENCH.parent / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"}
    subprocess.run([go, "build", "-o", str(DEFAULT_GOBENCH), "."], cwd=source, env=env,
                   check=True, timeout=240)  # fmt: skip
    return DEFAULT_GOBENCH


@pytest.mark.timeout(300)
def test_fleet_go_nsq_side_counts_add_up(tmp_path: Path) -> None:
    _built_gobench()
    result = _run(tmp_path, "skewed", "go-nsq")["results"][0]
    assert result["status"] == "ok", (result["reason"], result["problems"])
    assert result["runs"]["fleet"]["stopped_by"] == "done"
    _check_counts(result, nsqd=4)


def test_follow_time_and_windows_from_a_timeline() -> None:
    # 0.1 s buckets, two nsqd: nsqd 1 reaches 80% of 100 msg/s from 0.3 s (8 per bucket)
    run = {
        "bucket_s": 0.1,
        "per_nsqd": [0, 0],
        "timeline": [[5, 0], [5, 1], [5, 2], [0, 8], [0, 8], [0, 9], [0, 8], [0, 8], [0, 9]],
    }
    assert window_counts(run, 0.0, 0.3) == [15, 3]
    assert window_counts(run, 0.3, 0.9) == [0, 50]
    assert _follow_s(run, 1, 0.1, 0.9, rate=100.0) == pytest.approx(0.2)
    assert _follow_s(run, 0, 0.0, 0.9, rate=100.0) is None  # never 80 msg/s for 0.5 s
