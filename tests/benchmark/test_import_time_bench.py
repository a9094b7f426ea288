"""benchmarks/import_time.py, run briefly: every nsqclient case measured, peers measured or n/a,
and the table and the ``--top`` listing printed (numbers are the benchmark's business, not a
test's: nothing here compares them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import import_time

pytestmark = pytest.mark.timeout(120)

ROOT = Path(import_time.__file__).resolve().parents[1]


def test_the_json_report_has_every_case_and_nsqclient_loads_nothing_deferred() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.import_time", "--rounds", "1", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=True,
    )
    rows = json.loads(result.stdout)
    assert [row["case"] for row in rows] == [case.name for case in import_time.CASES]
    for row in rows:
        if row["client"] == "nsqclient":
            assert row["python"] == sys.executable
            assert len(row["rounds_ms"]) == 1 and row["median_ms"] > 0
            assert row["deferred_loaded"] == [], row
        elif row["python"] is None:  # the peer is installed nowhere: n/a, never a number
            assert row["median_ms"] is None and row["rounds_ms"] == []
        else:
            assert row["median_ms"] > 0


def test_the_table_names_the_peers_and_where_the_time_goes(tmp_path: Path) -> None:
    # a stand-in "asyncnsq" (--python NAME=PATH): a python that imports a module of that name
    fake = tmp_path / "asyncnsq.py"
    fake.write_text("import asyncio\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.import_time",
            "--rounds",
            "1",
            "--top",
            "3",
            "--python",
            f"asyncnsq={wrapper}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=True,
    )
    out = result.stdout
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert str(wrapper) in rows["asyncnsq"]
    assert "1.00" in rows["asyncnsq"].split("|")[6]  # the x-asyncnsq column's unit
    assert "(no asyncio)" in rows["import nsqclient"]
    top = out.split("where nsqclient.sync's time goes", 1)[1].splitlines()[1:]
    assert len(top) == 3
    for line in top:  # "median-ms  module", costliest first
        ms, module = line.split()
        assert float(ms) >= 0
        assert all(part.isidentifier() for part in module.split("."))
