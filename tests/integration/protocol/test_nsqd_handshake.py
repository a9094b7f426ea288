"""Magic, IDENTIFY and the TLS / snappy / deflate upgrades against real nsqd 1.3.0, through the
raw blocking connection (which takes every decision from nsqclient.protocol.Handshake)."""

from __future__ import annotations

import json
import os
import ssl
import struct
from typing import Any

import pytest
from nsqd_support import ca_context, options, single_client, unique, wait_channel

from nsqclient import errors
from nsqclient.message import Message
from nsqclient.protocol import OK, ErrorFrame, IdentifyResponse, Response, commands
from nsqclient.testing.daemons import NsqdProcess
from tests.rawconn_support import RawConnection

pytestmark = pytest.mark.timeout(60)

IDENTIFY_REPLY_KEYS = {
    "max_rdy_count",
    "version",
    "max_msg_timeout",
    "msg_timeout",
    "tls_v1",
    "deflate",
    "deflate_level",
    "max_deflate_level",
    "snappy",
    "sample_rate",
    "auth_required",
    "output_buffer_size",
    "output_buffer_timeout",
}


def raw_identify(conn: RawConnection, body: dict[str, Any]) -> Any:
    """Magic + IDENTIFY with a hand-written JSON body; return the first event."""
    conn.send(commands.MAGIC_V2 + commands.identify(json.dumps(body).encode()))
    return conn.read_event()


# -- magic and IDENTIFY --


def test_wrong_magic_gets_bare_e_bad_protocol_and_close(nsqd: NsqdProcess) -> None:
    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.send(b"  V1")
        events = conn.expect_closed()
    assert events == [ErrorFrame("E_BAD_PROTOCOL")]
    assert isinstance(events[0].to_exception(), errors.BadProtocolError)


def test_unknown_command(nsqd: NsqdProcess) -> None:
    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + b"ASDF\n")
        assert conn.expect_closed() == [ErrorFrame("E_INVALID invalid command ASDF")]


def test_no_reply_to_magic_and_commands_work_without_identify(nsqd: NsqdProcess) -> None:
    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.send(commands.MAGIC_V2)
        assert conn.command(commands.pub(unique(), b"no identify")) is OK


def test_identify_without_feature_negotiation(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options(feature_negotiation=False)) as conn:
        done = conn.handshake_result
        assert done is not None and done.auth is None
        assert done.identify.negotiated is False
        assert done.identify == IdentifyResponse(negotiated=False)
        assert conn.codec is None
        assert conn.command(commands.pub(unique(), b"x")) is OK


def test_feature_negotiation_ignores_upgrades_without_it(nsqd_tls: NsqdProcess) -> None:
    # feature_negotiation false: plain OK, no TLS and no compression even when asked for
    with RawConnection.open(nsqd_tls.tcp_address) as conn:
        event = raw_identify(conn, {"feature_negotiation": False, "tls_v1": True, "snappy": True})
        assert event is OK
        assert conn.command(commands.pub(unique(), b"still plaintext")) is OK


def test_identify_reply_json_fields(nsqd: NsqdProcess) -> None:
    with RawConnection.open(nsqd.tcp_address) as conn:
        event = raw_identify(conn, options().to_dict())
    assert isinstance(event, Response) and event.data.startswith(b"{")
    doc = json.loads(event.data)
    assert set(doc) == IDENTIFY_REPLY_KEYS
    assert doc == {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "max_msg_timeout": 900000,
        "msg_timeout": 60000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,  # reported even with deflate off (nsq-protocol.md §13)
        "max_deflate_level": 6,
        "snappy": False,
        "sample_rate": 0,
        "auth_required": False,
        "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
    }
    assert IdentifyResponse.parse(event.data) == IdentifyResponse(version="1.3.0")


@pytest.mark.parametrize(
    ("asked", "granted"),
    [
        ({"msg_timeout": 5000}, {"msg_timeout": 5000}),
        ({"msg_timeout": 1000}, {"msg_timeout": 1000}),
        ({"msg_timeout": 900000}, {"msg_timeout": 900000}),
        ({"msg_timeout": 0}, {"msg_timeout": 60000}),
        ({"sample_rate": 42}, {"sample_rate": 42}),
        ({"output_buffer_size": 64, "output_buffer_timeout": 25},
         {"output_buffer_size": 64, "output_buffer_timeout": 25}),
        ({"output_buffer_size": 65536, "output_buffer_timeout": 30000},
         {"output_buffer_size": 65536, "output_buffer_timeout": 30000}),
        ({"output_buffer_size": -1}, {"output_buffer_size": 1, "output_buffer_timeout": 0}),
        ({"output_buffer_timeout": -1}, {"output_buffer_size": 16384, "output_buffer_timeout": 0}),
        ({"deflate": True, "deflate_level": 3}, {"deflate": True, "deflate_level": 3}),
        ({"deflate": True, "deflate_level": 9}, {"deflate": True, "deflate_level": 6}),  # capped
        ({"deflate": True, "deflate_level": 0}, {"deflate": True, "deflate_level": 6}),
        ({"snappy": True}, {"snappy": True, "deflate": False}),
    ],
)  # fmt: skip
def test_identify_values_are_honoured_in_the_reply(
    nsqd: NsqdProcess, asked: dict[str, Any], granted: dict[str, Any]
) -> None:
    with RawConnection.connect(nsqd.tcp_address, options(**asked)) as conn:
        assert conn.handshake_result is not None
        reply = conn.handshake_result.identify
        for field, value in granted.items():
            assert getattr(reply, field) == value, field
        assert conn.command(commands.pub(unique(), b"works")) is OK


