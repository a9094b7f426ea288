"""FrameDecoder and the frame encoders: bytes <-> events, table-driven, plus fragmentation."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_support import decode_all, frame_header, split_at, streams, view, views

from nsqclient import errors
from nsqclient.message import Message
from nsqclient.protocol import (
    CLOSE_WAIT,
    HEARTBEAT,
    OK,
    CloseWait,
    ErrorFrame,
    FrameDecoder,
    Heartbeat,
    Response,
    encode_error,
    encode_frame,
    encode_message,
    encode_response,
)
from nsqclient.protocol.frames import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, UntypedErrorReply

MSG_ID = b"0a1b2c3d4e5f6071"
TS = 1_700_000_000_123_456_789


def raw_frame(kind: int, payload: bytes) -> bytes:
    """Build a frame by hand (independently of encode_frame) to check the encoders too."""
    return struct.pack(">ii", len(payload) + 4, kind) + payload


def raw_message(ts: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    return raw_frame(2, struct.pack(">qH", ts, attempts) + msg_id + body)


# -- responses --

RESPONSE_TABLE = [
    (b"OK", ("response", b"OK")),
    (b"CLOSE_WAIT", ("close_wait",)),
    (b"_heartbeat_", ("heartbeat",)),
    (b"", ("response", b"")),
    (b"ok", ("response", b"ok")),  # case matters: not the OK singleton
    (b"OK ", ("response", b"OK ")),
    (b"_heartbeat", ("response", b"_heartbeat")),
    (
        b'{"max_rdy_count":2500,"version":"1.3.0"}',
        ("response", b'{"max_rdy_count":2500,"version":"1.3.0"}'),
    ),
    (
        b'{"identity":"bob","permission_count":2}',
        ("response", b'{"identity":"bob","permission_count":2}'),
    ),
]


@pytest.mark.parametrize(("payload", "expected"), RESPONSE_TABLE)
def test_response_frames(payload: bytes, expected: tuple[object, ...]) -> None:
    data = raw_frame(0, payload)
    assert encode_response(payload) == data
    assert encode_frame(FRAME_RESPONSE, payload) == data
    [event] = FrameDecoder().feed(data)
    assert view(event) == expected


def test_singletons_are_reused() -> None:
    # the hot path compares by identity (`event is HEARTBEAT`), so the decoder must hand these out
    decoder = FrameDecoder()
    events = decoder.feed(
        encode_response(b"OK") + encode_response(b"_heartbeat_") + encode_response(b"CLOSE_WAIT")
    )
    assert events[0] is OK
    assert events[1] is HEARTBEAT
    assert events[2] is CLOSE_WAIT
    assert isinstance(HEARTBEAT, Heartbeat)
    assert isinstance(CLOSE_WAIT, CloseWait) and isinstance(CLOSE_WAIT, Response)
    assert CLOSE_WAIT.data == b"CLOSE_WAIT"
    assert Response(b"OK") == OK and hash(OK) == hash(Response(b"OK"))
    assert Response(b"x") != Response(b"y")
    assert repr(HEARTBEAT) == "HEARTBEAT" and repr(CLOSE_WAIT) == "CLOSE_WAIT"


def test_json_response_payload_is_verbatim() -> None:
    doc = {"max_rdy_count": 2500, "version": "1.3.0", "tls_v1": False, "msg_timeout": 60000}
    payload = json.dumps(doc).encode()
    [event] = FrameDecoder().feed(encode_response(payload))
    assert isinstance(event, Response)
    assert json.loads(event.data) == doc


# -- errors --

# Every code of nsq-protocol.md §5.2: the exception type, and whether nsqd closes the connection.
ERROR_CODES = [
    ("E_BAD_PROTOCOL", errors.BadProtocolError, True),
    ("E_INVALID", errors.InvalidError, True),
    ("E_BAD_BODY", errors.BadBodyError, True),
    ("E_BAD_TOPIC", errors.BadTopicError, True),
    ("E_BAD_CHANNEL", errors.BadChannelError, True),
    ("E_BAD_MESSAGE", errors.BadMessageError, True),
    ("E_IDENTIFY_FAILED", errors.IdentifyFailedError, True),
    ("E_SUB_FAILED", errors.SubscribeFailedError, True),
    ("E_PUB_FAILED", errors.PublishFailedError, True),
    ("E_MPUB_FAILED", errors.PublishFailedError, True),
    ("E_DPUB_FAILED", errors.PublishFailedError, True),
    ("E_FIN_FAILED", errors.FinFailedError, False),
    ("E_REQ_FAILED", errors.ReqFailedError, False),
    ("E_TOUCH_FAILED", errors.TouchFailedError, False),
    ("E_AUTH_DISABLED", errors.ServerAuthError, True),
    ("E_AUTH_FIRST", errors.ServerAuthError, True),
    ("E_AUTH_FAILED", errors.ServerAuthError, True),
    ("E_UNAUTHORIZED", errors.ServerAuthError, True),
    ("E_AUTH_ERROR", errors.ServerAuthError, True),
]


@pytest.mark.parametrize(("code", "exc_type", "fatal"), ERROR_CODES)
def test_error_frames_for_every_code(
    code: str, exc_type: type[errors.ServerError], fatal: bool
) -> None:
    text = f"{code} something went wrong: {code.lower()}"
    data = raw_frame(1, text.encode())
    assert encode_error(text) == data
    assert encode_error(text.encode()) == data
    assert encode_frame(FRAME_ERROR, text.encode()) == data
    [event] = FrameDecoder().feed(data)
    assert isinstance(event, ErrorFrame)
    assert event.text == text
    assert event.code == code
    assert event.fatal is fatal
    assert (code in errors.NON_FATAL_CODES) is (not fatal)
    exc = event.to_exception("127.0.0.1:4150")
    assert type(exc) is exc_type
    assert isinstance(exc, errors.ServerError) and isinstance(exc, errors.NSQError)
    assert exc.code == code
    assert exc.fatal is fatal
    assert exc.text == text
    assert exc.address == "127.0.0.1:4150"
    assert exc.description == f"something went wrong: {code.lower()}"
    assert "127.0.0.1:4150" in str(exc)
    if exc_type is errors.ServerAuthError:
        assert isinstance(exc, errors.AuthError)
    if not fatal:
        assert isinstance(exc, errors.ResponseFailedError)


def test_bare_error_code_and_unknown_code() -> None:
    # nsqd sends E_BAD_PROTOCOL with no description at all
    [event] = FrameDecoder().feed(raw_frame(1, b"E_BAD_PROTOCOL"))
    assert isinstance(event, ErrorFrame)
    assert event.code == "E_BAD_PROTOCOL" and event.fatal
    exc = event.to_exception()
    assert isinstance(exc, errors.BadProtocolError)
    assert exc.description == "" and exc.address is None
    # an unknown code is a plain, fatal ServerError that still carries its code
    [event] = FrameDecoder().feed(raw_frame(1, b"E_SOMETHING_NEW details here"))
    assert isinstance(event, ErrorFrame)
    exc = event.to_exception()
    assert type(exc) is errors.ServerError
    assert exc.code == "E_SOMETHING_NEW" and exc.fatal
    assert exc.description == "details here"


def test_error_frame_with_invalid_utf8_is_decoded_with_replacement() -> None:
    [event] = FrameDecoder().feed(raw_frame(1, b'E_BAD_TOPIC PUB topic name "\xff" is not valid'))
    assert isinstance(event, ErrorFrame)
    assert event.code == "E_BAD_TOPIC"
    assert "\ufffd" in event.text
    assert ErrorFrame("E_X a") == ErrorFrame("E_X a") and hash(ErrorFrame("E_X a")) == hash(
        ErrorFrame("E_X a")
    )


# -- messages --

MESSAGE_TABLE = [
    pytest.param(TS, 1, MSG_ID, b"hello", id="simple"),
    pytest.param(0, 0, b"\x00" * 16, b"x", id="zeros"),
    pytest.param(2**63 - 1, 65535, b"ffffffffffffffff", b"\x00\xff" * 10, id="maxima"),
    pytest.param(-1, 7, MSG_ID, b"neg-ts", id="negative-ts"),
    pytest.param(TS, 3, MSG_ID, b"", id="zero-length-body"),
    pytest.param(TS, 2, MSG_ID, bytes(range(256)) * 4, id="binary-body"),
    pytest.param(TS, 1, MSG_ID, b"\x00\x00\x00\x06\x00\x00\x00\x00OK", id="body-looks-like-frame"),
]


class RecordingResponder:
    address = "127.0.0.1:4150"

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def message_fin(self, msg: Message) -> None:
        self.calls.append(("fin", msg.id))

    def message_req(self, msg: Message, delay_ms: int | None, backoff: bool) -> None:
        self.calls.append(("req", msg.id))

    def message_touch(self, msg: Message) -> None:
        self.calls.append(("touch", msg.id))


@pytest.mark.parametrize(("ts", "attempts", "msg_id", "body"), MESSAGE_TABLE)
def test_message_frames(ts: int, attempts: int, msg_id: bytes, body: bytes) -> None:
    data = raw_message(ts, attempts, msg_id, body)
    assert encode_message(ts, attempts, msg_id, body) == data
    responder = RecordingResponder()
    [msg] = FrameDecoder(responder).feed(data)
    assert isinstance(msg, Message)
    assert (msg.timestamp, msg.attempts, msg.id, msg.body) == (ts, attempts, msg_id, body)
    assert type(msg.id) is bytes and type(msg.body) is bytes
    assert msg.nsqd_address == "127.0.0.1:4150"
    msg.touch()
    msg.fin()
    msg.fin()  # idempotent
    msg.req()
    assert responder.calls == [("touch", msg_id), ("fin", msg_id)]


def test_message_without_responder() -> None:
    [msg] = FrameDecoder().feed(raw_message(TS, 1, MSG_ID, b"x"))
    assert isinstance(msg, Message)
    assert msg.nsqd_address is None
    msg.fin()  # no responder: nothing to call, but it still counts as answered
    assert msg.has_responded


def test_responder_can_be_swapped_between_feeds() -> None:
    first, second = RecordingResponder(), RecordingResponder()
    decoder = FrameDecoder(first)
    [a] = decoder.feed(raw_message(TS, 1, MSG_ID, b"a"))
    decoder.responder = second
    [b] = decoder.feed(raw_message(TS, 1, MSG_ID, b"b"))
    assert isinstance(a, Message) and isinstance(b, Message)
    a.fin()
    b.fin()
    assert first.calls == [("fin", MSG_ID)] and second.calls == [("fin", MSG_ID)]


@pytest.mark.parametrize("size", [1 << 20, (1 << 20) + 1, 5 * (1 << 20)])
def test_bodies_of_a_mebibyte_and_more(size: int) -> None:
    body = bytes(range(251)) * (size // 251) + b"z" * (size % 251)
    data = encode_message(TS, 1, MSG_ID, body)
    decoder = FrameDecoder(max_frame_size=size + 30)
    # in one piece
    [msg] = decoder.feed(data)
    assert isinstance(msg, Message) and msg.body == body
    # in 64 KiB reads, as a socket delivers it: nothing until the last piece
    got: list[object] = []
    step = 65536
    for i in range(0, len(data), step):
        events = decoder.feed(data[i : i + step])
        if i + step < len(data):
            assert events == []
            assert decoder.buffered == i + step
        got.extend(events)
    assert [view(e) for e in got] == [("message", TS, 1, MSG_ID, body)]
    assert decoder.buffered == 0


def test_message_frame_shorter_than_its_header_is_a_protocol_error() -> None:
    data = raw_frame(2, b"\x00" * 25)  # one byte short of ts + attempts + id
    with pytest.raises(errors.ProtocolError, match="shorter than its header"):
        FrameDecoder().feed(data)
    # exactly the header and no body is fine (a zero-length message)
    [msg] = FrameDecoder().feed(raw_frame(2, b"\x00" * 26))
    assert isinstance(msg, Message) and msg.body == b""


def test_encode_message_refuses_bad_ids() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        encode_message(TS, 1, b"short", b"x")
    with pytest.raises(ValueError, match="16 bytes"):
        encode_message(TS, 1, b"0" * 17, b"x")


# -- frame types and sizes --


@pytest.mark.parametrize("kind", [3, 4, 255, -1, 2**31 - 1])
def test_unknown_frame_type_is_a_protocol_error(kind: int) -> None:
    with pytest.raises(errors.ProtocolError, match="unknown frame type"):
        FrameDecoder().feed(frame_header(8, kind) + b"abcd")


@pytest.mark.parametrize("size", [0, 1, 3, -1, -(2**31)])
def test_size_below_four_is_a_protocol_error(size: int) -> None:
    with pytest.raises(errors.ProtocolError, match="below the minimum") as info:
        FrameDecoder().feed(frame_header(size, 0) + b"xxxxxxxx")
    assert not isinstance(info.value, errors.FrameTooLargeError)


def test_size_of_exactly_four_is_an_empty_frame() -> None:
    assert views(FrameDecoder().feed(frame_header(4, 0))) == [("response", b"")]
    assert views(FrameDecoder().feed(frame_header(4, 1))) == [("error", "")]


def test_frames_up_to_max_frame_size_are_accepted() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    assert views(decoder.feed(raw_frame(0, b"a" * 96))) == [("response", b"a" * 96)]
    with pytest.raises(errors.FrameTooLargeError, match="101 bytes exceeds the limit of 100"):
        decoder.feed(raw_frame(0, b"a" * 97))


@pytest.mark.parametrize("size", [5_242_945, 2**31 - 1])
def test_oversized_frame_fails_at_once_without_buffering(size: int) -> None:
    decoder = FrameDecoder()  # default bound: 5 MiB + 64
    with pytest.raises(errors.FrameTooLargeError) as info:
        decoder.feed(frame_header(size, 2) + b"x" * 100)
    assert isinstance(info.value, errors.ProtocolError)
    assert decoder.buffered < 200
    # the header arriving a byte at a time: the error comes as soon as the header is complete
    decoder = FrameDecoder()
    header = frame_header(size, 0)
    for i in range(7):
        assert decoder.feed(header[i : i + 1]) == []
        assert decoder.buffered == i + 1
    with pytest.raises(errors.FrameTooLargeError):
        decoder.feed(header[7:] + b"y" * 1000)


# -- many frames, fragmentation --

MIXED_STREAM = [
    (encode_response(b"OK"), ("response", b"OK")),
    (encode_message(TS, 1, MSG_ID, b"first"), ("message", TS, 1, MSG_ID, b"first")),
    (encode_response(b"_heartbeat_"), ("heartbeat",)),
    (encode_error("E_FIN_FAILED FIN 0a1b2c3d4e5f6071 failed ID not in flight"),
     ("error", "E_FIN_FAILED FIN 0a1b2c3d4e5f6071 failed ID not in flight")),
    (encode_message(TS + 1, 2, b"1" * 16, b""), ("message", TS + 1, 2, b"1" * 16, b"")),
    (encode_response(b'{"identity":"x"}'), ("response", b'{"identity":"x"}')),
    (encode_response(b"CLOSE_WAIT"), ("close_wait",)),
]  # fmt: skip


def test_every_single_split_point_of_a_mixed_stream() -> None:
    data = b"".join(f for f, _ in MIXED_STREAM)
    expected = [e for _, e in MIXED_STREAM]
    for cut in range(len(data) + 1):
        assert decode_all([data[:cut], data[cut:]]) == expected, cut


def test_every_pair_of_split_points_of_a_small_stream() -> None:
    stream = MIXED_STREAM[:4]
    data = b"".join(f for f, _ in stream)
    expected = [e for _, e in stream]
    for a in range(len(data) + 1):
        for b in range(a, len(data) + 1):
            assert decode_all([data[:a], data[a:b], data[b:]]) == expected, (a, b)


def test_one_byte_at_a_time() -> None:
    data = b"".join(f for f, _ in MIXED_STREAM)
    assert decode_all([data[i : i + 1] for i in range(len(data))]) == [e for _, e in MIXED_STREAM]


def test_many_frames_in_one_chunk() -> None:
    body = b"m" * 64
    data = b"".join(encode_message(TS + i, 1, b"%016x" % i, body) for i in range(10_000))
    events = FrameDecoder().feed(data)
    assert len(events) == 10_000
    assert all(isinstance(m, Message) and m.body == body for m in events)
    assert [m.timestamp for m in events if isinstance(m, Message)] == [
        TS + i for i in range(10_000)
    ]


def test_feed_accepts_bytearray_and_memoryview() -> None:
    data = b"".join(f for f, _ in MIXED_STREAM)
    expected = [e for _, e in MIXED_STREAM]
    assert decode_all([bytearray(data)]) == expected
    assert decode_all([memoryview(data)]) == expected
    half = len(data) // 2
    decoder = FrameDecoder()
    out = decoder.feed(memoryview(data)[:half]) + decoder.feed(bytearray(data[half:]))
    assert views(out) == expected


def test_partial_frame_counts_bytes_not_memoryview_items() -> None:
    # A memoryview whose items are wider than a byte: the decoder must count its bytes. (Counting
    # len() items made it wait for data that had already arrived.)
    import array
    import sys

    frame = encode_response(b"OKAY")  # 12 bytes
    decoder = FrameDecoder()
    assert decoder.feed(frame[:4]) == []
    assert decoder.feed(frame[4:8]) == []
    tail = memoryview(array.array("I", [int.from_bytes(frame[8:12], sys.byteorder)]))
    assert tail.nbytes == 4 and len(tail) == 1
    assert views(decoder.feed(tail)) == [("response", b"OKAY")]
    assert decoder.buffered == 0


def test_chunks_are_not_aliased() -> None:
    # a caller may reuse its read buffer: the decoder must copy what it keeps
    frame = encode_message(TS, 1, MSG_ID, b"payload!")
    buf = bytearray(frame[:20])
    decoder = FrameDecoder()
    assert decoder.feed(buf) == []
    buf[:] = b"\xee" * 20
    [msg] = decoder.feed(bytearray(frame[20:]))
    assert isinstance(msg, Message) and msg.body == b"payload!" and msg.id == MSG_ID


@given(streams, st.data())
@settings(max_examples=300, deadline=None)
def test_random_chunking_gives_the_same_events(
    stream: list[tuple[bytes, tuple[object, ...]]], data: st.DataObject
) -> None:
    raw = b"".join(f for f, _ in stream)
    expected = [e for _, e in stream]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=20))
    assert decode_all(split_at(raw, cuts)) == expected


@given(streams)
@settings(max_examples=60, deadline=None)
def test_every_split_point_of_random_streams(
    stream: list[tuple[bytes, tuple[object, ...]]],
) -> None:
    raw = b"".join(f for f, _ in stream)
    expected = [e for _, e in stream]
    for cut in range(len(raw) + 1):
        assert decode_all([raw[:cut], raw[cut:]]) == expected


@given(streams, st.lists(st.integers(1, 64), min_size=1, max_size=50))
@settings(max_examples=200, deadline=None)
def test_next_event_one_at_a_time(
    stream: list[tuple[bytes, tuple[object, ...]]], sizes: list[int]
) -> None:
    raw = b"".join(f for f, _ in stream)
    expected = [e for _, e in stream]
    decoder = FrameDecoder()
    got: list[object] = []
    pos = 0
    i = 0
    while pos < len(raw) or decoder.buffered:
        chunk = raw[pos : pos + sizes[i % len(sizes)]]
        pos += len(chunk)
        i += 1
        event = decoder.next_event(chunk)
        while event is not None:
            got.append(view(event))
            event = decoder.next_event()
        if not chunk and decoder.buffered:
            raise AssertionError("decoder holds bytes it cannot decode")
    assert got == expected
    assert decoder.next_event() is None


@given(streams, st.integers(0, 11), st.integers(1, 40), st.data())
@settings(max_examples=200, deadline=None)
def test_take_unparsed_returns_exactly_the_remaining_bytes(
    stream: list[tuple[bytes, tuple[object, ...]]], take: int, step: int, data: st.DataObject
) -> None:
    # Decode `take` frames with next_event from input that runs past them; what is left must be
    # exactly the bytes after them (they may belong to a TLS or compressed stream).
    raw = b"".join(f for f, _ in stream)
    take = min(take, len(stream))
    consumed = sum(len(f) for f, _ in stream[:take])
    decoder = FrameDecoder()
    got = []
    fed = 0
    if take:
        fed = data.draw(st.integers(0, len(raw)))
        event = decoder.next_event(raw[:fed])
        while True:
            if event is None:
                event = decoder.next_event(raw[fed : fed + step])
                fed = min(fed + step, len(raw))
                continue
            got.append(view(event))
            if len(got) == take:
                break
            event = decoder.next_event()
    assert got == [e for _, e in stream[:take]]
    assert decoder.take_unparsed() == raw[consumed:fed]
    assert decoder.buffered == 0
    assert decoder.take_unparsed() == b""
    # the decoder carries on cleanly with fresh input
    assert views(decoder.feed(encode_response(b"OK"))) == [("response", b"OK")]


def test_take_unparsed_after_feed_keeps_partial_frame() -> None:
    frame = encode_message(TS, 1, MSG_ID, b"abcdef")
    decoder = FrameDecoder()
    assert views(decoder.feed(encode_response(b"OK") + frame[:10])) == [("response", b"OK")]
    assert decoder.buffered == 10
    assert decoder.take_unparsed() == frame[:10]
    assert decoder.buffered == 0
    # a stale "need" must not stall the next frame
    assert views(decoder.feed(encode_response(b"x"))) == [("response", b"x")]


def test_next_event_leaves_following_frames_untouched() -> None:
    data = encode_response(b'{"tls_v1":true}') + b"\x16\x03\x01 this is not a frame"
    decoder = FrameDecoder()
    event = decoder.next_event(data)
    assert view(event) == ("response", b'{"tls_v1":true}')
    assert decoder.take_unparsed() == b"\x16\x03\x01 this is not a frame"


def test_next_event_needs_a_whole_frame() -> None:
    frame = encode_response(b"OK")
    decoder = FrameDecoder()
    for i in range(len(frame) - 1):
        assert decoder.next_event(frame[i : i + 1]) is None
    assert decoder.next_event(frame[-1:]) is OK
    assert decoder.next_event() is None


def test_kind_constants() -> None:
    assert (FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE) == (0, 1, 2)


# -- a publisher's read path: runs of OK replies (decoded by a fast path that must agree) --

_OK_RAW = raw_frame(FRAME_RESPONSE, b"OK")
_ok_heavy = st.lists(
    st.one_of(
        st.just((_OK_RAW, ("response", b"OK"))),
        st.just((_OK_RAW, ("response", b"OK"))),
        st.just((_OK_RAW * 3, ("response", b"OK"))),
        # a message whose body is made of OK frames must stay one message
        st.just((raw_message(TS, 1, MSG_ID, _OK_RAW * 2), ("message", TS, 1, MSG_ID, _OK_RAW * 2))),
        st.just((raw_frame(FRAME_RESPONSE, b"OKAY"), ("response", b"OKAY"))),
        st.just((raw_frame(FRAME_RESPONSE, b"_heartbeat_"), ("heartbeat",))),
    ),
    min_size=1,
    max_size=30,
)


@given(_ok_heavy, st.data())
@settings(max_examples=300, deadline=None)
def test_runs_of_ok_replies_decode_like_any_other_frames(
    stream: list[tuple[bytes, tuple[object, ...]]], data: st.DataObject
) -> None:
    raw = b"".join(f for f, _ in stream)
    expected: list[object] = []
    for frame, event in stream:
        expected.extend([event] * (3 if frame == _OK_RAW * 3 else 1))
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=6))
    assert decode_all(split_at(raw, cuts)) == expected


def test_a_chunk_of_only_ok_replies_yields_the_ok_singleton() -> None:
    decoder = FrameDecoder()
    events = decoder.feed(_OK_RAW * 100)
    assert len(events) == 100 and all(e is OK for e in events)
    assert decoder.buffered == 0
    # a partial OK after whole ones is kept, and completes with the next chunk
    events = decoder.feed(_OK_RAW * 2 + _OK_RAW[:4])
    assert len(events) == 2 and decoder.buffered == 4
    assert decoder.feed(_OK_RAW[4:]) == [OK]


def test_an_untyped_error_reply_is_named() -> None:
    """nsqlookupd's TCP port answers nsqd's magic with [size]"E_BAD_PROTOCOL" and no type."""
    reply = len(b"E_BAD_PROTOCOL").to_bytes(4, "big") + b"E_BAD_PROTOCOL"
    with pytest.raises(UntypedErrorReply) as info:
        FrameDecoder().feed(reply)
    assert info.value.text == "E_BAD_PROTOCOL"
    assert isinstance(info.value, errors.ProtocolError)
