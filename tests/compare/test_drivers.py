"""The drivers' shared module under a python without nsqclient, as in a peer's virtualenv: it
loads the installed accounting module from the file the harness names, never a copy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.compare import harness
from benchmarks.compare.drivers import _common
from nsqclient.benchmark import accounting

DRIVERS = Path(_common.__file__).resolve().parent

pytestmark = pytest.mark.timeout(30)

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import _common
tracker = _common.SequenceTracker(2)
make = _common.body_factory(32)
tracker.record(make(1)); tracker.record(make(1)); done = tracker.record(make(0))
print(json.dumps({
    "nsqclient_imported": any(m.split(".")[0] == "nsqclient" for m in sys.modules),
    "accounting_file": sys.modules[_common.SequenceTracker.__module__].__file__,
    "done": done, "duplicates": tracker.duplicates, "header_size": _common.HEADER_SIZE,
}))
"""


def _peer_probe(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # -I -S, run outside the checkout: no site-packages, no PYTHONPATH, no current folder, so
    # nsqclient cannot be imported (as in a peer's virtualenv)
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, str(DRIVERS)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
        check=False,
    )


def test_peer_side_loads_the_installed_accounting_the_harness_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what the harness gives a peer's driver (a fake virtualenv python: the path is what counts)
    (tmp_path / "pynsq" / "bin").mkdir(parents=True)
    (tmp_path / "pynsq" / "bin" / "python").touch()
    spec = harness.resolve_client("pynsq", peers_dir=tmp_path, gobench=tmp_path, custom={})
    assert spec.env == {_common.ACCOUNTING_ENV: str(Path(accounting.__file__).resolve())}
    result = _peer_probe(tmp_path, spec.env)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["nsqclient_imported"] is False
    assert Path(seen["accounting_file"]).resolve() == Path(accounting.__file__).resolve()
    assert seen["done"] is True and seen["duplicates"] == 1 and seen["header_size"] == 16


def test_peer_side_without_the_harness_says_what_to_set(tmp_path: Path) -> None:
    result = _peer_probe(tmp_path, {})
    assert result.returncode != 0
    assert _common.ACCOUNTING_ENV in result.stderr and "benchmarks.compare" in result.stderr


def test_harness_side_uses_the_installed_module() -> None:
    assert _common.SequenceTracker is accounting.SequenceTracker
    assert _common.latency_summary is accounting.latency_summary


def test_a_run_reports_its_kernel_cpu_as_part_of_its_cpu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def scenario(_args: object) -> dict[str, object]:
        # system time: many small writes, each a syscall
        with open(tmp_path / "f", "wb", buffering=0) as f:
            for _ in range(50_000):
                f.write(b"x")
        return {"duration_s": 0.1, "received": 1}

    argv = ["run", "--scenario", "pub", "--nsqd-tcp", "127.0.0.1:1", "--topic", "t"]
    assert _common.driver_main(client="c", version="1", scenarios={"pub": scenario}, argv=argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["status"] == "ok"
    assert 0 < result["cpu_sys_s"] <= result["cpu_s"]