def test_identity_fields_show_in_stats(nsqd: NsqdProcess) -> None:
    topic = unique()
    with RawConnection.connect(nsqd.tcp_address, options(sample_rate=50)) as conn:
        assert conn.command(commands.sub(topic, "ch")) is OK
        client = single_client(wait_channel(nsqd, topic, "ch", client_count=1))
    assert client["client_id"] == "rawconn"
    assert client["hostname"] == "rawconn.test"
    assert client["user_agent"] == "nsqclient-tests/rawconn"
    assert client["sample_rate"] == 50
    assert client["state"] == 3  # subscribed
    assert (client["tls"], client["snappy"], client["deflate"]) == (False, False, False)


# -- upgrades --

UPGRADES = {
    "plain": {},
    "tls": {"tls_v1": True},
    "snappy": {"snappy": True},
    "deflate": {"deflate": True},
    "deflate-level-1": {"deflate": True, "deflate_level": 1},
    "tls-snappy": {"tls_v1": True, "snappy": True},
    "tls-deflate": {"tls_v1": True, "deflate": True, "deflate_level": 5},
}


def connect(nsqd: NsqdProcess, ctx: ssl.SSLContext, **features: Any) -> RawConnection:
    return RawConnection.connect(nsqd.tcp_address, options(**features), ssl_context=ctx)


@pytest.fixture
def ca(tls_certs: Any) -> ssl.SSLContext:
    return ca_context(tls_certs.ca_cert)


@pytest.mark.parametrize("features", list(UPGRADES.values()), ids=list(UPGRADES))
def test_pub_sub_rdy_fin_round_trip(
    nsqd_tls: NsqdProcess, ca: ssl.SSLContext, features: dict[str, Any]
) -> None:
    topic = unique()
    with (
        connect(nsqd_tls, ca, **features) as consumer,
        connect(nsqd_tls, ca, **features) as producer,
    ):
        for conn in (consumer, producer):
            assert conn.handshake_result is not None
            reply = conn.handshake_result.identify
            assert reply.tls_v1 is bool(features.get("tls_v1"))
            assert reply.snappy is bool(features.get("snappy"))
            assert reply.deflate is bool(features.get("deflate"))
            if reply.deflate:
                assert reply.deflate_level == features.get("deflate_level", 6)
            assert isinstance(conn.sock, ssl.SSLSocket) is reply.tls_v1
            assert (conn.codec.name if conn.codec else None) == (
                "snappy" if reply.snappy else "deflate" if reply.deflate else None
            )
        assert consumer.command(commands.sub(topic, "ch")) is OK
        consumer.send(commands.rdy(1))
        body = b"round trip " + json.dumps(features).encode()
        assert producer.command(commands.pub(topic, body)) is OK
        msg = consumer.read_message()
        assert (msg.body, msg.attempts) == (body, 1)
        assert len(msg.id) == 16 and all(c in b"0123456789abcdef" for c in msg.id)
        consumer.send(commands.fin(msg.id))
        stats = wait_channel(
            nsqd_tls, topic, "ch", in_flight_count=0, depth=0, message_count=1,
            client={"finish_count": 1},
        )  # fmt: skip
        client = single_client(stats)
        # nsqd's view of the connection matches what the handshake negotiated
        assert client["tls"] is bool(features.get("tls_v1"))
        assert client["snappy"] is bool(features.get("snappy"))
        assert client["deflate"] is bool(features.get("deflate"))
        if features.get("tls_v1"):
            assert client["tls_version"].startswith("TLS")


COMPRESSED = ["snappy", "deflate", "tls-snappy", "tls-deflate"]


