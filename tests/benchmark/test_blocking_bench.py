"""benchmarks/blocking.py runs end to end against real nsqd: the floor, a bare shared socket, a
bare loop-thread bridge, SyncWriter (plain, a script's first publishes, coalesced, pub_nowait)
and the asyncio Writer, each case in its own process, with ratios to the floor in the table,
and the ``--before`` cases against another checkout's nsqclient; and the other kinds of
connection (TLS against the TLS floor, snappy and deflate also against plain TCP)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_the_blocking_benchmark_measures_every_case_against_its_floor(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    cases = (
        "floor-1,floor-16,floor-16-py1,floor-16-py3,bare-shared-16,bare-bridge-16,sync-1,sync-1-script,sync-16,sync-16-coalesce,"
        "sync-1-nowait,sync-16-nowait,sync-16-window,aio-256"
    )
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.blocking", "--rounds", "1", "--messages", "1600",
         "--cases", cases, "--before", str(ROOT), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=230,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {r["case"]: r for r in json.loads(out.read_text())}
    assert set(cases.split(",")) <= set(rows)
    assert {"sync-1 (before)", "sync-1-script (before)", "sync-16 (before)"} <= set(rows)
    for row in rows.values():
        assert row["msg_per_s"] > 0 and row["cpu_us"] > 0 and row["cs"] >= 0
    assert "| SyncWriter.pub, 16 threads | " in done.stdout
    assert "| no library, 16 threads bridged to a loop thread | " in done.stdout
    assert "x floor" in done.stdout
    assert "| no library, 16 threads, a socket each, +3 µs of Python | " in done.stdout


@pytest.mark.timeout(240)
def test_the_blocking_benchmark_measures_every_kind_of_connection(tmp_path: Path) -> None:
    """TLS (against the TLS floor: IDENTIFY, ssl-wrapped, PUB, blocking recv), snappy and
    deflate (also against the plain SyncWriter), from 1 and 16 threads, and the asyncio
    Writer over TLS, each case briefly."""
    out = tmp_path / "rows.json"
    cases = (
        "sync-1,sync-16,sync-1-tls,sync-16-tls,sync-1-snappy,sync-16-snappy,sync-1-deflate,"
        "sync-16-deflate,aio-1,aio-1-tls,aio-256-tls"
    )
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.blocking", "--rounds", "1", "--messages", "800",
         "--cases", cases, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=230,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {r["case"]: r for r in json.loads(out.read_text())}
    assert set(cases.split(",")) | {"floor-1-tls", "floor-16-tls"} <= set(rows)
    for row in rows.values():
        assert row["msg_per_s"] > 0 and row["cpu_us"] > 0 and row["cs"] >= 0
    assert "| no library, 1 thread, TLS (ssl-wrapped socket) | " in done.stdout
    assert "| SyncWriter.pub, 16 threads, deflate | " in done.stdout
    assert "| kind against plain TCP | x rate of plain SyncWriter | x its CPU |" in done.stdout
    assert "| SyncWriter.pub, 1 thread, snappy | " in done.stdout.split("kind against")[1]
