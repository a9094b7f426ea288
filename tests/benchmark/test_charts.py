"""The PNG charts of a run and of a comparison (matplotlib comes with the dev extras)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsqclient.benchmark import __main__ as cli
from nsqclient.benchmark.chart import write_chart, write_compare_chart
from nsqclient.benchmark.compare import merge_pairs
from nsqclient.benchmark.compare_report import PairResult
from nsqclient.benchmark.results import result_from_measurement

pytestmark = pytest.mark.timeout(60)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _pair(scenario: str, client: str, rates: tuple[float, ...] = (), **kw: object) -> PairResult:
    runs = [{"status": "ok", "messages": 1000, "duration_s": 1000 / r} for r in rates]
    status = str(kw.pop("status", "ok"))
    pair = PairResult(scenario=scenario, client=client, status=status, messages=1000,
                      payload_size=64, runs=runs, **kw)  # type: ignore[arg-type]  # fmt: skip
    return pair


def test_merge_keeps_the_first_report_and_adds_only_new_pairs() -> None:
    ours = [_pair("pub", "a"), _pair("mpub", "a")]
    go = [_pair("pub", "a", version="other run"), _pair("pub", "go"), _pair("mpub", "go"),
          _pair("extra", "go")]  # fmt: skip
    merged = merge_pairs([ours, go])
    assert [(p.scenario, p.client) for p in merged] == [
        ("pub", "a"), ("pub", "go"), ("mpub", "a"), ("mpub", "go"), ("extra", "go"),
    ]  # fmt: skip
    assert merged[0].version == ""  # the first report's pair wins


def test_compare_chart_is_a_png_and_refuses_an_empty_report(tmp_path: Path) -> None:
    from nsqclient.benchmark.compare import finish_pair

    pairs = [
        finish_pair(_pair("pub", "nsqclient-aio", (900.0, 1000.0, 1100.0))),
        finish_pair(_pair("pub", "go-nsq", (500.0,), runtime="go1.26 GOMAXPROCS=1")),
        _pair("pub", "ansq", status="n/a", reason="not installed"),
    ]
    target = tmp_path / "sub" / "c.png"
    write_compare_chart(target, pairs, "t")
    assert target.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="n/a"):
        write_compare_chart(tmp_path / "x.png", pairs[2:], "t")


def test_compare_render_writes_a_chart_of_merged_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "a.json"
    second = tmp_path / "b.json"
    first.write_text(json.dumps({"pairs": [_pair("pub", "a", (100.0,)).to_dict()]}))
    second.write_text(json.dumps({"pairs": [_pair("pub", "b", (50.0,)).to_dict(),
                                            _pair("drain", "b", (70.0,)).to_dict()]}))  # fmt: skip
    chart = tmp_path / "c.png"
    argv = ["compare", "--render", str(first), "--render", str(second), "--chart", str(chart)]
    assert cli.main([*argv, "--scenarios", "pub"]) == 0
    table = capsys.readouterr().out
    assert "| pub | a |" in table and "| pub | b |" in table and "drain" not in table
    assert chart.read_bytes()[:8] == PNG_MAGIC


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
