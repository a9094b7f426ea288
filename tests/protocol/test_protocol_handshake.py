"""The sans-IO Handshake: scripted server replies for every setup path, and an in-memory run of
the bytes (replies and compressed data arriving in one read) through FrameDecoder and the codecs."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_support import split_at, view

from nsqclient import errors
from nsqclient.message import Message
from nsqclient.protocol import (
    CLOSE_WAIT,
    HEARTBEAT,
    OK,
    AuthResponse,
    Codec,
    DeflateCodec,
    EnableCompression,
    ErrorFrame,
    Event,
    FrameDecoder,
    Handshake,
    HandshakeDone,
    IdentifyOptions,
    IdentifyResponse,
    Response,
    Send,
    SnappyCodec,
    StartTLS,
    Step,
    commands,
    encode_message,
    encode_response,
)

ADDRESS = "127.0.0.1:4150"
AUTH_JSON = b'{"identity":"bob","identity_url":"https://x/bob","permission_count":1}'


def reply(**fields: Any) -> Response:
    doc = {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "max_msg_timeout": 900000,
        "msg_timeout": 60000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "max_deflate_level": 6,
        "snappy": False,
        "sample_rate": 0,
        "auth_required": False,
        "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
    }
    doc.update(fields)
    return Response(json.dumps(doc).encode())


def options(**kwargs: Any) -> IdentifyOptions:
    return IdentifyOptions(client_id="test", hostname="host", user_agent="ua/1", **kwargs)


def run(hs: Handshake, script: list[tuple[Event, list[type[Step]]]]) -> list[Step]:
    """Feed each event, check the kinds of steps returned (a heartbeat before each is ignored)."""
    out: list[Step] = []
    for event, kinds in script:
        assert hs.receive(HEARTBEAT) == []
        steps = hs.receive(event)
        assert [type(s) for s in steps] == kinds, (event, steps)
        out.extend(steps)
    return out


def test_start_sends_magic_and_identify() -> None:
    opts = options(heartbeat_interval=1000)
    hs = Handshake(opts)
    assert not hs.done and hs.identify_response is None
    data = hs.start()
    assert data == b"  V2" + commands.identify(opts.to_json())
    assert json.loads(data[4 + 9 + 4 :])["heartbeat_interval"] == 1000
    with pytest.raises(RuntimeError, match="already started"):
        hs.start()


def test_plain() -> None:
    hs = Handshake(options())
    hs.start()
    [done] = run(hs, [(reply(), [HandshakeDone])])
    assert isinstance(done, HandshakeDone)
    assert done.identify == IdentifyResponse(version="1.3.0") and done.auth is None
    assert hs.done and hs.identify_response == done.identify


def test_without_feature_negotiation() -> None:
    hs = Handshake(options(feature_negotiation=False))
    hs.start()
    [done] = run(hs, [(OK, [HandshakeDone])])
    assert isinstance(done, HandshakeDone) and done.identify.negotiated is False


def test_tls() -> None:
    hs = Handshake(options(tls_v1=True))
    hs.start()
    steps = run(hs, [(reply(tls_v1=True), [StartTLS]), (OK, [HandshakeDone])])
    assert steps[0] == StartTLS()
    assert hs.done


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"snappy": True}, EnableCompression("snappy")),
        ({"deflate": True}, EnableCompression("deflate", 6)),
        ({"deflate": True, "deflate_level": 1}, EnableCompression("deflate", 1)),
        ({"deflate": True, "deflate_level": 9}, EnableCompression("deflate", 9)),
    ],
)
def test_compression(fields: dict[str, Any], expected: EnableCompression) -> None:
    kind = "snappy" if "snappy" in fields else "deflate"
    hs = Handshake(options(**{kind: True}))
    hs.start()
    steps = run(hs, [(reply(**fields), [EnableCompression]), (OK, [HandshakeDone])])
    assert steps[0] == expected


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
def test_tls_then_compression(kind: str) -> None:
    hs = Handshake(options(tls_v1=True, **{kind: True}))
    hs.start()
    steps = run(
        hs,
        [
            (reply(tls_v1=True, **{kind: True}), [StartTLS]),
            (OK, [EnableCompression]),
            (OK, [HandshakeDone]),
        ],
    )
    assert steps[1] == EnableCompression(kind, 6)


@pytest.mark.parametrize("secret", [b"s3cret", b"."])
def test_auth(secret: bytes) -> None:
    hs = Handshake(options(), auth_secret=secret)
    hs.start()
    steps = run(hs, [(reply(auth_required=True), [Send]), (Response(AUTH_JSON), [HandshakeDone])])
    assert steps[0] == Send(commands.auth(secret))
    assert steps[0] == Send(b"AUTH\n" + len(secret).to_bytes(4, "big") + secret)
    done = steps[1]
    assert isinstance(done, HandshakeDone)
    assert done.auth == AuthResponse("bob", "https://x/bob", 1)
    assert done.identify.auth_required


def test_tls_snappy_auth_in_nsqd_order() -> None:
    hs = Handshake(options(tls_v1=True, snappy=True), auth_secret=b"x")
    hs.start()
    run(
        hs,
        [
            (reply(tls_v1=True, snappy=True, auth_required=True), [StartTLS]),
            (OK, [EnableCompression]),
            (OK, [Send]),
            (Response(AUTH_JSON), [HandshakeDone]),
        ],
    )


def test_secret_configured_but_not_required_is_not_sent() -> None:
    hs = Handshake(options(), auth_secret=b"unused")
    hs.start()
    [done] = run(hs, [(reply(), [HandshakeDone])])
    assert isinstance(done, HandshakeDone) and done.auth is None


@pytest.mark.parametrize("secret", [None, b""])
def test_auth_required_without_secret(secret: bytes | None) -> None:
    hs = Handshake(options(), auth_secret=secret)
    hs.start()
    with pytest.raises(errors.AuthRequiredError, match="auth_secret") as info:
        hs.receive(reply(auth_required=True))
    assert isinstance(info.value, errors.AuthError)
    assert not hs.done


def test_auth_required_after_upgrades_without_secret() -> None:
    hs = Handshake(options(snappy=True))
    hs.start()
    assert [type(s) for s in hs.receive(reply(snappy=True, auth_required=True))] == [
        EnableCompression
    ]
    with pytest.raises(errors.AuthRequiredError):
        hs.receive(OK)


@pytest.mark.parametrize(
    ("stage", "text", "exc_type"),
    [
        ("identify", "E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid",
         errors.BadBodyError),
        ("identify", "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
         errors.IdentifyFailedError),
        ("identify", "E_BAD_PROTOCOL", errors.BadProtocolError),
        ("identify", "E_INVALID cannot IDENTIFY in current state", errors.InvalidError),
        ("tls", "E_IDENTIFY_FAILED IDENTIFY failed tls handshake", errors.IdentifyFailedError),
        ("auth", "E_AUTH_FAILED AUTH failed", errors.ServerAuthError),
        ("auth", "E_UNAUTHORIZED AUTH no authorizations found", errors.ServerAuthError),
        ("auth", "E_AUTH_DISABLED AUTH disabled", errors.ServerAuthError),
    ],
)  # fmt: skip
def test_error_frames_raise_their_typed_exception(
    stage: str, text: str, exc_type: type[errors.ServerError]
) -> None:
    hs = Handshake(options(tls_v1=stage == "tls"), auth_secret=b"s", address=ADDRESS)
    hs.start()
    if stage == "tls":
        hs.receive(reply(tls_v1=True))
    if stage == "auth":
        hs.receive(reply(auth_required=True))
    with pytest.raises(exc_type) as info:
        hs.receive(ErrorFrame(text))
    assert info.value.text == text
    assert info.value.address == ADDRESS
    assert ADDRESS in str(info.value)
    assert not hs.done


@pytest.mark.parametrize("server_reply", [reply(tls_v1=False), OK])
def test_tls_requested_but_refused(server_reply: Response) -> None:
    hs = Handshake(options(tls_v1=True), address=ADDRESS)
    hs.start()
    with pytest.raises(errors.TLSError, match="did not agree to TLS") as info:
        hs.receive(server_reply)
    assert isinstance(info.value, errors.ConnectError)
    assert isinstance(info.value, ConnectionError)
    assert info.value.address == ADDRESS


@pytest.mark.parametrize(
    ("tls", "before", "event"),
    [
        (False, [], Message(1, 1, b"0" * 16, b"x")),
        (False, [], Response(b"not json")),
        (True, [reply(tls_v1=True)], Response(b"NOT OK")),
        (True, [reply(tls_v1=True)], CLOSE_WAIT),
        (False, [reply(snappy=True)], Response(b'{"x":1}')),
        (False, [reply(auth_required=True)], Response(b"OK")),  # AUTH reply must be JSON
        (False, [reply()], OK),  # anything after done
    ],
)
def test_unexpected_events_are_protocol_errors(
    tls: bool, before: list[Response], event: Event
) -> None:
    hs = Handshake(options(tls_v1=tls, snappy=True), auth_secret=b"s")
    hs.start()
    for r in before:
        hs.receive(r)
    with pytest.raises(errors.ProtocolError):
        hs.receive(event)


def test_response_before_start_is_a_protocol_error() -> None:
    with pytest.raises(errors.ProtocolError, match="state new"):
        Handshake(options()).receive(OK)


# -- the bytes, in memory: the reply and the compressed stream after it arrive together --


def make_codec(step: EnableCompression) -> Codec:
    return SnappyCodec() if step.kind == "snappy" else DeflateCodec(step.level)


def client_run(
    hs: Handshake, server_chunks: list[bytes]
) -> tuple[list[Step], list[bytes], list[Event], Codec | None]:
    """Drive hs over the server's bytes the way a connection must; return steps, sent, events."""
    decoder = FrameDecoder()
    codec: Codec | None = None
    pending = deque(server_chunks)
    plain = b""
    steps: list[Step] = []
    sent = [hs.start()]
    while not hs.done:
        event = decoder.next_event(plain)
        plain = b""
        if event is None:
            raw = pending.popleft()
            plain = codec.decompress(raw) if codec else raw
            continue
        for step in hs.receive(event):
            steps.append(step)
            if isinstance(step, EnableCompression):
                codec = make_codec(step)
                plain = codec.decompress(decoder.take_unparsed())
            elif isinstance(step, Send):
                sent.append(codec.compress(step.data) if codec else step.data)
            elif isinstance(step, StartTLS):
                raise AssertionError("no TLS in memory")
    events = decoder.feed(plain)
    for raw in pending:
        events += decoder.feed(codec.decompress(raw) if codec else raw)
    assert decoder.buffered == 0
    return steps, sent, events, codec


