"""Test certificates and the development auth server, checked against real nsqd.

Talks to nsqd with the standard library only (``wire_support``), so these tests vouch for the
infrastructure independently of nsqclient's own protocol code.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from wire_support import FRAME_ERROR, FRAME_RESPONSE, auth, connect, identify, read_frame, send

from nsqclient.testing.certs import CLIENT_COMMON_NAME, CertBundle
from nsqclient.testing.daemons import NsqdProcess, free_port, http_request
from test_service.auth_server import AuthServer, parse_secret_spec
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
NsqdFactory = Callable[..., NsqdProcess]


def tls_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key) if key else None)
    return context


def upgrade(sock: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket:
    """IDENTIFY asking for TLS, then the client handshake (nsq-protocol.md §6.3)."""
    reply = identify(sock, tls_v1=True)
    assert reply["tls_v1"] is True
    return context.wrap_socket(sock, server_hostname="127.0.0.1")


# -- TLS -------------------------------------------------------------------------------------------


def test_tls_handshake_verified_with_the_test_ca(
    nsqd_tls: NsqdProcess, tls_certs: CertBundle
) -> None:
    with connect(nsqd_tls.tcp_address) as raw:
        tls = upgrade(raw, tls_context(tls_certs.ca_cert))
        with tls:
            assert read_frame(tls) == (FRAME_RESPONSE, b"OK")
            assert tls.getpeercert() is not None
            send(tls, b"NOP")  # still usable after the upgrade
            send(tls, b"PUB tls-topic", b"over tls")
            assert read_frame(tls) == (FRAME_RESPONSE, b"OK")


def test_a_client_trusting_another_ca_refuses_nsqd(
    nsqd_tls: NsqdProcess, tls_certs: CertBundle
) -> None:
    with connect(nsqd_tls.tcp_address) as raw, pytest.raises(ssl.SSLCertVerificationError):
        upgrade(raw, tls_context(tls_certs.other_ca_cert))


def test_tls_required_refuses_commands_before_tls(nsqd_tls_required: NsqdProcess) -> None:
    with connect(nsqd_tls_required.tcp_address) as sock:
        send(sock, b"PUB t", b"x")
        assert read_frame(sock) == (
            FRAME_ERROR,
            b"E_INVALID cannot PUB in current state (TLS required)",
        )


def test_client_certificates_from_the_test_ca_only(
    nsqd_factory: NsqdFactory, tls_certs: CertBundle
) -> None:
    nsqd = nsqd_factory(
        tls_cert=tls_certs.server_cert,
        tls_key=tls_certs.server_key,
        tls_root_ca=tls_certs.ca_cert,
        tls_client_auth_policy="require-verify",
    )
    good = tls_context(tls_certs.ca_cert, tls_certs.client_cert, tls_certs.client_key)
    with connect(nsqd.tcp_address) as raw, upgrade(raw, good) as tls:
        assert read_frame(tls) == (FRAME_RESPONSE, b"OK")

    stranger = tls_context(
        tls_certs.ca_cert, tls_certs.other_client_cert, tls_certs.other_client_key
    )
    with (
        contextlib.ExitStack() as cleanup,
        connect(nsqd.tcp_address) as raw,
        pytest.raises((ssl.SSLError, ConnectionError)),
    ):
        tls = cleanup.enter_context(upgrade(raw, stranger))
        read_frame(tls)  # with TLS 1.3 the refusal of the client certificate comes on a read


# -- the auth server -------------------------------------------------------------------------------


def test_auth_server_answers_nsqd(nsqd_auth: NsqdProcess, auth_server: AuthServer) -> None:
    with connect(nsqd_auth.tcp_address) as sock:
        assert identify(sock)["auth_required"] is True
        frame_type, payload = auth(sock, b"s3cret")
        assert frame_type == FRAME_RESPONSE
        assert json.loads(payload) == {
            "identity": "s3cret",
            "identity_url": "",
            "permission_count": 1,
        }
        send(sock, b"PUB authed", b"x")
        assert read_frame(sock) == (FRAME_RESPONSE, b"OK")
    (request,) = auth_server.wait_for_requests(1)
    assert (request.secret, request.remote_ip, request.tls, request.common_name) == (
        "s3cret",
        "127.0.0.1",
        False,
        "",
    )
    assert request.accept == "application/vnd.nsq; version=1.0"


def test_unknown_secret_is_auth_failed(nsqd_auth: NsqdProcess) -> None:
    with connect(nsqd_auth.tcp_address) as sock:
        identify(sock)
        assert auth(sock, b"wrong") == (FRAME_ERROR, b"E_AUTH_FAILED AUTH failed")


@pytest.mark.parametrize("how", ["unknown_secret_empty", "secret_without_authorizations"])
def test_no_authorizations_is_unauthorized(
    nsqd_auth: NsqdProcess, auth_server: AuthServer, how: str
) -> None:
    if how == "unknown_secret_empty":
        auth_server.unknown_secret = "empty"
    else:
        auth_server.set_secret("nothing", [])
    with connect(nsqd_auth.tcp_address) as sock:
        identify(sock)
        assert auth(sock, b"nothing") == (
            FRAME_ERROR,
            b"E_UNAUTHORIZED AUTH no authorizations found",
        )


def test_readonly_secret_may_subscribe_but_not_publish(nsqd_auth: NsqdProcess) -> None:
    with connect(nsqd_auth.tcp_address) as sock:
        identify(sock)
        assert auth(sock, b"readonly")[0] == FRAME_RESPONSE
        send(sock, b"SUB ro ch")
        assert read_frame(sock) == (FRAME_RESPONSE, b"OK")
    with connect(nsqd_auth.tcp_address) as sock:
        identify(sock)
        assert auth(sock, b"readonly")[0] == FRAME_RESPONSE
        send(sock, b"PUB ro", b"x")
        assert read_frame(sock) == (FRAME_ERROR, b'E_UNAUTHORIZED AUTH failed for PUB on "ro" ""')


def test_auth_over_tls_passes_the_client_certificate_name(
    nsqd_factory: NsqdFactory, auth_server: AuthServer, tls_certs: CertBundle
) -> None:
    nsqd = nsqd_factory(
        tls_cert=tls_certs.server_cert,
        tls_key=tls_certs.server_key,
        tls_root_ca=tls_certs.ca_cert,
        tls_client_auth_policy="require-verify",
        auth_http_address=auth_server.address,
    )
    context = tls_context(tls_certs.ca_cert, tls_certs.client_cert, tls_certs.client_key)
    with connect(nsqd.tcp_address) as raw, upgrade(raw, context) as tls:
        assert read_frame(tls) == (FRAME_RESPONSE, b"OK")
        assert auth(tls, b"s3cret")[0] == FRAME_RESPONSE
    (request,) = auth_server.requests
    assert request.tls is True and request.common_name == CLIENT_COMMON_NAME


def test_auth_server_command_line(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    args = [sys.executable, str(REPO / "test_service" / "auth_server.py"), "--port", str(port)]
    args += ["--secret", "pub:^events$::publish", "--secret", "pub:^other$"]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        try:

            def answer() -> tuple[int, bytes] | None:
                try:
                    return http_request(address, "GET", "/auth", params={"secret": "pub"})
                except OSError:
                    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                    return None

            status, body = wait_until(answer, 20, "auth_server.py to answer", every=0.05)
            assert status == 200
            assert json.loads(body)["authorizations"] == [
                {"permissions": ["publish"], "topic": "^events$", "channels": [".*"]},
                {"permissions": ["subscribe", "publish"], "topic": "^other$", "channels": [".*"]},
            ]
            assert http_request(address, "GET", "/auth", params={"secret": "x"})[0] == 403
        finally:
            proc.terminate()
            assert proc.wait(10) == 0


def test_parse_secret_spec() -> None:
    assert parse_secret_spec("s") == (
        "s",
        {"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]},
    )
    assert parse_secret_spec("s:t:c:subscribe")[1] == {
        "permissions": ["subscribe"],
        "topic": "t",
        "channels": ["c"],
    }
    for bad in ("", ":t", "s:t:c:delete", "s:t:c:p:extra"):
        with pytest.raises(ValueError):
            parse_secret_spec(bad)
