"""The latency scenarios and the HTTP publish scenarios, run short against a real nsqd.

Only that they run, account for every message and emit their figures: no timing asserts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nsqclient.benchmark import __main__ as cli
from nsqclient.benchmark.latency import nsqd_cpu_seconds, nsqd_pid, reader_options
from nsqclient.testing.daemons import NsqdProcess

pytestmark = pytest.mark.timeout(60)


def _run(nsqd: NsqdProcess, tmp_path: Path, *args: str) -> dict[str, dict[str, object]]:
    code = cli.main(
        ["--nsqd-tcp", nsqd.tcp_address, "--nsqd-http", nsqd.http_address, "--quiet",
         "--timeout", "20", "--json", str(tmp_path / "r.json"), *args]
    )  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    rows = {str(r["scenario"]): r for r in report["results"]}
    assert {k: v for k, v in rows.items() if v["errors"] or v.get("failure")} == {}
    assert code == 0
    return rows


def test_latency_variants_run_and_emit_their_figures(nsqd: NsqdProcess, tmp_path: Path) -> None:
    names = ["latency", "latency-nsqd", "latency-obt30", "latency-unbuffered"]
    rows = _run(
        nsqd, tmp_path, "--scenarios", ",".join(names), "--max-in-flight", "16",
        "--latency-rate", "200", "--latency-duration", "0.2",
    )  # fmt: skip
    assert list(rows) == names
    for name, row in rows.items():
        assert row["messages"] == 40
        extra = row["extra"]
        assert isinstance(extra, dict)
        assert extra["variant"] == name
        assert extra["reader_options"] == reader_options(name)
        assert extra["max_in_flight"] == 16
        latency = extra["latency_ms"]
        assert isinstance(latency, dict) and set(latency) == {"p50", "p95", "p99", "max"}
        assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]
        assert row["p99_ms"] == latency["p99"]
        # the nsqd fixture is a real local process: its CPU was read
        assert isinstance(extra["nsqd_cpu_us_per_msg"], float)
        assert "nsqd CPU" in str(row["notes"])


def test_http_publish_scenarios_run(nsqd: NsqdProcess, tmp_path: Path) -> None:
    names = ["http-pub", "sync-http-pub", "http-fallback"]
    rows = _run(
        nsqd, tmp_path, "--scenarios", ",".join(names), "--http-messages", "60", "--threads", "16"
    )
    assert list(rows) == names
    for row in rows.values():
        assert row["messages"] == 60 and row["concurrency"] == 16
    assert "60 of 60 by HTTP" in str(rows["http-fallback"]["notes"])


def test_latency_variant_names() -> None:
    assert reader_options("latency") == {}
    assert reader_options("latency-obt25") == {"output_buffer_timeout": 25}
    assert reader_options("latency-unbuffered") == {"output_buffer_size": -1}
    assert reader_options("latency-nsqd") == {"output_buffer_timeout": 0, "output_buffer_size": 0}
    with pytest.raises(ValueError, match="unknown latency variant"):
        reader_options("latency-fast")


@pytest.mark.parametrize(
    "argv",
    [
        ["--scenarios", "latency-fast"],
        ["--scenarios", "latency", "--latency-rate", "0"],
        ["--scenarios", "latency", "--latency-duration", "nan"],
    ],
)
def test_bad_latency_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--nsqd-tcp", "h:1", "--nsqd-http", "h:2", *argv])
    assert info.value.code == 2


def test_process_cpu_of_a_missing_pid_is_none() -> None:
    assert nsqd_pid("192.0.2.1:1") is None
    assert nsqd_cpu_seconds(None) is None
    own = nsqd_cpu_seconds(os.getpid())
    assert own is not None and own > 0


def test_reader_options_reach_every_reader() -> None:
    from nsqclient.benchmark import runner
    from nsqclient.benchmark.run_cli import build_parser, settings_from_args

    parser = build_parser()
    args = parser.parse_args(
        ["--nsqd-tcp", "h:1", "--nsqd-http", "h:2", "--reader-option", "output_buffer_timeout=0",
         "--reader-option", "output_buffer_size=-1", "--scenarios", "drain-direct,latency-obt50"]
    )  # fmt: skip
    s = settings_from_args(args, parser, {})
    assert s.reader_options == {"output_buffer_timeout": 0, "output_buffer_size": -1}
    p = runner._params(s, "t", 10)
    assert p.reader_addresses() == {
        "nsqd_tcp_addresses": ["h:1"],
        "output_buffer_timeout": 0,
        "output_buffer_size": -1,
    }
