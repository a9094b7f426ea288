"""``nsqclient.testing``'s two backends behind one surface: exports, backend choice, and
``freeze()``/``thaw()`` (SIGSTOP for real nsqd, a parked loop thread for the embedded one), which
must look the same from the wire: connections accepted, nothing answered, no heartbeats."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import nsqclient.testing
from nsqclient.protocol import HEARTBEAT, IdentifyOptions, Response, commands
from nsqclient.testing import backends
from nsqclient.testing.daemons import NsqDaemonError
from tests.rawconn_support import RawConnection

pytestmark = pytest.mark.timeout(60)

HEARTBEAT_MS = 1000  # nsqd's minimum


@pytest.fixture(params=backends.BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(backend: str) -> Iterator[Any]:
    nsqd = backends.start_nsqd(backend)
    try:
        yield nsqd
    finally:
        nsqd.stop()


def identified(nsqd: Any, heartbeat_ms: int = HEARTBEAT_MS) -> RawConnection:
    conn = RawConnection.open(nsqd.tcp_address)
    try:
        conn.handshake(IdentifyOptions(heartbeat_interval=heartbeat_ms))
    except BaseException:
        conn.close()
        raise
    return conn


def is_ok(event: object) -> bool:
    return isinstance(event, Response) and event.data == b"OK"


def test_exports() -> None:
    for name in nsqclient.testing.__all__:
        assert getattr(nsqclient.testing, name) is not None, name
    from nsqclient.testing import EmbeddedNsqd, NsqdProcess, ThreadedEmbeddedCluster

    assert EmbeddedNsqd.__module__ == "nsqclient.testing.embedded.nsqd"
    assert NsqdProcess.__module__ == "nsqclient.testing.daemons"
    assert ThreadedEmbeddedCluster.__module__ == "nsqclient.testing.embedded.threaded"
    with pytest.raises(AttributeError):
        nsqclient.testing.NoSuchThing  # noqa: B018


def test_resolve_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backends.BACKEND_ENV, raising=False)
    assert backends.resolve_backend("embedded") == "embedded"
    assert backends.resolve_backend("REAL") == "real"
    assert backends.resolve_backend("auto") == "real"  # this repository has the binaries
    monkeypatch.setenv(backends.BACKEND_ENV, "embedded")
    assert backends.resolve_backend(None) == "embedded"
    assert backends.resolve_backend("real") == "real"  # an explicit choice wins
    with pytest.raises(ValueError, match="unknown NSQ backend"):
        backends.resolve_backend("docker")


def test_both_backends_offer_the_same_surface(server: Any) -> None:
    assert isinstance(server, backends.NsqdServer)
    server.pub("t", b"x")
    assert server.stats(topic="t")["topics"][0]["message_count"] == 1


def test_frozen_nsqd_accepts_but_answers_nothing_until_thawed(server: Any) -> None:
    with identified(server, heartbeat_ms=2000) as conn:
        conn.read_until(lambda e: e is HEARTBEAT)  # heartbeats flow before the freeze
        # nsqd re-arms its read deadline (2 heartbeats) as it starts reading each command. A NOP
        # has no reply, so a freeze could land before nsqd read it and leave the deadline armed
        # at IDENTIFY's time, already past at the thaw; a PUB's OK proves the read (and re-arm)
        # happened.
        conn.send(commands.pub("t", b"before the freeze"))
        conn.read_until(is_ok)
        server.freeze()
        assert server.frozen
        conn.send(commands.pub("t", b"while frozen"))
        with socket.create_connection(("127.0.0.1", server.tcp_port), timeout=5):
            pass  # the kernel still completes the TCP handshake
        # No OK, and no heartbeat although one was due. Thawed well before the read deadline:
        # had it passed while frozen, nsqd might drop the connection instead of reading.
        conn.expect_silence(1.25 * 2.0)
        server.thaw()
        assert not server.frozen
        conn.read_until(is_ok)  # the buffered PUB is answered at last
    assert server.stats(topic="t")["topics"][0]["message_count"] == 2


def test_stop_and_restart_thaw_a_frozen_nsqd(backend: str) -> None:
    nsqd = backends.start_nsqd(backend)
    try:
        nsqd.freeze()
        nsqd.restart()
        assert nsqd.running and not nsqd.frozen
        nsqd.pub("t", b"after restart")
        nsqd.freeze()
        nsqd.stop()
        assert not nsqd.running and not nsqd.frozen
    finally:
        nsqd.stop()


def test_kill_while_frozen_answers_nothing_buffered(backend: str) -> None:
    nsqd = backends.start_nsqd(backend)
    try:
        with identified(nsqd) as conn:
            nsqd.freeze()
            conn.send(commands.pub("t", b"never acknowledged"))
            nsqd.kill()
            seen = conn.expect_closed()  # reset by the kernel: nothing was read
            assert not any(is_ok(e) for e in seen), seen
    finally:
        nsqd.stop()
    assert not nsqd.running


def test_freeze_needs_a_running_server(backend: str) -> None:
    nsqd = backends.start_nsqd(backend)
    nsqd.stop()
    with pytest.raises(NsqDaemonError, match="not running"):
        nsqd.freeze()
    nsqd.thaw()  # harmless


def test_frozen_lookupd(backend: str) -> None:
    lookupd = backends.start_lookupd(backend)
    try:
        lookupd.freeze()
        # HTTP goes unanswered, as from a stopped process
        with pytest.raises((OSError, httpx.TimeoutException)):
            lookupd.http_get_json("/ping", timeout=1.0)  # type: ignore[attr-defined]
        lookupd.thaw()
        assert lookupd.nodes() == []
    finally:
        lookupd.stop()
