"""benchmarks/idle_connections.py runs end to end (a tiny fleet, a short window) and reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "idle_connections.py"


@pytest.mark.timeout(120)
def test_the_idle_benchmark_keeps_every_connection_alive_and_reports_its_cost() -> None:
    args = ["-n", "4", "--seconds", "2.5", "--heartbeat-interval", "1000"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["connections"] == result["open_at_end"] == 4
    assert result["heartbeats_in_window"] >= 4  # answered: nsqd closes those that miss two
    assert result["cpu_percent_of_core"] >= 0 and result["py_heap_kib_per_connection"] > 0
