"""The benchmark's correctness logic against a real nsqd, with small counts (no timing asserts)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks import run as repo_run
from nsqclient.aio import Writer
from nsqclient.benchmark import __main__ as cli
from nsqclient.benchmark import runner
from nsqclient.benchmark.accounting import HEADER
from nsqclient.benchmark.nsqd_admin import NsqdAdmin
from nsqclient.benchmark.params import Params
from nsqclient.benchmark.scenarios import measure_drain
from nsqclient.testing.daemons import NsqdProcess

pytestmark = pytest.mark.timeout(60)


def _cluster_args(nsqd: NsqdProcess) -> list[str]:
    return ["--nsqd-tcp", nsqd.tcp_address, "--nsqd-http", nsqd.http_address]


def test_small_run_passes_writes_reports_and_exits_zero(
    nsqd: NsqdProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = (
        "tcp-pub,tcp-mpub,e2e,graceful-requeue,drain-direct,drain-iter,drain-queue,"
        "drain-queue-async,sync-pub,sync-pub-nowait,sync-drain-iter,sync-drain-run,http-mpub,"
        "fanout-3"
    )
    code = cli.main(
        [*_cluster_args(nsqd), "--messages", "120", "--batch-size", "25", "--max-in-flight", "32",
         "--concurrency", "8", "--threads", "3", "--fanout-channels", "3", "--timeout", "20",
         "--scenarios", scenarios, "--quiet",
         "--markdown", str(tmp_path / "r.md"), "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    failures = {r["scenario"]: r for r in report["results"] if r["errors"]}
    assert failures == {}
    assert code == 0
    assert report["ok"] is True
    rows = {r["scenario"]: r for r in report["results"]}
    assert set(rows) == set(scenarios.split(","))
    assert rows["fanout-3"]["messages"] == 360  # deliveries: 120 x 3 channels
    assert rows["graceful-requeue"]["extra"]["held_left_unanswered"] == 0
    assert rows["graceful-requeue"]["extra"]["first_reader_requeued"] >= 16
    assert rows["e2e"]["p99_ms"] is not None
    table = (tmp_path / "r.md").read_text()
    assert table == capsys.readouterr().out
    assert table.count("\n") == 2 + len(rows)
    # every topic was deleted afterwards
    assert not [t for t in nsqd.stats()["topics"] or [] if t["topic_name"].startswith("nsqbench")]


def test_a_measured_loss_makes_the_run_exit_non_zero(
    nsqd: NsqdProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_measure = runner._measure

    def lose_three(name: str, p: Params, s: runner.Settings) -> dict[str, Any]:
        result = real_measure(name, p, s)
        result["missing"] = 3
        return result

    monkeypatch.setattr(runner, "_measure", lose_three)
    code = cli.main(
        [*_cluster_args(nsqd), "--messages", "50", "--scenarios", "drain-direct", "--quiet",
         "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    assert code == 1
    row = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert row["missing"] == 3 and row["errors"] == 3


def _preload(nsqd: NsqdProcess, topic: str, seqs: list[int]) -> None:
    admin = NsqdAdmin([nsqd.http_address])
    admin.create(topic, ["bench"])

    async def publish() -> None:
        async with Writer([nsqd.tcp_address]) as w:
            await w.mpub(topic, [HEADER.pack(s, 0) + b"x" * 16 for s in seqs])

    asyncio.run(publish())
    admin.wait_depth(topic, "bench", len(seqs))
    admin.close()


def test_drain_detects_missing_messages_and_times_out(nsqd: NsqdProcess) -> None:
    _preload(nsqd, "lossy", [s for s in range(20) if s not in (4, 11)])
    p = Params(nsqd_tcp=[nsqd.tcp_address], topic="lossy", messages=20, max_in_flight=8,
               timeout=1.0)  # fmt: skip
    result = asyncio.run(measure_drain(p, "direct"))
    assert result["missing"] == 2
    assert result["timed_out"] is True
    assert result["duplicates"] == 0


def test_drain_detects_duplicates(nsqd: NsqdProcess) -> None:
    _preload(nsqd, "dups", [3, 3, *range(10)])
    p = Params(nsqd_tcp=[nsqd.tcp_address], topic="dups", messages=10, max_in_flight=1,
               timeout=10.0)  # fmt: skip
    result = asyncio.run(measure_drain(p, "iter"))
    assert result["missing"] == 0
    assert result["duplicates"] >= 1


def test_nsqd_check_reports_what_is_left(nsqd: NsqdProcess) -> None:
    _preload(nsqd, "left", list(range(5)))
    admin = NsqdAdmin([nsqd.http_address])
    problems = admin.check_consumed("left", "bench", messages=5)
    admin.close()
    assert problems == ["depth=5"]


def test_multiprocess_consumers_share_one_channel(nsqd: NsqdProcess, tmp_path: Path) -> None:
    """The repository's ``python -m benchmarks.run`` adds the multi-process scenarios."""
    code = repo_run.main(
        [*_cluster_args(nsqd), "--messages", "200", "--consumer-processes", "2", "--quiet",
         "--scenarios", "e2e-procs", "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    rows = report["results"]
    assert [r["errors"] for r in rows] == [0]
    assert code == 0
    assert report["machine"]["nsqclient_source"]  # this checkout's revision, recorded by it
    assert report["settings"]["consumer_processes"] == 2
    for row in rows:
        per_process = row["extra"]["per_process"]
        assert len(per_process) == 2
        assert sum(pp["messages"] for pp in per_process) == 200


def test_three_nsqd_with_readers_found_through_lookupd(nsq_cluster: Any, tmp_path: Path) -> None:
    """The cluster path: publishes spread over three nsqd, readers discover them via lookupd."""
    code = cli.main(
        ["--nsqd-tcp", ",".join(nsq_cluster.nsqd_tcp_addresses),
         "--nsqd-http", ",".join(nsq_cluster.nsqd_http_addresses),
         "--lookupd-http", nsq_cluster.lookupd.http_address, "--readers-via-lookupd",
         "--messages", "90", "--max-in-flight", "30", "--scenarios", "tcp-pub,e2e,drain-direct",
         "--quiet", "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [(r["scenario"], r["errors"]) for r in rows] == [
        ("tcp-pub", 0), ("e2e", 0), ("drain-direct", 0),
    ]  # fmt: skip
    assert code == 0


def test_otel_run_instruments_the_clients_and_stays_correct(
    nsqd: NsqdProcess, tmp_path: Path
) -> None:
    """``--otel traces``: the scenarios run instrumented (the cost is the CPU difference)."""
    from nsqclient.observability import is_instrumented, uninstrument

    try:
        code = cli.main(
            [*_cluster_args(nsqd), "--messages", "100", "--scenarios", "tcp-pub,drain-direct",
             "--quiet", "--otel", "traces", "--json", str(tmp_path / "r.json")]
        )  # fmt: skip
        assert is_instrumented()
    finally:
        uninstrument()
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 0 and report["ok"] is True
    assert report["settings"]["otel"] == "traces"


def test_loop_uvloop_runs_the_aio_and_sync_scenarios_on_uvloop(
    nsqd: NsqdProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--loop uvloop``: every measured loop (asyncio scenarios, the sync loop thread) is one."""
    import uvloop

    from nsqclient.sync import portal

    made: list[type] = []
    real_factory = portal.loop_factory

    def recording_factory(name: str | None = None) -> Any:
        make = real_factory(name)

        def new_loop() -> asyncio.AbstractEventLoop:
            loop = make()
            made.append(type(loop))
            return loop

        return new_loop

    monkeypatch.setattr(portal, "loop_factory", recording_factory)
    monkeypatch.setattr(runner, "loop_factory", recording_factory)
    monkeypatch.delenv(portal.LOOP_ENV, raising=False)
    code = cli.main(
        [*_cluster_args(nsqd), "--messages", "100", "--concurrency", "8", "--threads", "3",
         "--scenarios", "tcp-pub,sync-pub,drain-direct", "--loop", "uvloop", "--quiet",
         "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 0 and report["ok"] is True
    assert report["settings"]["loop"] == "uvloop"
    assert len(made) >= 3 and set(made) == {uvloop.Loop}  # 2 asyncio scenarios + 1 loop thread
    assert portal.LOOP_ENV not in os.environ  # restored after the run


def test_an_unknown_loop_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--nsqd-tcp", "x:1", "--nsqd-http", "x:2", "--loop", "trio"])
    assert exc.value.code == 2
    assert "--loop: invalid choice: 'trio'" in capsys.readouterr().err
