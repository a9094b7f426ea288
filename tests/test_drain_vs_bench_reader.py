"""benchmarks/drain_vs_bench_reader.py runs end to end (one small round each) and reports both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(180)
def test_the_drain_comparison_drains_with_both_readers_and_reports_them(tmp_path: Path) -> None:
    out = tmp_path / "rounds.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.drain_vs_bench_reader", "--messages", "20000",
         "--rounds", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert sorted(r["client"] for r in rows) == ["bench_reader", "nsqclient"]
    assert all(r["msg_s"] > 0 and r["nsqd_cpu_us"] >= 0 for r in rows)
    assert "nsqclient / bench_reader:" in done.stdout