def server_stream(
    kind: str | None, level: int = 6, auth: bool = False
) -> tuple[bytes, Codec | None]:
    """What nsqd writes: the JSON reply in plaintext, then OK, (AUTH reply,) messages compressed."""
    fields: dict[str, Any] = {"auth_required": auth}
    if kind:
        fields[kind] = True
        fields["deflate_level"] = level
    out = encode_response(reply(**fields).data)
    codec: Codec | None = None
    if kind == "snappy":
        codec = SnappyCodec()
    elif kind == "deflate":
        codec = DeflateCodec(level)
    after = []
    if kind:
        after.append(encode_response(b"OK"))
    if auth:
        after.append(encode_response(AUTH_JSON))
    after += [encode_message(1, 1, b"%016d" % i, b"body-%d" % i * 50) for i in range(3)] + [
        encode_response(b"_heartbeat_")
    ]
    for frame in after:
        out += codec.compress(frame) if codec else frame
    return out, codec


EXPECTED_AFTER = [("message", 1, 1, b"%016d" % i, b"body-%d" % i * 50) for i in range(3)] + [
    ("heartbeat",)
]


@given(
    st.sampled_from([None, "snappy", "deflate"]),
    st.integers(1, 9),
    st.booleans(),
    st.lists(st.integers(0, 5000), max_size=6),
)
@settings(max_examples=300, deadline=None)
def test_compressed_bytes_read_with_the_reply_are_not_lost(
    kind: str | None, level: int, auth: bool, cuts: list[int]
) -> None:
    # nsqd may send the JSON reply and the first compressed bytes in one segment; whatever the
    # reads look like, take_unparsed() hands the compressed part to the codec intact.
    data, server_codec = server_stream(kind, level, auth)
    chunks = split_at(data, cuts)
    opts = options(**({kind: True} if kind else {}))
    hs = Handshake(opts, auth_secret=b"secret" if auth else None)
    steps, sent, events, _ = client_run(hs, [c for c in chunks if c])
    assert [view(e) for e in events] == EXPECTED_AFTER
    assert isinstance(steps[-1], HandshakeDone)
    if auth:
        # the AUTH command went out through the compressor; the server can read it back
        if server_codec is not None:
            server_side = SnappyCodec() if kind == "snappy" else DeflateCodec(level)
            assert server_side.decompress(sent[-1]) == commands.auth(b"secret")
        else:
            assert sent[-1] == commands.auth(b"secret")
        assert steps[-1].auth == AuthResponse("bob", "https://x/bob", 1)  # type: ignore[union-attr]
