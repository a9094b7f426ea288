"""benchmarks/embedded_vs_nsqd.py runs end to end at tiny sizes: nsq's bench_writer and
bench_reader against real nsqd and the shim-launched embedded one, and the memory figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_both_servers_are_benched_side_by_side_and_their_memory_per_connection_reported(
    tmp_path: Path,
) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.embedded_vs_nsqd", "--rounds", "1",
         "--writer-seconds", "0.5", "--reader-seconds", "0.2", "--connections", "2000",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert sorted(r["server"] for r in figures["rounds"]) == ["embedded", "real"]
    for row in figures["rounds"]:
        assert row["writer_msg_s"] > 0 and row["reader_msg_s"] > 0, row
        assert row["backlog_left"] > 0, row  # the reader never ran out of messages
    assert sorted(m["server"] for m in figures["memory"]) == ["embedded", "real"]
    for m in figures["memory"]:
        assert m["connections"] == 2000 and m["bytes_per_connection"] > 0, m
    assert "| embedded/real |" in done.stdout
