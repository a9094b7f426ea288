"""test_service/*.sh: build_nsq.sh's fast path, and start.sh / stop.sh on free ports."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from nsqclient.testing.daemons import free_port, http_request

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "test_service"


def run(script: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env={**os.environ, **env},
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
def test_build_script_fast_path_prints_the_binaries(tmp_path: Path) -> None:
    """Current binaries: exit at once, no Go. Checked on a copy of the script with a stamp that
    matches the pinned sources, so neither this checkout's build nor an NSQ_BIN_DIR in our
    environment (which would skip the fast path) decides the outcome."""
    copy = tmp_path / "test_service"
    (copy / "nsqbuild").mkdir(parents=True)
    shutil.copy2(SCRIPTS / "build_nsq.sh", copy)
    pinned = b""
    for name in ("go.mod", "go.sum", "tools.go"):
        shutil.copy2(SCRIPTS / "nsqbuild" / name, copy / "nsqbuild")
        pinned += (SCRIPTS / "nsqbuild" / name).read_bytes()
    version = next(
        line.split()[2]
        for line in (SCRIPTS / "nsqbuild" / "go.mod").read_text().splitlines()
        if line.split()[:2] == ["require", "github.com/nsqio/nsq"]
    )
    apps = re.search(r"^apps=\(([^)]*)\)", (SCRIPTS / "build_nsq.sh").read_text(), re.M)
    assert apps is not None
    assert {"nsqd", "nsqlookupd", "nsq_tail", "to_nsq"} <= set(apps[1].split())  # tests/cli
    bin_dir = copy / ".bin"
    bin_dir.mkdir()
    for app in [*apps[1].split(), "go-nsq.test"]:  # go-nsq's compiled suite too
        (bin_dir / app).write_text("#!/bin/sh\n")
        (bin_dir / app).chmod(0o755)
    (bin_dir / "go-nsq" / "test").mkdir(parents=True)
    (bin_dir / "go-nsq" / "test" / "server.pem").write_text("")
    (bin_dir / ".stamp").write_text(f"nsq {version}\n{hashlib.sha256(pinned).hexdigest()}\n")
    result = subprocess.run(
        ["bash", str(copy / "build_nsq.sh")],
        env={k: v for k, v in os.environ.items() if k != "NSQ_BIN_DIR"} | {"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(bin_dir)
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
