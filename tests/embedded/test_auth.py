"""AUTH against an auth server (§7), on both backends: what nsqd asks the server, what the
client is told, which commands need AUTH first, permissions, and the TTL re-query."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.testing.certs import CertBundle
from test_service.auth_server import AuthServer
from tests.rawconn_support import Closed, RawClient, sized
from tests.support import wait_for

pytestmark = pytest.mark.timeout(60)

Factory = Callable[..., Any]
ALL = {"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}


async def connect(server: Any) -> tuple[RawClient, dict[str, Any]]:
    client = await RawClient.connect(server.tcp_address)
    reply = await client.identify(feature_negotiation=True, heartbeat_interval=1000)
    assert isinstance(reply, dict)
    return client, reply


async def auth(client: RawClient, secret: bytes) -> bytes | str:
    client.send(sized(b"AUTH\n", secret))
    event = await client.event()
    return getattr(event, "data", None) or event.text  # type: ignore[union-attr]


async def fatal(client: RawClient) -> str:
    text = await client.error()
    with pytest.raises(Closed):
        await client.event()
    return text


async def test_auth_required_and_reply(make_nsqd: Factory, auth_server: AuthServer) -> None:
    auth_server.set_secret(
        "s3cret", [ALL, {"permissions": ["publish"], "topic": "x", "channels": []}]
    )
    auth_server.identity_url = "https://example.invalid/u"
    server = make_nsqd(auth_http_address=auth_server.address)
    client, reply = await connect(server)
    assert reply["auth_required"] is True
    answer = await auth(client, b"s3cret")
    assert json.loads(answer) == {
        "identity": "s3cret",
        "identity_url": "https://example.invalid/u",
        "permission_count": 2,
    }
    assert auth_server.requests[-1].query == {
        "common_name": "",
        "remote_ip": "127.0.0.1",
        "secret": "s3cret",
        "tls": "false",
    }
    await client.pub("t", b"x")
    await client.sub("t", "c")
    await client.close()


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (sized(b"PUB t\n", b"x"), "PUB"),
        (b"MPUB t\n", "MPUB"),  # MPUB checks AUTH before reading its body
        (sized(b"DPUB t 10\n", b"x"), "DPUB"),
        (b"SUB t c\n", "SUB"),
    ],
)
async def test_commands_need_auth_first(
    make_nsqd: Factory, auth_server: AuthServer, command: bytes, name: str
) -> None:
    server = make_nsqd(auth_http_address=auth_server.address)
    client, _ = await connect(server)
    client.send(command)
    assert await fatal(client) == f"E_AUTH_FIRST AUTH required before {name}"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ((403, "forbidden"), "E_AUTH_FAILED AUTH failed"),
        ((200, {"ttl": 60, "authorizations": []}), "E_UNAUTHORIZED AUTH no authorizations found"),
        ((200, {"ttl": 0, "authorizations": [ALL]}), "E_AUTH_FAILED AUTH failed"),
        (
            (200, {"ttl": 60, "authorizations": [{**ALL, "permissions": ["admin"]}]}),
            "E_AUTH_FAILED AUTH failed",
        ),
        (
            (200, {"ttl": 60, "authorizations": [{**ALL, "topic": "("}]}),
            "E_AUTH_FAILED AUTH failed",
        ),
        ((500, "oops"), "E_AUTH_FAILED AUTH failed"),
    ],
)
async def test_auth_failures(
    make_nsqd: Factory, auth_server: AuthServer, reply: tuple[int, Any], expected: str
) -> None:
    auth_server.set_reply("s", *reply)
    server = make_nsqd(auth_http_address=auth_server.address)
    client, _ = await connect(server)
    client.send(sized(b"AUTH\n", b"s"))
    assert await fatal(client) == expected


async def test_permissions_are_checked_per_command(
    make_nsqd: Factory, auth_server: AuthServer
) -> None:
    auth_server.set_secret(
        "limited",
        [
            {"permissions": ["publish"], "topic": "^events$", "channels": [".*"]},
            {"permissions": ["subscribe"], "topic": "ev", "channels": ["^good$"]},
        ],
    )
    server = make_nsqd(auth_http_address=auth_server.address)
    client, _ = await connect(server)
    await auth(client, b"limited")
    await client.pub("events", b"x")
    client.send(b"SUB events bad\n")
    assert await fatal(client) == 'E_UNAUTHORIZED AUTH failed for SUB on "events" "bad"'
    client, _ = await connect(server)
    await auth(client, b"limited")
    await client.sub("events", "good")  # unanchored topic regex "ev" matches
    client.send(sized(b"PUB other\n", b"x"))
    assert await fatal(client) == 'E_UNAUTHORIZED AUTH failed for PUB on "other" ""'


async def test_auth_twice(make_nsqd: Factory, auth_server: AuthServer) -> None:
    auth_server.set_secret("s", [ALL])
    server = make_nsqd(auth_http_address=auth_server.address)
    client, _ = await connect(server)
    await auth(client, b"s")
    client.send(sized(b"AUTH\n", b"s"))
    assert await fatal(client) == "E_INVALID AUTH already set"


async def test_expired_authorizations_are_queried_again(
    make_nsqd: Factory, auth_server: AuthServer
) -> None:
    auth_server.set_secret("short", [ALL], ttl=1)
    server = make_nsqd(auth_http_address=auth_server.address)
    client, _ = await connect(server)
    await auth(client, b"short")

    async def queried_again() -> bool:  # publish until the TTL ran out and nsqd asked again
        await client.pub("t", b"x")
        return len(auth_server.requests) >= 2

    await wait_for(queried_again, 10, "nsqd to query the auth server again", every=0.1)
    auth_server.set_reply("short", 403, "revoked")

    async def refused() -> Any:
        client.send(sized(b"PUB t\n", b"x"))
        event = await client.event()
        return None if getattr(event, "data", None) == b"OK" else event

    event = await wait_for(refused, 15, "a PUB refused after the revocation", every=0.1)
    assert event.text == "E_AUTH_FAILED AUTH failed"  # type: ignore[union-attr]
    await client.close()


async def test_auth_over_tls_tells_the_server(
    make_nsqd: Factory,
    auth_server: AuthServer,
    tls_certs: CertBundle,
    tmp_certs: dict[str, Any],
) -> None:
    auth_server.set_secret("s", [ALL])
    server = make_nsqd(auth_http_address=auth_server.address, **tmp_certs)
    client = await RawClient.connect(server.tcp_address)
    reply = await client.identify(feature_negotiation=True, tls_v1=True, heartbeat_interval=1000)
    assert isinstance(reply, dict) and reply["tls_v1"]
    await client.start_tls(ssl.create_default_context(cafile=str(tls_certs.ca_cert)))
    assert await client.handshake_response() == b"OK"
    await auth(client, b"s")
    assert auth_server.requests[-1].query["tls"] == "true"
    await client.close()


async def test_client_certificate_common_name_reaches_the_auth_server(
    make_nsqd: Factory, auth_server: AuthServer, tls_certs: CertBundle
) -> None:
    auth_server.set_secret("s", [ALL])
    server = make_nsqd(
        auth_http_address=auth_server.address,
        tls_cert=tls_certs.server_cert,
        tls_key=tls_certs.server_key,
        tls_root_ca=tls_certs.ca_cert,
        tls_client_auth_policy="require-verify",
    )
    context = ssl.create_default_context(cafile=str(tls_certs.ca_cert))
    context.load_cert_chain(str(tls_certs.client_cert), str(tls_certs.client_key))
    client = await RawClient.connect(server.tcp_address)
    reply = await client.identify(feature_negotiation=True, tls_v1=True, heartbeat_interval=1000)
    assert isinstance(reply, dict) and reply["tls_v1"] and reply["auth_required"]
    await client.start_tls(context)
    assert await client.handshake_response() == b"OK"
    await auth(client, b"s")
    assert auth_server.requests[-1].query["common_name"] == tls_certs.client_common_name
    assert auth_server.requests[-1].query["tls"] == "true"
    await client.close()
