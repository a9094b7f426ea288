"""The PNG chart of a run (matplotlib comes with the dev extras)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chart import write_chart
from nsqclient.benchmark.results import result_from_measurement

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
