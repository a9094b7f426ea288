"""test_service/*.sh: build_nsq.sh's fast path, and start.sh / stop.sh on free ports."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from nsqclient.testing.daemons import free_port, http_request

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "test_service"


def run(
    script: str, env: Mapping[str, str | None], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a script with ``env`` over ours (a None value removes that variable)."""
    merged = {**os.environ, **env}
    return subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env={key: value for key, value in merged.items() if value is not None},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def pid_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"  # a zombie is gone, just not yet reaped


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


def cluster_env(tmp_path: Path) -> tuple[dict[str, str], list[int]]:
    """Environment for start.sh/stop.sh: a private run folder and free ports for everything."""
    env = {"NSQ_RUN_DIR": str(tmp_path / "run")}
    ports = []
    for name in ("NSQLOOKUPD_TCP_PORT", "NSQLOOKUPD_HTTP_PORT"):
        ports.append(free_port())
        env[name] = str(ports[-1])
    for i in (1, 2, 3):
        for kind in ("TCP", "HTTP", "HTTPS"):
            ports.append(free_port())
            env[f"NSQD{i}_{kind}_PORT"] = str(ports[-1])
    return env, ports


def read_env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line)
    return {key: value for key, value in pairs}


def recorded_pids(run_dir: Path) -> dict[str, int]:
    return {p.parent.name: int(p.read_text()) for p in run_dir.glob("*/pid")}


@pytest.mark.timeout(30)
def test_build_script_fast_path_prints_the_binaries() -> None:
    # the repository's own build (a prebuilt NSQ_BIN_DIR in our environment would skip it)
    result = run("build_nsq.sh", {"NSQ_BIN_DIR": None}, timeout=20)
    assert result.returncode == 0, result.stderr
    bin_dir = Path(result.stdout.strip().splitlines()[-1])
    assert (bin_dir / "nsqd").is_file() and (bin_dir / "nsqlookupd").is_file()
    assert (bin_dir / "nsq_tail").is_file() and (bin_dir / "to_nsq").is_file()  # tests/cli
    assert "up to date" in result.stderr


@pytest.mark.timeout(30)
def test_build_script_uses_nsq_bin_dir(tmp_path: Path) -> None:
    real = Path(run("build_nsq.sh", {}).stdout.strip().splitlines()[-1])
    for name in ("nsqd", "nsqlookupd"):
        (tmp_path / name).symlink_to(real / name)
    result = run("build_nsq.sh", {"NSQ_BIN_DIR": str(tmp_path)})
    assert result.returncode == 0 and result.stdout.strip() == str(tmp_path)

    result = run("build_nsq.sh", {"NSQ_BIN_DIR": str(tmp_path / "missing")})
    assert result.returncode != 0 and "NSQ_BIN_DIR" in result.stderr


@pytest.mark.timeout(180)
def test_start_and_stop_twice_leave_nothing_behind(tmp_path: Path) -> None:
    env, ports = cluster_env(tmp_path)
    run_dir = Path(env["NSQ_RUN_DIR"])

    first = run("start.sh", env)
    assert first.returncode == 0, first.stdout + first.stderr
    pids = recorded_pids(run_dir)
    assert sorted(pids) == ["nsqd1", "nsqd2", "nsqd3", "nsqlookupd"]
    cluster = read_env_file(run_dir / "cluster.env")
    tcp = [f"127.0.0.1:{env[f'NSQD{i}_TCP_PORT']}" for i in (1, 2, 3)]
    http = [f"127.0.0.1:{env[f'NSQD{i}_HTTP_PORT']}" for i in (1, 2, 3)]
    assert cluster["NSQD_TCP_ADDRESSES"] == ",".join(tcp)
    assert cluster["NSQD_HTTP_ADDRESSES"] == ",".join(http)
    assert cluster["NSQLOOKUPD_TCP_ADDRESSES"] == f"127.0.0.1:{env['NSQLOOKUPD_TCP_PORT']}"
    lookupd_http = f"127.0.0.1:{env['NSQLOOKUPD_HTTP_PORT']}"
    assert cluster["NSQLOOKUPD_HTTP_ADDRESSES"] == lookupd_http
    for address in [*http, lookupd_http]:
        assert http_request(address, "GET", "/ping")[0] == 200

    second = run("start.sh", env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already running" in second.stderr
    assert recorded_pids(run_dir) == pids  # still one cluster

    stopped = run("stop.sh", env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert all(pid_gone(pid) for pid in pids.values())
    assert not any(listening(port) for port in ports)
    assert not run_dir.exists()

    again = run("stop.sh", env)
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.timeout(120)
def test_start_failure_stops_what_it_started(tmp_path: Path) -> None:
    env, ports = cluster_env(tmp_path)
    taken = int(env["NSQD2_TCP_PORT"])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        result = run("start.sh", {**env, "NSQ_START_TIMEOUT": "30"})
    assert result.returncode != 0
    assert "address already in use" in result.stderr  # the failing daemon's log is shown
    assert not Path(env["NSQ_RUN_DIR"]).exists()
    assert not any(listening(port) for port in ports if port != taken)


@pytest.mark.timeout(30)
def test_stop_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    result = run("stop.sh", {"NSQ_RUN_DIR": str(tmp_path)})
    assert result.returncode != 0 and "not made by start.sh" in result.stderr
    assert (tmp_path / "precious.txt").exists()
