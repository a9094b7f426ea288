"""The comparison's report: medians and min-max over repeats, the markdown table, re-rendering
saved runs, the chart, and the command line. Pure functions; no daemons, no timing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.compare.chart import write_compare_chart
from benchmarks.compare.cli import build_parser as compare_parser
from benchmarks.compare.cli import main as compare_main
from benchmarks.compare.harness import finish_pair, merge_pairs, parse_driver_output
from benchmarks.compare.report import (
    COMPARE_COLUMNS,
    PairResult,
    compare_markdown,
    run_errors,
    summarize_runs,
)

pytestmark = pytest.mark.timeout(60)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _cells(line: str) -> list[str]:
    """Split a markdown row on its unescaped pipes."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def test_summary_is_median_with_min_max_and_sums_errors() -> None:
    runs = [
        {"status": "ok", "messages": 1000, "duration_s": 2.0, "cpu_s": 0.2, "max_rss_kib": 10240,
         "latency_ms": {"p50": 3.0, "p95": 5.0, "p99": 9.0}},
        {"status": "ok", "messages": 1000, "duration_s": 1.0, "cpu_s": 0.1, "max_rss_kib": 20480,
         "latency_ms": {"p50": 1.0, "p95": 4.0, "p99": 8.0}, "missing": 2},
        {"status": "ok", "messages": 1000, "duration_s": 4.0, "cpu_s": 0.4, "max_rss_kib": 5120,
         "latency_ms": {"p50": 2.0, "p95": 6.0, "p99": 7.0}, "server_errors": 1},
    ]  # fmt: skip
    s = summarize_runs(runs, payload_size=1024 * 1024)
    assert s["msg_s"] == 500.0  # rates 500, 1000, 250
    assert (s["msg_s_min"], s["msg_s_max"]) == (250.0, 1000.0)
    assert s["mib_s"] == 500.0
    assert s["duration_s"] == 2.0
    assert (s["p50"], s["p95"], s["p99"]) == (2.0, 5.0, 8.0)
    assert s["cpu_us_per_msg"] == pytest.approx(200.0)
    assert s["peak_rss_mib"] == 20.0
    assert s["errors"] == 3
    assert s["repeats"] == 3
    assert s["median_run"] == 0  # the run at 500 msg/s


def test_summary_of_even_repeats_averages_the_middle_pair() -> None:
    runs = [{"status": "ok", "messages": 100, "duration_s": d} for d in (1.0, 2.0, 4.0, 5.0)]
    s = summarize_runs(runs, payload_size=16)
    assert s["msg_s"] == pytest.approx((50 + 25) / 2)


def test_failed_runs_count_as_errors_and_are_left_out_of_rates() -> None:
    runs = [
        {"status": "ok", "messages": 100, "duration_s": 1.0},
        {"status": "error", "messages": 100, "reason": "boom"},
    ]
    s = summarize_runs(runs, payload_size=16)
    assert s["msg_s"] == 100.0 and s["msg_s_min"] == s["msg_s_max"] == 100.0
    assert s["errors"] == 1
    assert run_errors({"status": "ok", "timed_out": True, "duplicates": 2}) == 3


def test_na_pairs_never_count_as_errors() -> None:
    na = PairResult(scenario="drain", client="x", status="n/a", reason="not installed")
    failed = PairResult(scenario="pub", client="x", status="failed", reason="crash")
    assert na.errors == 0
    assert failed.errors == 1


def test_compare_markdown_marks_na_and_shows_median_min_max() -> None:
    ok = PairResult(
        scenario="pub", client="nsqclient-aio", status="ok", version="0.1.0", messages=100,
        payload_size=512, concurrency=256,
        summary={"msg_s": 200.0, "msg_s_min": 100.0, "msg_s_max": 300.0, "mib_s": 0.1,
                 "duration_s": 0.5, "p50": 1.0, "p95": 2.0, "p99": 3.0, "cpu_us_per_msg": 12.3,
                 "peak_rss_mib": 40.0, "errors": 0},
    )  # fmt: skip
    na = PairResult(scenario="pub", client="pynsq", status="n/a", reason="not installed")
    lines = compare_markdown([ok, na]).splitlines()
    assert _cells(lines[0]) == list(COMPARE_COLUMNS)
    row = dict(zip(COMPARE_COLUMNS, _cells(lines[2]), strict=True))
    assert row["msg/s median (min-max)"] == "200 (100-300)"
    assert row["client"] == "nsqclient-aio 0.1.0"
    assert row["CPU µs/msg"] == "12.3"
    na_row = dict(zip(COMPARE_COLUMNS, _cells(lines[3]), strict=True))
    assert na_row["msg/s median (min-max)"] == "n/a"
    assert na_row["errors"] == "n/a"
    assert na_row["notes"] == "not installed"


def test_compare_flags() -> None:
    args = compare_parser().parse_args(
        ["--clients", "nsqclient-aio,asyncnsq", "--scenarios", "pub,drain", "--repeats", "5"]
    )
    assert args.clients == ["nsqclient-aio", "asyncnsq"]
    assert args.scenarios == ["pub", "drain"]
    assert args.repeats == 5
    with pytest.raises(SystemExit):
        compare_main(["--scenarios", "teleport"])


def test_driver_output_parsing_takes_the_last_protocol_line() -> None:
    out = 'hello\n{"not": "ours"}\n{"nsqbench": 1, "status": "ok", "n": 1}\n{broken\n'
    assert parse_driver_output(out) == {"nsqbench": 1, "status": "ok", "n": 1}
    with pytest.raises(ValueError):
        parse_driver_output("nothing here\n")


def test_compare_render_summarises_saved_runs_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [
        {"status": "ok", "messages": 100, "duration_s": d, "notes": f"run at {100 / d:.0f}"}
        for d in (1.0, 4.0, 2.0)
    ]
    pairs = [
        PairResult(scenario="pub", client="a", status="ok", messages=100, payload_size=16,
                   runs=runs).to_dict(),
        PairResult(scenario="pub", client="b", status="n/a", reason="not installed").to_dict(),
    ]  # fmt: skip
    saved = tmp_path / "c.json"
    saved.write_text(json.dumps({"pairs": pairs}))
    assert compare_main(["--render", str(saved)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = dict(zip(COMPARE_COLUMNS, _cells(lines[2]), strict=True))
    assert row["msg/s median (min-max)"] == "50 (25-100)"
    assert row["notes"] == "run at 50"  # the notes of the median run
    assert _cells(lines[3])[-1] == "not installed"


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
    argv = ["--render", str(first), "--render", str(second), "--chart", str(chart)]
    assert compare_main([*argv, "--scenarios", "pub"]) == 0
    table = capsys.readouterr().out
    assert "| pub | a |" in table and "| pub | b |" in table and "drain" not in table
    assert chart.read_bytes()[:8] == PNG_MAGIC
