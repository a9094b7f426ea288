"""AUTH against real nsqd with ``--auth-http-address`` pointing at the test auth server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from nsqd_support import options, unique

from nsqclient import errors
from nsqclient.protocol import OK, AuthResponse, ErrorFrame, commands
from nsqclient.testing.daemons import NsqdProcess
from tests.rawconn_support import RawConnection

pytestmark = pytest.mark.timeout(60)

ALLOW_ALL = [{"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}]


@pytest.fixture
def secret(auth_server: Any) -> Iterator[str]:
    """A secret of this test's own, allowed everything."""
    value = unique("secret")
    auth_server.set_secret(value, ALLOW_ALL)
    yield value
    auth_server.remove_secret(value)


def test_correct_secret(nsqd_auth: NsqdProcess, auth_server: Any, secret: str) -> None:
    topic = unique()
    with RawConnection.connect(
        nsqd_auth.tcp_address, options(), auth_secret=secret.encode()
    ) as conn:
        done = conn.handshake_result
        assert done is not None
        assert done.identify.auth_required is True
        assert done.auth == AuthResponse(
            identity=secret, identity_url=auth_server.identity_url, permission_count=1
        )
        assert conn.command(commands.sub(topic, "ch")) is OK
        assert conn.command(commands.pub(topic, b"authorised")) is OK
        conn.send(commands.rdy(1))
        assert conn.read_message().body == b"authorised"
    asked = [r for r in auth_server.requests if r.secret == secret]
    assert asked and asked[0].remote_ip == "127.0.0.1" and asked[0].tls is False


def test_correct_secret_with_compression(nsqd_auth: NsqdProcess, secret: str) -> None:
    # AUTH goes out through the compressor, after the upgrade (nsq-protocol.md §6.3)
    with RawConnection.connect(
        nsqd_auth.tcp_address, options(snappy=True), auth_secret=secret.encode()
    ) as conn:
        assert conn.codec is not None and conn.codec.name == "snappy"
        assert conn.handshake_result is not None and conn.handshake_result.auth is not None
        assert conn.command(commands.pub(unique(), b"x")) is OK


def test_wrong_secret(nsqd_auth: NsqdProcess, auth_server: Any) -> None:
    previous = auth_server.unknown_secret
    auth_server.unknown_secret = "forbidden"  # unknown secrets get 403 -> E_AUTH_FAILED
    try:
        with pytest.raises(errors.ServerAuthError) as info:
            RawConnection.connect(
                nsqd_auth.tcp_address, options(), auth_secret=unique("wrong").encode()
            )
    finally:
        auth_server.unknown_secret = previous
    exc = info.value
    assert exc.code == "E_AUTH_FAILED" and exc.text == "E_AUTH_FAILED AUTH failed"
    assert isinstance(exc, errors.AuthError) and isinstance(exc, errors.ServerError)
    assert exc.address == nsqd_auth.tcp_address


def test_secret_without_authorizations(nsqd_auth: NsqdProcess, auth_server: Any) -> None:
    empty = unique("empty")
    auth_server.set_secret(empty, [])
    with pytest.raises(errors.ServerAuthError) as info:
        RawConnection.connect(nsqd_auth.tcp_address, options(), auth_secret=empty.encode())
    assert info.value.text == "E_UNAUTHORIZED AUTH no authorizations found"


def test_missing_secret(nsqd_auth: NsqdProcess) -> None:
    # refused locally by the Handshake, before anything else is sent
    with pytest.raises(errors.AuthRequiredError, match="auth_secret"):
        RawConnection.connect(nsqd_auth.tcp_address, options())


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"SUB t ch\n", "E_AUTH_FIRST AUTH required before SUB"),
        (b"PUB t\n\x00\x00\x00\x01x", "E_AUTH_FIRST AUTH required before PUB"),  # body read first
        (b"MPUB t\n", "E_AUTH_FIRST AUTH required before MPUB"),  # checked before the body
    ],
)
def test_commands_before_auth(nsqd_auth: NsqdProcess, raw: bytes, text: str) -> None:
    with RawConnection.open(nsqd_auth.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + commands.identify(options().to_json()))
        assert conn.read_event() is not None  # the IDENTIFY reply
        conn.send(raw)
        [error] = conn.expect_closed()
    assert error == ErrorFrame(text)
    assert isinstance(error.to_exception(), errors.ServerAuthError)


def test_permissions_are_enforced(nsqd_auth: NsqdProcess, auth_server: Any) -> None:
    limited = unique("limited")
    auth_server.set_secret(
        limited, [{"permissions": ["subscribe"], "topic": "^allowed-", "channels": ["^ch$"]}]
    )
    allowed, other = f"allowed-{unique()}", unique()
    with RawConnection.connect(
        nsqd_auth.tcp_address, options(), auth_secret=limited.encode()
    ) as conn:
        assert conn.command(commands.sub(allowed, "ch")) is OK
    for command, text in (
        (commands.sub(other, "ch"), f'E_UNAUTHORIZED AUTH failed for SUB on "{other}" "ch"'),
        (
            commands.sub(allowed, "other"),
            f'E_UNAUTHORIZED AUTH failed for SUB on "{allowed}" "other"',
        ),
        (commands.pub(allowed, b"x"), f'E_UNAUTHORIZED AUTH failed for PUB on "{allowed}" ""'),
    ):
        with RawConnection.connect(
            nsqd_auth.tcp_address, options(), auth_secret=limited.encode()
        ) as conn:
            conn.send(command)
            assert conn.expect_closed() == [ErrorFrame(text)]


def test_auth_twice(nsqd_auth: NsqdProcess, secret: str) -> None:
    with RawConnection.connect(
        nsqd_auth.tcp_address, options(), auth_secret=secret.encode()
    ) as conn:
        conn.send(commands.auth(secret))
        assert conn.expect_closed() == [ErrorFrame("E_INVALID AUTH already set")]
