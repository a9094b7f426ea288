"""The comparison harness against real nsqd, with a fake peer driver and nsqclient's own driver
(small counts, no timing asserts): n/a pairs, medians, and every run checked independently."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.compare.cli import main as compare_main
from benchmarks.compare.harness import CompareSettings, run_compare

FAKE_DRIVER = Path(__file__).with_name("fake_driver.py")

pytestmark = pytest.mark.timeout(60)


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
    code = compare_main(
        ["--clients", "nsqclient-aio,nsqclient-sync", "--scenarios", "e2e,drain",
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