@pytest.mark.parametrize("features", [UPGRADES[k] for k in COMPRESSED], ids=COMPRESSED)
def test_large_messages_through_compression(
    nsqd_tls: NsqdProcess, ca: ssl.SSLContext, features: dict[str, Any]
) -> None:
    topic = unique()
    limit = commands.DEFAULT_MAX_MSG_SIZE
    incompressible = os.urandom(limit)
    compressible = (b"0123456789abcdef" * (limit // 16))[:limit]
    mixed = [os.urandom(1000) + b"z" * 400_000 + os.urandom(600_000) for _ in range(3)]
    with (
        connect(nsqd_tls, ca, **features) as consumer,
        connect(nsqd_tls, ca, **features) as producer,
    ):
        assert consumer.command(commands.sub(topic, "ch")) is OK
        assert producer.command(commands.pub(topic, incompressible)) is OK
        assert producer.command(commands.pub(topic, compressible)) is OK
        assert producer.command(commands.mpub(topic, mixed)) is OK
        consumer.send(commands.rdy(10))
        received: list[Message] = []
        while len(received) < 5:
            msg = consumer.read_message(timeout=20)
            received.append(msg)
            consumer.send(commands.fin(msg.id))
        assert sorted(m.body for m in received) == sorted([incompressible, compressible, *mixed])
        wait_channel(nsqd_tls, topic, "ch", in_flight_count=0, depth=0, message_count=5)


def test_tls_certificate_is_verified_against_the_test_ca(
    nsqd_tls: NsqdProcess, tls_certs: Any
) -> None:
    # the right CA verifies; an unrelated CA makes the upgrade fail
    with connect(nsqd_tls, ca_context(tls_certs.ca_cert), tls_v1=True) as conn:
        assert isinstance(conn.sock, ssl.SSLSocket)
        assert conn.command(commands.pub(unique(), b"verified")) is OK
    with pytest.raises(ssl.SSLCertVerificationError):
        connect(nsqd_tls, ca_context(tls_certs.other_ca_cert), tls_v1=True)


def test_tls_requested_from_nsqd_without_certificate(nsqd: NsqdProcess) -> None:
    # nsqd replies tls_v1=false; the Handshake refuses to carry on in plaintext
    with pytest.raises(errors.TLSError, match="did not agree to TLS"):
        RawConnection.connect(nsqd.tcp_address, options(tls_v1=True))


def test_tls_required_refuses_commands_before_tls(nsqd_tls_required: NsqdProcess) -> None:
    # before IDENTIFY
    with RawConnection.open(nsqd_tls_required.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + commands.sub(unique(), "ch"))
        [event] = conn.expect_closed()
        assert event == ErrorFrame("E_INVALID cannot SUB in current state (TLS required)")
        assert isinstance(event.to_exception(), errors.InvalidError)
    # after a plaintext IDENTIFY (which is allowed), still refused: PUB is checked before its body
    with RawConnection.connect(nsqd_tls_required.tcp_address, options()) as conn:
        conn.send(b"PUB " + unique().encode() + b"\n")
        assert conn.expect_closed() == [
            ErrorFrame("E_INVALID cannot PUB in current state (TLS required)")
        ]
    with RawConnection.open(nsqd_tls_required.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + commands.nop())
        assert conn.expect_closed() == [
            ErrorFrame("E_INVALID cannot NOP in current state (TLS required)")
        ]


def test_tls_required_works_after_tls(nsqd_tls_required: NsqdProcess, tls_certs: Any) -> None:
    topic = unique()
    ctx = ca_context(tls_certs.ca_cert)
    with RawConnection.connect(
        nsqd_tls_required.tcp_address, options(tls_v1=True, snappy=True), ssl_context=ctx
    ) as conn:
        assert conn.command(commands.sub(topic, "ch")) is OK
        assert conn.command(commands.pub(topic, b"over tls")) is OK
        conn.send(commands.rdy(1))
        msg = conn.read_message()
        assert msg.body == b"over tls"
        conn.send(commands.fin(msg.id))


def test_corrupt_compressed_stream_closes_the_connection(nsqd: NsqdProcess) -> None:
    # nsqd reads commands through the decompressor; garbage there ends the connection silently
    with RawConnection.connect(nsqd.tcp_address, options(deflate=True)) as conn:
        conn.send_raw(b"\xff\xff\xff\xff\xff\xff")
        assert conn.expect_closed() == []


def test_identify_twice_before_sub_is_accepted(nsqd: NsqdProcess) -> None:
    # nsq-protocol.md §3: the state does not change after IDENTIFY, so a second one passes
    with RawConnection.connect(nsqd.tcp_address, options(feature_negotiation=False)) as conn:
        conn.send(commands.identify(options(feature_negotiation=False).to_json()))
        assert conn.read_event() is OK
        topic = unique()
        assert conn.command(commands.sub(topic, "ch")) is OK
        conn.send(commands.identify(b"{}"))
        assert conn.expect_closed() == [ErrorFrame("E_INVALID cannot IDENTIFY in current state")]


def test_identify_body_size_errors(nsqd: NsqdProcess) -> None:
    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + b"IDENTIFY\n" + struct.pack(">I", 0))
        assert conn.expect_closed() == [ErrorFrame("E_BAD_BODY IDENTIFY invalid body size 0")]
    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + commands.identify(b"{not json"))
        assert conn.expect_closed() == [
            ErrorFrame("E_BAD_BODY IDENTIFY failed to decode JSON body")
        ]
