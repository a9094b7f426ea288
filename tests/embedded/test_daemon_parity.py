"""The daemons as another project's script sees them: the same launch line for real nsqd /
nsqlookupd 1.3.0 and for the embedded ones behind the PATH shims (issue 31).

Each test runs against both (``backend``) and checks what such a script can observe: the
``--config`` file, the listeners, what lookupd hands out, the log on stderr, the exit code and
message of a bad flag, the TLS alert of a refused handshake, and when a timed-out or deferred
message comes back (nsqd's queue scan).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import ssl
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import free_port
from nsqclient.testing.embedded.listen import backlog, listen_socket
from tests.rawconn_support import RawClient, sized
from tests.support import wait_until

from .cli_support import Launcher

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def launch(backend: str, tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(backend, tmp_path)
    yield launcher
    launcher.close()


def _get(address: str, path: str) -> object:
    response = httpx.get(f"http://{address}{path}", timeout=5)
    assert response.status_code == 200, response.text
    return response.json()


def test_config_file_with_flags_over_it(launch: Launcher, tmp_path: Path) -> None:
    tcp, http = free_port(), free_port()
    config = tmp_path / "nsqd.toml"
    config.write_text(
        f'http_address = "127.0.0.1:{http}"\nmsg_timeout = "2s"\nmax_req_timeout = 90000\n'
        "mem_queue_size = 50\nnsqlookupd_tcp_addresses = []\nno_such_key = 1\n"
    )
    nsqd = launch(
        "nsqd", f"--config={config}", f"--tcp-address=127.0.0.1:{tcp}", "--mem-queue-size=5"
    )
    nsqd.wait_http(f"127.0.0.1:{http}")  # the file moved the HTTP listener
    address = f"127.0.0.1:{http}"
    assert _get(address, "/config/msg_timeout") == 2_000_000_000
    assert _get(address, "/config/max_req_timeout") == 90_000_000_000  # an integer is ms
    assert _get(address, "/config/mem_queue_size") == 5  # the command line wins
    tcp_address = httpx.get(f"http://{address}/config/tcp_address", timeout=5).text
    assert tcp_address == f"127.0.0.1:{tcp}"  # nsqd sends a string option unquoted
    assert nsqd.stop() == 0
    if launch.backend == "embedded":  # real nsqd ignores unknown keys silently; we name them
        assert "unknown keys ignored: no_such_key" in nsqd.stderr()

    lookupd_http = free_port()
    config.write_text(
        f'tcp_address = "127.0.0.1:{free_port()}"\nhttp_address = "127.0.0.1:{lookupd_http}"\n'
    )
    lookupd = launch("nsqlookupd", f"--config={config}")
    lookupd.wait_http(f"127.0.0.1:{lookupd_http}")
    assert lookupd.stop() == 0

    config.write_text('log_level = "loud"\n')
    result = launch.run("nsqd", f"--config={config}")
    assert result.returncode == 1
    assert re.search(r"^\[nsqd\] .* FATAL: failed parsing log_level loud", result.stderr)
    result = launch.run("nsqd", f"--config={tmp_path / 'missing.toml'}")
    assert result.returncode == 1 and "FATAL: failed to load config file" in result.stderr


def test_listeners_dual_stack_like_go(launch: Launcher, tmp_path: Path) -> None:
    tcp, http, lookupd_tcp, lookupd_http = (free_port() for _ in range(4))
    lookupd = launch(
        "nsqlookupd", f"--tcp-address=:{lookupd_tcp}", f"--http-address=0.0.0.0:{lookupd_http}"
    )
    nsqd = launch(
        "nsqd",
        f"--tcp-address=:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        f"--data-path={tmp_path}",
    )
    lookupd.wait_http(f"[::1]:{lookupd_http}")  # IPv6 to 0.0.0.0: Go listens on both
    nsqd.wait_http(f"127.0.0.1:{http}")
    with socket.create_connection(("::1", tcp), timeout=5) as sock:  # IPv6 to ":PORT"
        sock.sendall(b"  V2NOP\n")
    with pytest.raises(httpx.ConnectError):  # an explicit IPv4 address stays IPv4 only
        httpx.get(f"http://[::1]:{http}/ping", timeout=5)
    assert nsqd.stop() == 0 and lookupd.stop() == 0
    assert f"TCP: listening on [::]:{tcp}" in nsqd.stderr()
    assert f"HTTP: listening on 127.0.0.1:{http}" in nsqd.stderr()
    assert f"HTTP: listening on [::]:{lookupd_http}" in lookupd.stderr()


def test_listen_backlog_is_somaxconn() -> None:
    with open("/proc/sys/net/core/somaxconn", encoding="ascii") as f:
        assert backlog() == min(int(f.read()), 65535)  # Go's maxListenerBacklog
    sock = listen_socket("", 0)
    try:
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
    finally:
        sock.close()


def test_accepted_connections_have_nagle_off_like_go() -> None:
    """Go sets TCP_NODELAY on every TCP connection; the embedded server's sockets name their
    protocol so that asyncio does too. Without it a reply nsqd writes in two pieces (a snappy
    chunk's header and body, a deflate block and its flush marker) waited for the client's
    delayed ACK: 40 ms for each publish on a compressed connection."""
    from nsqclient.testing.embedded import ThreadedEmbeddedNsqd

    with (
        ThreadedEmbeddedNsqd() as nsqd,
        socket.create_connection(("127.0.0.1", nsqd.tcp_port)) as client,
    ):
        client.sendall(b"  V2")

        async def nodelay() -> list[int]:
            return [
                c.transport.get_extra_info("socket").getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY
                )
                for c in nsqd.server.conns
            ]

        wait_until(lambda: nsqd.run(nodelay()), what="the connection accepted")
        assert nsqd.run(nodelay()) == [1]


def test_broadcast_ports_registered(launch: Launcher, tmp_path: Path) -> None:
    lookupd_tcp, lookupd_http, tcp, http = (free_port() for _ in range(4))
    lookupd = launch(
        "nsqlookupd",
        f"--tcp-address=127.0.0.1:{lookupd_tcp}",
        f"--http-address=127.0.0.1:{lookupd_http}",
    )
    lookupd.wait_http(f"127.0.0.1:{lookupd_http}")
    nsqd = launch(
        "nsqd",
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        f"--data-path={tmp_path}",
        f"--lookupd-tcp-address=127.0.0.1:{lookupd_tcp}",
        "--broadcast-address=127.0.0.2",
        "--broadcast-tcp-port=7150",
        "--broadcast-http-port=7151",
    )
    nsqd.wait_http(f"127.0.0.1:{http}")
    assert httpx.post(f"http://127.0.0.1:{http}/topic/create?topic=bcast").status_code == 200
    address = f"127.0.0.1:{lookupd_http}"

    def producers() -> list[dict[str, object]]:
        response = httpx.get(f"http://{address}/lookup?topic=bcast", timeout=5)
        return list(response.json().get("producers", [])) if response.status_code == 200 else []

    found = wait_until(producers, until=bool, what="bcast registered")
    nodes = _get(address, "/nodes")
    assert isinstance(nodes, dict)
    for producer in (found[0], nodes["producers"][0]):
        seen = (producer["broadcast_address"], producer["tcp_port"], producer["http_port"])
        assert seen == ("127.0.0.2", 7150, 7151)
    assert _get(f"127.0.0.1:{http}", "/config/broadcast_tcp_port") == 7150
    assert nsqd.stop() == 0 and lookupd.stop() == 0


_LINE = re.compile(r"^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (INFO|WARNING|ERROR): ")


async def _client_session(address: str) -> None:
    client = await RawClient.connect(address)
    assert await client.identify(client_id="pc", hostname="host") == b"OK"
    await client.sub("logs", "c", 0)
    client.send(b"CLS\n")
    assert await client.response() == b"CLOSE_WAIT"
    await client.close()


def test_default_info_log_in_nsqds_format(launch: Launcher, tmp_path: Path) -> None:
    tcp, http = free_port(), free_port()
    nsqd = launch(
        "nsqd",
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        f"--data-path={tmp_path}",
    )
    nsqd.wait_http(f"127.0.0.1:{http}")
    asyncio.run(_client_session(f"127.0.0.1:{tcp}"))
    assert nsqd.stop() == 0
    lines = nsqd.stderr().splitlines()
    assert lines and all(_LINE.match(line) for line in lines), lines
    text = "\n".join(_LINE.sub("", line) for line in lines)
    for expected in (
        "nsqd v1.3.0 (built w/",
        f"ID: {zlib.crc32(hashlib.md5(socket.gethostname().encode()).digest()) % 1024}",
        f"TCP: listening on 127.0.0.1:{tcp}",
        "TCP: new client(127.0.0.1:",
        "): desired protocol magic '  V2'",
        "IDENTIFY: {ClientID:pc Hostname:host HeartbeatInterval:0 ",
        "TOPIC(logs): created",
        "TOPIC(logs): new channel(c)",
        f"TCP: closing 127.0.0.1:{tcp}",
        "NSQ: bye",
    ):
        assert expected in text, (expected, text)


def test_log_level_and_prefix(launch: Launcher, tmp_path: Path) -> None:
    tcp, http, lookupd_http = free_port(), free_port(), free_port()
    nsqd = launch(
        "nsqd",
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        f"--data-path={tmp_path}",
        "--log-level=warn",
    )
    lookupd = launch(
        "nsqlookupd",
        f"--tcp-address=127.0.0.1:{free_port()}",
        f"--http-address=127.0.0.1:{lookupd_http}",
        "--log-prefix=[lk] ",
    )
    nsqd.wait_http(f"127.0.0.1:{http}")
    lookupd.wait_http(f"127.0.0.1:{lookupd_http}")
    assert nsqd.stop() == 0 and lookupd.stop() == 0
    assert " INFO: " not in nsqd.stderr()
    lines = lookupd.stderr().splitlines()
    assert lines and all(line.startswith("[lk] ") for line in lines), lines
    assert " INFO: nsqlookupd v1.3.0 (built w/" in lines[0]


@pytest.mark.parametrize(
    ("name", "flag", "message"),
    [
        ("nsqd", "--msg-timeout=bogus", 'invalid value "bogus" for flag -msg-timeout: parse error'),
        ("nsqd", "-snappy=maybe", 'invalid boolean value "maybe" for -snappy: parse error'),
        ("nsqd", "--node-id=1e3", 'invalid value "1e3" for flag -node-id: parse error'),
        (
            "nsqlookupd",
            "-tombstone-lifetime=x",
            'invalid value "x" for flag -tombstone-lifetime: parse error',
        ),
    ],
)
def test_bad_flag_value_as_gos_flag_package(
    launch: Launcher, name: str, flag: str, message: str
) -> None:
    result = launch.run(name, flag)
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and lines[:2] == [message, f"Usage of {name}:"], lines[:3]


async def _refused_handshake(address: str) -> tuple[str | None, bytes]:
    """A TLS 1.2-only client: the SSL error's reason, then the raw bytes nsqd sent after."""
    reader, writer = await asyncio.open_connection(*address.rsplit(":", 1))
    body = json.dumps({"feature_negotiation": True, "tls_v1": True}).encode()
    writer.write(b"  V2IDENTIFY\n" + struct.pack(">I", len(body)) + body)
    size = struct.unpack(">I", await reader.readexactly(4))[0]
    assert b'"tls_v1":true' in await reader.readexactly(size)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    tls = context.wrap_bio(incoming, outgoing)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    writer.write(outgoing.read())
    received = b""
    async with asyncio.timeout(10):
        while chunk := await reader.read(4096):
            received += chunk
    writer.close()
    incoming.write(received)
    with pytest.raises(ssl.SSLError) as error:
        tls.do_handshake()
    return error.value.reason, received


def test_refused_tls_handshake_gets_the_alert(
    launch: Launcher, tls_certs: CertBundle, tmp_path: Path
) -> None:
    tcp, http = free_port(), free_port()
    nsqd = launch(
        "nsqd",
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        f"--data-path={tmp_path}",
        f"--tls-cert={tls_certs.server_cert}",
        f"--tls-key={tls_certs.server_key}",
        "--tls-min-version=tls1.3",
    )
    nsqd.wait_http(f"127.0.0.1:{http}")
    reason, received = asyncio.run(_refused_handshake(f"127.0.0.1:{tcp}"))
    assert reason == "TLSV1_ALERT_PROTOCOL_VERSION"
    assert received[:1] == b"\x15" and received[5:7] == b"\x02\x46"  # fatal protocol_version
    assert b"E_IDENTIFY_FAILED IDENTIFY failed tls: " in received[7:]  # then nsqd's frame
    assert nsqd.stop() == 0


async def _timeout_and_defer(address: str, http: str) -> tuple[float, list[tuple[int, float]]]:
    """A message left unfinished and a DPUB (1 s) on a new channel: when they come back."""
    client = await RawClient.connect(address)
    await client.sub("scan", "new", 2)
    async with httpx.AsyncClient() as web:
        assert (await web.post(f"http://{http}/pub?topic=scan", content=b"a")).text == "OK"
    first = await client.message()
    delivered = time.monotonic()
    client.send(sized(b"DPUB scan 1000\n", b"b"))
    assert await client.response() == b"OK"
    later = []
    for msg in await client.messages(2, timeout=15):
        later.append((msg.attempts, time.monotonic()))
        client.send(b"FIN " + msg.id + b"\n")
    assert first.attempts == 1
    await client.close()
    return delivered, later


@pytest.mark.timeout(40)
def test_timeouts_and_deferred_on_nsqds_queue_scan(launch: Launcher, tmp_path: Path) -> None:
    tcp, http = free_port(), free_port()
    nsqd = launch(
        "nsqd",
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        f"--data-path={tmp_path}",
        "--msg-timeout=2s",
    )
    nsqd.wait_http(f"127.0.0.1:{http}")
    delivered, later = asyncio.run(_timeout_and_defer(f"127.0.0.1:{tcp}", f"127.0.0.1:{http}"))
    assert sorted(a for a, _ in later) == [1, 2]  # the DPUB's first try, the timed-out retry
    for _, arrived in later:
        assert arrived >= delivered + 1.0  # neither before its time
        # nsqd scans a channel created after its start only from the next 5 s refresh
        # (counted from its start, which is after our launch): not at delivered + 2 s
        if delivered + 2.0 < nsqd.started + 4.8:
            assert arrived >= nsqd.started + 4.9, (arrived - nsqd.started, delivered)
    assert nsqd.stop() == 0
