"""The PNG chart of a run (matplotlib comes with the dev extras)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chart import main as chart_main
from benchmarks.chart import results_from_report, write_chart
from nsqclient.benchmark.results import json_report, result_from_measurement

pytestmark = pytest.mark.timeout(60)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_run_chart_is_a_png(tmp_path: Path) -> None:
    measured = (("tcp-pub", {"p50": 1.0, "p95": 2.0, "p99": 3.0}), ("drain", None))
    rows = [
        result_from_measurement(
            name,
            {"duration_s": 0.5, "latency_ms": latency, "notes": ""},
            messages=1000,
            payload_size=512,
            batch_size=None,
            concurrency=64,
            cpu_s=0.1,
            peak_rss_kib=1024,
        )
        for name, latency in measured
    ]
    target = tmp_path / "run.png"
    write_chart(target, rows, "t")
    assert target.read_bytes()[:8] == PNG_MAGIC


def test_a_saved_report_is_drawn_by_the_repository_chart_command(tmp_path: Path) -> None:
    """``nsqclient bench --json`` (installed) -> ``python -m benchmarks.chart`` (repository)."""
    row = result_from_measurement(
        "tcp-pub",
        {"duration_s": 0.5, "latency_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0}},
        messages=10,
        payload_size=64,
        batch_size=None,
        concurrency=1,
        cpu_s=0.1,
        peak_rss_kib=1024,
    )
    report = json_report([row], settings={"profile": {"name": "quick"}})
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(report, default=str))
    assert results_from_report(json.loads(saved.read_text())) == [row]
    target = tmp_path / "run.png"
    assert chart_main([str(saved), str(target)]) == 0
    assert target.read_bytes().startswith(PNG_MAGIC)
    assert chart_main([str(saved)]) == 2  # usage
