"""Report shape (markdown columns, JSON keys), profiles and command-line parsing."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import run as repo_run
from benchmarks import source_revision
from nsqclient.benchmark import __main__ as cli
from nsqclient.benchmark.profiles import PROFILES, resolve_profile
from nsqclient.benchmark.results import (
    MARKDOWN_COLUMNS,
    ScenarioResult,
    json_report,
    markdown_table,
    result_from_measurement,
)
from nsqclient.benchmark.run_cli import build_parser, resolve_addresses, settings_from_args

pytestmark = pytest.mark.timeout(10)


def _cells(line: str) -> list[str]:
    """Split a markdown row on its unescaped pipes."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def _row(scenario: str = "tcp-pub", **changes: object) -> ScenarioResult:
    row = result_from_measurement(
        scenario,
        {"duration_s": 0.5, "latency_ms": {"p50": 1.5, "p95": 2.5, "p99": 350.0}, "notes": "n"},
        messages=1000, payload_size=512, batch_size=None, concurrency=64, cpu_s=0.1,
        peak_rss_kib=1024,
    )  # fmt: skip
    for key, value in changes.items():
        setattr(row, key, value)
    return row


def test_markdown_table_has_the_pr_columns() -> None:
    text = markdown_table([_row(), _row("e2e", missing=2)])
    lines = text.splitlines()
    assert _cells(lines[0]) == list(MARKDOWN_COLUMNS) == [
        "scenario", "messages", "payload", "batch", "concurrency", "duration", "msg/s",
        "MiB/s", "p50", "p95", "p99", "errors", "notes",
    ]  # fmt: skip
    assert len(lines) == 4
    first = dict(zip(MARKDOWN_COLUMNS, _cells(lines[2]), strict=True))
    assert first["messages"] == "1,000"
    assert first["payload"] == "512 B"
    assert first["batch"] == "n/a"
    assert first["msg/s"] == "2,000"
    assert first["p50"] == "1.50 ms" and first["p99"] == "350 ms"
    assert first["errors"] == "0"
    bad = dict(zip(MARKDOWN_COLUMNS, _cells(lines[3]), strict=True))
    assert bad["errors"] == "2"
    assert "missing 2" in bad["notes"]


def test_markdown_escapes_pipes_in_notes() -> None:
    text = markdown_table([_row(notes="a|b")])
    assert len(_cells(text.splitlines()[2])) == len(MARKDOWN_COLUMNS)


def test_json_report_keys() -> None:
    report = json_report([_row(), _row(missing=1)], settings={"profile": {"name": "quick"}})
    assert set(report) >= {"tool", "nsqclient", "machine", "settings", "results", "ok"}
    assert report["ok"] is False
    assert set(report["machine"]) >= {"date", "python", "platform", "cpu", "cpus", "memory_gib"}
    assert "nsqclient_source" not in report["machine"]  # the installed package runs no git
    extra = json_report([_row()], settings={}, machine={"nsqclient_source": "abc"})
    assert extra["machine"]["nsqclient_source"] == "abc" and "date" in extra["machine"]
    row = report["results"][0]
    assert set(row) >= {
        "scenario", "messages", "payload_size", "batch_size", "concurrency", "duration_s",
        "msg_per_s", "mib_per_s", "p50_ms", "p95_ms", "p99_ms", "errors", "missing",
        "duplicates", "publish_errors", "fin_errors", "server_errors", "timed_out", "notes",
        "cpu_s", "cpu_us_per_msg", "peak_rss_mib",
    }  # fmt: skip
    assert report["results"][1]["errors"] == 1
    json.dumps(report)  # serialisable as is


def test_profiles_match_the_brief() -> None:
    expected = {
        "quick": (5_000, 256, 64, 100),
        "pr": (50_000, 512, 256, 250),
        "stress": (250_000, 1_024, 512, 500),
    }
    for name, (messages, payload, concurrency, batch) in expected.items():
        p = PROFILES[name]
        assert (p.messages, p.payload_size, p.concurrency, p.batch_size) == (
            messages, payload, concurrency, batch,
        )  # fmt: skip


def test_overrides_apply_and_messages_caps_derived_counts() -> None:
    p = resolve_profile("pr", {"messages": 300, "concurrency": 7, "max_in_flight": None})
    assert (p.messages, p.concurrency, p.max_in_flight) == (300, 7, 1_024)
    assert p.http_messages == p.fanout_messages == p.requeue_messages == 300
    explicit = resolve_profile("pr", {"messages": 300, "http_messages": 1_000})
    assert explicit.http_messages == 1_000


