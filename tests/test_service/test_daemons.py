"""The process library (nsqclient.testing.daemons) and the fixtures built on it, on real daemons."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsqclient.testing import _process
from nsqclient.testing.daemons import (
    NsqBinaryNotFound,
    NsqCluster,
    NsqDaemonError,
    NsqdProcess,
    NsqlookupdProcess,
    find_nsq_binary,
    free_port,
    http_request,
)

pytestmark = pytest.mark.timeout(60)


def pid_gone(pid: int) -> bool:
    """The process no longer exists (or is a zombie waiting for a parent we do not own)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def refuses(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def ping(address: str) -> int:
    status, _ = http_request(address, "GET", "/ping")
    return status


def test_nsqd_fixture_runs_and_stop_leaves_nothing(nsqd: NsqdProcess) -> None:
    pid = nsqd.pid
    assert pid is not None
    assert ping(nsqd.http_address) == 200
    assert nsqd.http_get_json("/info")["tcp_port"] == nsqd.tcp_port
    data_dir = nsqd.data_dir
    assert data_dir.is_dir()

    nsqd.stop()

    assert not nsqd.running and nsqd.pid is None
    assert pid_gone(pid)
    assert refuses(nsqd.tcp_address) and refuses(nsqd.http_address)
    assert not data_dir.exists()
    assert "nsqd v1.3.0" in nsqd.logs()  # logs outlive the temporary folder
    nsqd.stop()  # idempotent


def test_stop_is_safe_in_every_state() -> None:
    never_started = NsqdProcess()
    never_started.stop()
    never_started.stop()

    killed = NsqlookupdProcess()
    killed.start()
    pid = killed.pid
    assert pid is not None
    killed.kill()
    assert pid_gone(pid) and not killed.running
    killed.stop()
    killed.kill()

    with NsqlookupdProcess() as lookupd:
        pid = lookupd.pid
        assert pid is not None and ping(lookupd.http_address) == 200
    assert pid_gone(pid)


def test_start_is_a_no_op_while_running(nsqd: NsqdProcess) -> None:
    pid = nsqd.pid
    nsqd.start()
    assert nsqd.pid == pid


def test_restart_keeps_ports_and_data(nsqd: NsqdProcess) -> None:
    ports = (nsqd.tcp_port, nsqd.http_port, nsqd.https_port)
    old_pid = nsqd.pid
    nsqd.pub("kept", b"survives a graceful restart")

    nsqd.restart()

    assert (nsqd.tcp_port, nsqd.http_port, nsqd.https_port) == ports
    assert nsqd.pid is not None and nsqd.pid != old_pid
    (topic,) = nsqd.stats(topic="kept")["topics"]
    assert topic["depth"] == 1  # nsqd wrote its memory queue to the data folder on SIGTERM


def test_kill_then_restart_on_the_same_ports(nsqd: NsqdProcess) -> None:
    old_pid = nsqd.pid
    assert old_pid is not None
    nsqd.kill()
    assert pid_gone(old_pid)
    assert refuses(nsqd.tcp_address)

    nsqd.restart()

    assert nsqd.running and nsqd.pid != old_pid
    assert ping(nsqd.http_address) == 200
    assert nsqd.logs().count("nsqclient.testing: starting") == 2


def test_a_taken_port_is_retried_with_new_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    # free_port() can race with other processes; the daemon must notice the bind error and retry.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        real_free_port = _process.free_port
        handed_out: list[int] = []

        def first_one_taken() -> int:
            port = taken if not handed_out else real_free_port()
            handed_out.append(port)
            return port

        monkeypatch.setattr(_process, "free_port", first_one_taken)
        nsqd = NsqdProcess()
        try:
            assert nsqd.tcp_port == taken
            nsqd.start()
            assert nsqd.running and nsqd.tcp_port != taken
            assert "address already in use" in nsqd.logs()
        finally:
            nsqd.stop()


def test_pinned_ports_are_not_replaced() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        nsqd = NsqdProcess(tcp_port=taken)
        try:
            with pytest.raises(NsqDaemonError, match="could not bind"):
                nsqd.start(timeout=10)
            assert not nsqd.running
        finally:
            nsqd.stop()


def test_start_failure_carries_the_log() -> None:
    nsqd = NsqdProcess(extra_args=["--no-such-flag"])
    try:
        with pytest.raises(NsqDaemonError, match="no-such-flag"):
            nsqd.start()
        assert not nsqd.running
    finally:
        nsqd.stop()


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = [free_port() for _ in range(40)]
    assert len(set(ports)) == len(ports)
    for port in ports[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_nsqd_registers_with_nsqlookupd(
    nsqlookupd: NsqlookupdProcess, nsqd_factory: Callable[..., NsqdProcess]
) -> None:
    nsqd = nsqd_factory(lookupd_tcp_addresses=[nsqlookupd.tcp_address])
    nsqlookupd.wait_for_nodes([nsqd.tcp_address])
    (node,) = nsqlookupd.nodes()
    assert node["broadcast_address"] == "127.0.0.1"
    assert (node["tcp_port"], node["http_port"]) == (nsqd.tcp_port, nsqd.http_port)


def test_nsq_cluster_fixture(nsq_cluster: NsqCluster) -> None:
    lookupd, nsqds = nsq_cluster.lookupd, nsq_cluster.nsqds
    assert len(nsqds) == 3
    assert len({n.tcp_port for n in nsqds} | {n.http_port for n in nsqds}) == 6
    listed = {f"{n['broadcast_address']}:{n['tcp_port']}" for n in lookupd.nodes()}
    assert listed == set(nsq_cluster.nsqd_tcp_addresses)

    nsqds[1].pub("clustered", b"x")
    producers = lookupd.wait_for_topic("clustered", [nsqds[1].tcp_address])
    assert [p["tcp_port"] for p in producers] == [nsqds[1].tcp_port]


def test_cluster_stop_leaves_no_process() -> None:
    cluster = NsqCluster(nsqd_count=2)
    with cluster:
        pids = [d.pid for d in cluster.daemons]
    assert all(pid is not None and pid_gone(pid) for pid in pids)


def test_tls_required_nsqd_is_started_and_served_over_https(
    nsqd_tls_required: NsqdProcess,
) -> None:
    status, body = http_request(nsqd_tls_required.http_address, "GET", "/ping")
    assert status == 403 and b"TLS_REQUIRED" in body
    assert nsqd_tls_required.stats()["health"] == "OK"  # the helpers switch to HTTPS


@pytest.fixture
def no_binaries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("NSQ_BIN_DIR", str(empty))
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.chdir(tmp_path)
    yield empty


def test_the_installed_kit_never_searches_the_working_folder_for_a_checkout(
    no_binaries: Path, tmp_path: Path
) -> None:
    """Only $NSQ_BIN_DIR and PATH: a checkout's test_service/.bin is the checkout's own business
    (tests/conftest.py and benchmarks/ point $NSQ_BIN_DIR at it)."""
    (tmp_path / "test_service" / ".bin").mkdir(parents=True)
    (tmp_path / "test_service" / ".bin" / "nsqd").symlink_to("/bin/true")  # an executable
    (tmp_path / "test_service" / "build_nsq.sh").touch()
    with pytest.raises(NsqBinaryNotFound) as info:
        find_nsq_binary("nsqd")
    assert "test_service" not in str(info.value)
    with pytest.raises(NsqBinaryNotFound):
        NsqdProcess()


def test_missing_binary_tells_an_installed_user_what_to_install_or_set(
    no_binaries: Path,
) -> None:
    """The wheel has no test_service/: the message must not send its users there."""
    with pytest.raises(NsqBinaryNotFound) as info:
        find_nsq_binary("nsqd")
    message = str(info.value)
    assert "build_nsq.sh" not in message
    for hint in ("nsqd and nsqlookupd v1.3.0", _process.NSQ_RELEASES, "PATH", "NSQ_BIN_DIR"):
        assert hint in message
    assert "--nsq-backend=embedded" in message and "NSQCLIENT_BACKEND=embedded" in message


def test_nsq_bin_dir_comes_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = find_nsq_binary("nsqlookupd")
    (tmp_path / "nsqlookupd").symlink_to(real)
    monkeypatch.setenv("NSQ_BIN_DIR", str(tmp_path))
    assert find_nsq_binary("nsqlookupd") == tmp_path / "nsqlookupd"
    with NsqlookupdProcess() as lookupd:
        assert lookupd.args[0] == str(tmp_path / "nsqlookupd")
        assert os.path.samefile(f"/proc/{lookupd.pid}/exe", real)
