"""The soak benchmark (repository tooling), short: ``python -m benchmarks.soak`` for 12 s
against real nsqd with a cut every 3 s, through its command line (JSON and chart written; 30 s
and a cut every 5 s until issue 51: three cuts prove the same, in less of CI's time).
Correctness only: every acknowledged message consumed, nothing left in flight or queued; no
timing or RSS assertion (the RSS bound is for the long run, on a quiet machine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.soak import main

pytestmark = pytest.mark.timeout(150)


def test_soak_through_cuts_loses_nothing_acknowledged(
    nsqd_factory: Any, tmp_path: Path
) -> None:
    nsqd = nsqd_factory(extra_args=["--msg-timeout=5s"])
    out, chart = tmp_path / "soak.json", tmp_path / "soak.png"
    code = main(
        [
            *("--duration", "12", "--cut-every", "3", "--sample-every", "3"),
            *("--rate", "400", "--sync-rate", "100", "--rss-growth-limit", "1000"),
            *("--nsqd-tcp", nsqd.tcp_address, "--nsqd-http", nsqd.http_address),
            *("--json", str(out), "--chart", str(chart), "--quiet"),
        ]
    )
    report = json.loads(out.read_text())
    result = report["result"]
    assert code == 0, result
    assert result["ok"] and result["missing_acknowledged"] == 0
    assert result["left_in_flight"] == 0 and result["left_queued"] == 0
    assert result["cuts"] == 3 and result["connections_cut"] >= 3
    assert result["connections_accepted"] >= 4 + 3  # four clients, and reconnects after cuts
    assert result["acked"] > 0 and result["consumed"] >= result["acked"]
    assert len(report["samples"]) == 5  # t=0 and every 3 s
    assert result["lost"] == 0 and result["duplicates_stored_twice"] == 0
    assert all(s["traced_mib"] > 0 for s in report["samples"])  # tracemalloc series, on by default
    assert result["closed_traced_mib"] > 0 and result["traced_diff_since_warm_by_line"]
    assert chart.stat().st_size > 0
