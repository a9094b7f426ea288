"""The benchmark's correctness logic against a real nsqd, with small counts (no timing asserts)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from nsqclient.aio import Writer
from nsqclient.benchmark import __main__ as cli
from nsqclient.benchmark import runner
from nsqclient.benchmark.compare import CompareSettings, run_compare
from nsqclient.benchmark.drivers._common import HEADER
from nsqclient.benchmark.nsqd_admin import NsqdAdmin
from nsqclient.benchmark.params import Params
from nsqclient.benchmark.scenarios import measure_drain
from nsqclient.testing.daemons import NsqdProcess

FAKE_DRIVER = Path(__file__).with_name("fake_driver.py")

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
    code = cli.main(
        [*_cluster_args(nsqd), "--messages", "200", "--consumer-processes", "2", "--quiet",
         "--scenarios", "e2e-procs", "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [r["errors"] for r in rows] == [0]
    assert code == 0
    for row in rows:
        per_process = row["extra"]["per_process"]
        assert len(per_process) == 2
        assert sum(pp["messages"] for pp in per_process) == 200


def _compare(tmp_path: Path, **changes: Any) -> Any:
    settings = CompareSettings(
        clients=["fake", "ghost", "nsqclient-aio"],
        scenarios=["pub", "drain"],
        messages=60,
        payload_size=32,
        concurrency=8,
        batch_size=20,
        max_in_flight=16,
        repeats=3,
        timeout=20,
        peers_dir=tmp_path / "no-peers",
        custom_drivers={"fake": f"{sys.executable} {FAKE_DRIVER} --behaviour good"},
    )
    for key, value in changes.items():
        setattr(settings, key, value)
    return {(p.scenario, p.client): p for p in run_compare(settings)}


def test_compare_marks_na_computes_medians_and_checks_runs(tmp_path: Path) -> None:
    pairs = _compare(tmp_path, clients=["fake", "asyncnsq"], repeats=3)
    fake_pub = pairs[("pub", "fake")]
    assert fake_pub.status == "ok" and fake_pub.errors == 0
    # the fake reports 1, 2 and 3 seconds for its three repeats: 60, 30, 20 msg/s
    assert fake_pub.summary["msg_s"] == pytest.approx(30.0)
    assert (fake_pub.summary["msg_s_min"], fake_pub.summary["msg_s_max"]) == (
        pytest.approx(20.0), pytest.approx(60.0),
    )  # fmt: skip
    assert fake_pub.summary["p50"] == pytest.approx(2.0)
    assert fake_pub.version == "9.9"
    assert pairs[("drain", "fake")].status == "n/a"
    assert pairs[("drain", "fake")].reason == "fake has no consumer"
    for scenario in ("pub", "drain"):
        missing = pairs[(scenario, "asyncnsq")]
        assert missing.status == "n/a" and "not installed" in missing.reason
        assert missing.errors == 0


def test_compare_catches_a_lying_driver_and_a_crashing_one(tmp_path: Path) -> None:
    pairs = _compare(
        tmp_path,
        clients=["liar", "crash"],
        scenarios=["pub"],
        repeats=1,
        custom_drivers={
            "liar": f"{sys.executable} {FAKE_DRIVER} --behaviour lossy",
            "crash": f"{sys.executable} {FAKE_DRIVER} --behaviour crash",
        },
    )
    liar = pairs[("pub", "liar")]
    assert liar.runs[0]["missing"] == 3  # the harness drained 57 of 60 sequence ids
    assert liar.runs[0]["server_problems"] == ["message_count=57 (expected 60)"]
    assert liar.errors == 4
    crash = pairs[("pub", "crash")]
    assert crash.status == "failed" and crash.errors >= 1
    assert "no result line" in crash.reason


def test_compare_runs_our_own_driver_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["compare", "--clients", "nsqclient-aio,nsqclient-sync", "--scenarios", "e2e,drain",
         "--repeats", "1", "--messages", "100", "--e2e-messages", "100", "--max-in-flight", "16",
         "--concurrency", "8", "--quiet", "--json", str(tmp_path / "c.json")]
    )  # fmt: skip
    data = json.loads((tmp_path / "c.json").read_text())
    bad = [(p["scenario"], p["client"], p["reason"]) for p in data["pairs"] if p["errors"]]
    assert bad == []
    assert code == 0
    assert {(p["scenario"], p["client"]) for p in data["pairs"]} == {
        ("e2e", "nsqclient-aio"), ("e2e", "nsqclient-sync"),
        ("drain", "nsqclient-aio"), ("drain", "nsqclient-sync"),
    }  # fmt: skip
    assert "msg/s median (min-max)" in capsys.readouterr().out


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
