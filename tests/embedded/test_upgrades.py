"""IDENTIFY upgrades against both backends: TLS, snappy, deflate, their combinations, and
``--tls-required``. Each extra ``OK`` must arrive through the new layer, in nsqd's order."""

from __future__ import annotations

import ssl
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.protocol import DeflateCodec, SnappyCodec
from nsqclient.testing.certs import CertBundle
from tests.rawconn_support import RawClient, sized

from .support import channel_stats, http

pytestmark = pytest.mark.timeout(60)

Factory = Callable[..., Any]


def client_context(tls_certs: CertBundle) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(tls_certs.ca_cert))


async def negotiate(
    server: Any, tls_certs: CertBundle | None, **fields: Any
) -> tuple[RawClient, dict[str, Any]]:
    """IDENTIFY with feature negotiation and perform the upgrades the reply grants."""
    client = await RawClient.connect(server.tcp_address)
    reply = await client.identify(feature_negotiation=True, heartbeat_interval=1000, **fields)
    assert isinstance(reply, dict)
    if reply["tls_v1"]:
        assert tls_certs is not None
        await client.start_tls(client_context(tls_certs))
        assert await client.handshake_response() == b"OK"
    if reply["snappy"]:
        client.enable(SnappyCodec())
        assert await client.handshake_response() == b"OK"
    if reply["deflate"]:
        client.enable(DeflateCodec(reply["deflate_level"]))
        assert await client.handshake_response() == b"OK"
    return client, reply


async def roundtrip(server: Any, client: RawClient, topic: str, body: bytes) -> None:
    """PUB and SUB over the upgraded connection; the message must come back intact."""
    client.send(sized(f"PUB {topic}\n".encode(), body))
    assert await client.response() == b"OK"
    await client.sub(topic, "c", 1)
    msg = await client.message()
    assert bytes(msg.body) == body
    client.send(b"FIN " + msg.id + b"\n")
    await client.sync()


@pytest.mark.parametrize(
    ("fields", "snappy", "deflate", "level"),
    [
        ({"snappy": True}, True, False, 6),
        ({"deflate": True}, False, True, 6),
        ({"deflate": True, "deflate_level": 9}, False, True, 6),
        ({"deflate": True, "deflate_level": 2}, False, True, 2),
        ({"deflate": True, "deflate_level": -3}, False, True, 6),
    ],
)
async def test_compression(
    make_nsqd: Factory, fields: dict[str, Any], snappy: bool, deflate: bool, level: int
) -> None:
    server = make_nsqd()
    client, reply = await negotiate(server, None, **fields)
    assert (reply["snappy"], reply["deflate"], reply["deflate_level"]) == (snappy, deflate, level)
    await roundtrip(server, client, "zip", b"compress me " * 5000)
    client_stats = (await channel_stats(server, "zip", "c") or {})["clients"][0]
    assert (client_stats["snappy"], client_stats["deflate"]) == (snappy, deflate)
    await client.close()


async def test_compression_disabled_on_server(make_nsqd: Factory) -> None:
    server = make_nsqd(snappy=False, deflate=False)
    client, reply = await negotiate(server, None, snappy=True)
    assert reply["snappy"] is False
    await roundtrip(server, client, "plain", b"x")
    await client.close()


async def test_snappy_carries_a_message_bigger_than_a_chunk(make_nsqd: Factory) -> None:
    server = make_nsqd(max_msg_size=300_000, max_body_size=400_000)
    client, _ = await negotiate(server, None, snappy=True)
    await roundtrip(server, client, "big", bytes(range(256)) * 1000)
    await client.close()