@pytest.mark.parametrize(
    ("name", "overrides"),
    [("nope", {}), ("quick", {"payload_size": 8}), ("quick", {"messages": 0}),
     ("quick", {"colour": 1})],
)  # fmt: skip
def test_bad_profiles_are_refused(name: str, overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        resolve_profile(name, overrides)


def _settings(argv: list[str], environ: dict[str, str]) -> object:
    parser = build_parser()
    return settings_from_args(parser.parse_args(argv), parser, environ)


def test_cli_overrides_reach_the_profile() -> None:
    s = _settings(
        ["--profile", "pr", "--messages", "1_000", "--payload-size", "64", "--concurrency", "3",
         "--batch-size", "10", "--max-in-flight", "9", "--nsqd-tcp", "h:1", "--nsqd-http", "h:2",
         "--scenarios", "tcp-pub,e2e"],
        {},
    )  # fmt: skip
    prof = s.profile  # type: ignore[attr-defined]
    assert (prof.name, prof.messages, prof.payload_size, prof.concurrency) == ("pr", 1000, 64, 3)
    assert (prof.batch_size, prof.max_in_flight) == (10, 9)
    assert s.scenarios == ["tcp-pub", "e2e"]  # type: ignore[attr-defined]


def test_addresses_come_from_flags_then_cluster_env_then_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "cluster.env"
    env_file.write_text(
        "NSQD_TCP_ADDRESSES=f:1,f:2\nNSQD_HTTP_ADDRESSES=f:3\nNSQLOOKUPD_HTTP_ADDRESSES=f:4\n"
    )
    parser = build_parser()
    args = parser.parse_args(["--cluster-env", str(env_file)])
    assert resolve_addresses(args, {}) == (["f:1", "f:2"], ["f:3"], ["f:4"])
    # an explicit file beats the environment (benchmark.sh points at its own cluster)
    assert resolve_addresses(args, {"NSQD_TCP_ADDRESSES": "e:1"})[0] == ["f:1", "f:2"]
    args = parser.parse_args(["--cluster-env", str(env_file), "--nsqd-tcp", "a:1,a:2"])
    assert resolve_addresses(args, {"NSQD_TCP_ADDRESSES": "e:1"})[0] == ["a:1", "a:2"]
    # the installed benchmark reads no file it was not given (it knows no checkout's layout)
    (tmp_path / "test_service" / ".run").mkdir(parents=True)
    (tmp_path / "test_service" / ".run" / "cluster.env").write_text(env_file.read_text())
    monkeypatch.chdir(tmp_path)
    args = parser.parse_args([])
    assert resolve_addresses(args, {"NSQD_TCP_ADDRESSES": "e:1"}) == (["e:1"], [], [])


def test_scenario_list_respects_fanout_and_processes(capsys: pytest.CaptureFixture[str]) -> None:
    s = _settings(["--nsqd-tcp", "h:1", "--nsqd-http", "h:2", "--fanout-channels", "3"], {})
    names = s.scenarios  # type: ignore[attr-defined]
    assert "fanout-3" in names and "fanout-100" not in names
    assert not [n for n in names if n.endswith("-procs")]  # the repository's, not installed
    with pytest.raises(SystemExit):
        cli.main(["--consumer-processes", "2", "--list"])
    assert "--consumer-processes" in capsys.readouterr().err
    assert repo_run.main(["--consumer-processes", "2", "--list"]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert listed[-2:] == [["e2e-procs", "e2e"], ["drain-procs", "drain"]]


@pytest.mark.parametrize(
    "argv",
    [
        ["--nsqd-tcp-address", "h:1"],  # half a cluster (none at all: nsqd on 127.0.0.1)
        ["--nsqd-tcp", "h:1", "--nsqd-http", "h:2", "--scenarios", "warp-drive"],
        ["--nsqd-tcp", "h:1", "--nsqd-http", "h:2", "--payload-size", "8"],
        ["--messages", "-3"],
        ["--profile", "huge"],
    ],
)
def test_usage_errors_exit_with_status_2(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no test_service/.run/cluster.env here
    for key in ("NSQD_TCP_ADDRESSES", "NSQD_HTTP_ADDRESSES", "NSQLOOKUPD_HTTP_ADDRESSES"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2


def test_list_needs_no_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("tcp-pub", "tcp-mpub", "e2e", "graceful-requeue", "drain-direct", "drain-iter",
                 "sync-pub", "sync-drain-run", "http-pub", "http-mpub", "fanout-20",
                 "fanout-100"):  # fmt: skip
        assert name in out


def test_namespace_type() -> None:
    assert isinstance(build_parser().parse_args(["--list"]), argparse.Namespace)


@pytest.mark.parametrize("command", ["compare", "soak"])
def test_repository_tools_are_not_installed_and_say_where_they_are(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([command, "--help"]) == 2
    err = capsys.readouterr().err
    assert "not part of the installed package" in err
    assert f"python -m benchmarks.{command}" in err


def test_source_revision_only_for_a_tracked_package(tmp_path: Path) -> None:
    """An installed copy inside some other git tree (a virtualenv in a project) is not that
    tree's commit; the package folder counts only when git tracks it."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True, timeout=10)
    (tmp_path / "README").write_text("x")
    subprocess.run([*git, "add", "README"], check=True, timeout=10)
    subprocess.run([*git, "commit", "-qm", "x"], check=True, timeout=10)
    package = tmp_path / "site-packages" / "nsqclient"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (tmp_path / ".gitignore").write_text("site-packages/\n")
    assert source_revision(package, root=tmp_path) is None
    (tmp_path / ".gitignore").unlink()
    subprocess.run([*git, "add", "site-packages"], check=True, timeout=10)
    subprocess.run([*git, "commit", "-qm", "y"], check=True, timeout=10)
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert source_revision(package, root=tmp_path) == head
    assert source_revision(package, root=tmp_path / "elsewhere") is None  # not the checkout's
    assert source_revision() is not None  # this checkout (an editable install)