@pytest.mark.parametrize("compression", [None, "snappy", "deflate"])
async def test_tls(
    make_nsqd: Factory, tls_certs: CertBundle, tmp_certs: dict[str, Any], compression: str | None
) -> None:
    server = make_nsqd(**tmp_certs)
    fields: dict[str, Any] = {"tls_v1": True}
    if compression:
        fields[compression] = True
    client, reply = await negotiate(server, tls_certs, **fields)
    assert reply["tls_v1"] is True
    await roundtrip(server, client, "secure", b"secret payload")
    client_stats = (await channel_stats(server, "secure", "c") or {})["clients"][0]
    assert client_stats["tls"] is True and client_stats["tls_version"].startswith("TLS1.")
    await client.close()


async def test_tls_not_offered_without_certificate(make_nsqd: Factory) -> None:
    server = make_nsqd()
    client, reply = await negotiate(server, None, tls_v1=True)
    assert reply["tls_v1"] is False
    await roundtrip(server, client, "nocert", b"x")
    await client.close()


async def test_no_upgrade_without_feature_negotiation(
    make_nsqd: Factory, tmp_certs: dict[str, Any]
) -> None:
    server = make_nsqd(**tmp_certs)
    client = await RawClient.connect(server.tcp_address)
    assert await client.identify(tls_v1=True, snappy=True) == b"OK"
    await roundtrip(server, client, "noneg", b"x")
    await client.close()


async def test_tls_required_refuses_commands_until_upgraded(
    make_nsqd: Factory, tls_certs: CertBundle, tmp_certs: dict[str, Any]
) -> None:
    server = make_nsqd(tls_required="tcp-https", **tmp_certs)
    plain = await RawClient.connect(server.tcp_address)
    plain.send(b"NOP\n")
    assert await plain.error() == "E_INVALID cannot NOP in current state (TLS required)"
    assert await plain.expect_closed() == []
    client, reply = await negotiate(server, tls_certs, tls_v1=True)
    assert reply["tls_v1"] is True
    await roundtrip(server, client, "required", b"x")
    await client.close()
    # tcp-https leaves plain HTTP usable
    assert (await http(server, "GET", "/ping")).status_code == 200


async def test_tls_required_true_refuses_plain_http(
    make_nsqd: Factory, tmp_certs: dict[str, Any]
) -> None:
    server = make_nsqd(tls_required=True, **tmp_certs)
    response = await http(server, "GET", "/stats")
    assert response.status_code == 403
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"
    body = response.json()
    assert body["message"] == "TLS_REQUIRED" and body["https_port"] > 0
    assert response.content.startswith(b'{"message": "TLS_REQUIRED", "https_port": ')


_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


async def _handshakes(server: Any, tls_certs: CertBundle, name: str) -> bool:
    """Whether a client that speaks only TLS version ``name`` completes the upgrade."""
    context = client_context(tls_certs)
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 refuses TLS < 1.2 above level 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1 / TLSv1_1 names
        context.minimum_version = context.maximum_version = _VERSIONS[name]
    client = await RawClient.connect(server.tcp_address)
    reply = await client.identify(feature_negotiation=True, tls_v1=True)
    assert isinstance(reply, dict) and reply["tls_v1"]
    try:
        await client.start_tls(context)
        return await client.handshake_response() == b"OK"
    except (ssl.SSLError, ConnectionError):
        return False
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("minimum", "accepted"),
    [
        (None, ["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"]),  # nsqd's default: tls1.0
        ("tls1.2", ["TLSv1.2", "TLSv1.3"]),
        ("tls1.3", ["TLSv1.3"]),
    ],
)
async def test_tls_min_version(
    make_nsqd: Factory,
    tls_certs: CertBundle,
    tmp_certs: dict[str, Any],
    minimum: str | None,
    accepted: list[str],
) -> None:
    server = make_nsqd(**tmp_certs, **({"tls_min_version": minimum} if minimum else {}))
    assert [name for name in _VERSIONS if await _handshakes(server, tls_certs, name)] == accepted
    expected = {None: 0x0301, "tls1.2": 0x0303, "tls1.3": 0x0304}[minimum]
    assert (await http(server, "GET", "/config/tls_min_version")).json() == expected
