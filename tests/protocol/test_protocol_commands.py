"""Command encoders: the exact bytes of every command, and every argument they refuse."""

from __future__ import annotations

import array
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqclient import errors
from nsqclient.protocol import FrameDecoder, commands, encode_message
from nsqclient.protocol import names as names_mod
from nsqclient.protocol.names import (
    MAX_NAME_LENGTH,
    check_body,
    coerce_body,
    is_valid_name,
    validate_channel,
    validate_topic,
)

MSG_ID = b"0a1b2c3d4e5f6071"


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


# -- exact bytes --

PUB_T = b"PUB t\n\x00\x00\x00"  # PUB t + the first three bytes of a short length

EXACT = [
    ("magic", lambda: commands.MAGIC_V2, b"  V2"),
    ("identify", lambda: commands.identify(b'{"a":1}'), b'IDENTIFY\n\x00\x00\x00\x07{"a":1}'),
    ("identify-empty", lambda: commands.identify(b""), b"IDENTIFY\n\x00\x00\x00\x00"),
    ("auth-str", lambda: commands.auth("s3cret"), b"AUTH\n\x00\x00\x00\x06s3cret"),
    ("auth-bytes", lambda: commands.auth(b"\x00\xff"), b"AUTH\n\x00\x00\x00\x02\x00\xff"),
    ("sub", lambda: commands.sub("topic", "chan"), b"SUB topic chan\n"),
    ("sub-bytes", lambda: commands.sub(b"t", b"c#ephemeral"), b"SUB t c#ephemeral\n"),
    ("pub", lambda: commands.pub("t", b"hello"), b"PUB t\n\x00\x00\x00\x05hello"),
    ("pub-str", lambda: commands.pub("t", "h\u00e9"), b"PUB t\n\x00\x00\x00\x03h\xc3\xa9"),
    ("pub-bytearray", lambda: commands.pub("t", bytearray(b"ab")), b"PUB t\n\x00\x00\x00\x02ab"),
    ("pub-memoryview", lambda: commands.pub("t", memoryview(b"xabcx")[1:4]), PUB_T + b"\x03abc"),
    ("pub-strided-view", lambda: commands.pub("t", memoryview(b"a-b-c")[::2]), PUB_T + b"\x03abc"),
    ("pub-wide-view", lambda: commands.pub("t", memoryview(array.array("H", [0x4142]))),
     b"PUB t\n\x00\x00\x00\x02" + array.array("H", [0x4142]).tobytes()),
    ("pub-binary", lambda: commands.pub("t", b"\n\x00\r\n"), b"PUB t\n\x00\x00\x00\x04\n\x00\r\n"),
    ("mpub", lambda: commands.mpub("t", [b"a", b"bc"]),
     b"MPUB t\n" + u32(4 + 5 + 6) + u32(2) + u32(1) + b"a" + u32(2) + b"bc"),
    ("mpub-one", lambda: commands.mpub("t", [b"abc"]),
     b"MPUB t\n" + u32(11) + u32(1) + u32(3) + b"abc"),
    ("mpub-mixed",
     lambda: commands.mpub("t", iter([b"a", "\u00e9", bytearray(b"c"), memoryview(b"d")])),
     b"MPUB t\n" + u32(4 + 5 + 6 + 5 + 5) + u32(4)
     + u32(1) + b"a" + u32(2) + b"\xc3\xa9" + u32(1) + b"c" + u32(1) + b"d"),
    ("dpub", lambda: commands.dpub("t", 1500, b"x"), b"DPUB t 1500\n\x00\x00\x00\x01x"),
    ("dpub-zero", lambda: commands.dpub("t", 0, b"x"), b"DPUB t 0\n\x00\x00\x00\x01x"),
    ("dpub-max", lambda: commands.dpub("t", 3_600_000, b"x"), b"DPUB t 3600000\n\x00\x00\x00\x01x"),
    ("rdy-0", lambda: commands.rdy(0), b"RDY 0\n"),
    ("rdy", lambda: commands.rdy(25), b"RDY 25\n"),
    ("rdy-max", lambda: commands.rdy(2500), b"RDY 2500\n"),
    ("rdy-raised-max", lambda: commands.rdy(5000, max_rdy_count=5000), b"RDY 5000\n"),
    ("rdy-unbounded", lambda: commands.rdy(10**6, max_rdy_count=None), b"RDY 1000000\n"),
    ("fin", lambda: commands.fin(MSG_ID), b"FIN 0a1b2c3d4e5f6071\n"),
    ("fin-str", lambda: commands.fin(MSG_ID.decode()), b"FIN 0a1b2c3d4e5f6071\n"),  # type: ignore[arg-type]
    ("req", lambda: commands.req(MSG_ID), b"REQ 0a1b2c3d4e5f6071 0\n"),
    ("req-delay", lambda: commands.req(MSG_ID, 90_000), b"REQ 0a1b2c3d4e5f6071 90000\n"),
    ("req-huge", lambda: commands.req(MSG_ID, 10**9), b"REQ 0a1b2c3d4e5f6071 1000000000\n"),
    ("touch", lambda: commands.touch(MSG_ID), b"TOUCH 0a1b2c3d4e5f6071\n"),
    ("cls", commands.cls, b"CLS\n"),
    ("nop", commands.nop, b"NOP\n"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "expected"), [(b, e) for _, b, e in EXACT], ids=[n for n, _, _ in EXACT]
)
def test_exact_bytes(build: Callable[[], bytes], expected: bytes) -> None:
    data = build()
    assert type(data) is bytes
    assert data == expected


@given(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_mpub_body_layout(bodies: list[bytes]) -> None:
    # [u32 total][u32 count]([u32 len][data])*, with total counting everything after itself
    data = commands.mpub("topic", bodies)
    head = b"MPUB topic\n"
    assert data.startswith(head)
    (total,) = struct.unpack_from(">I", data, len(head))
    rest = data[len(head) + 4 :]
    assert total == len(rest) == 4 + sum(4 + len(b) for b in bodies)
    (count,) = struct.unpack_from(">I", rest)
    assert count == len(bodies)
    pos = 4
    for body in bodies:
        (size,) = struct.unpack_from(">I", rest, pos)
        assert rest[pos + 4 : pos + 4 + size] == body
        pos += 4 + size
    assert pos == len(rest)


@given(st.binary(min_size=1, max_size=2000))
@settings(max_examples=100, deadline=None)
def test_pub_length_prefix(body: bytes) -> None:
    data = commands.pub("t", body)
    assert data[:6] == b"PUB t\n"
    assert struct.unpack_from(">I", data, 6)[0] == len(body)
    assert data[10:] == body


_TOPICS = st.sampled_from(["t", "orders.v2", "a#ephemeral", "x" * 64, "", "bad topic", 7])
_BODIES = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=100),
    st.binary(min_size=1, max_size=50).map(bytearray),
    st.binary(min_size=1, max_size=50).map(memoryview),
    st.integers(),
)


@given(_TOPICS, _BODIES, st.integers(min_value=1, max_value=200))
@settings(max_examples=300, deadline=None)
def test_pub_parts_are_pub_unjoined_and_refuse_the_same(
    topic: Any, body: Any, max_msg_size: int
) -> None:
    """The coalescing Writer's parts are exactly a PUB's, and bad input fails the same way."""
    try:
        expected: bytes | type[BaseException] = commands.pub(topic, body, max_msg_size=max_msg_size)
    except errors.InvalidInputError as exc:
        expected = type(exc)
    try:
        prefix, part = commands.pub_parts(topic, body, max_msg_size=max_msg_size)
    except errors.InvalidInputError as exc:
        assert expected is type(exc)
        return
    assert type(part) is bytes
    assert prefix + u32(len(part)) + part == expected
    assert commands.pub_parts(topic, body, max_msg_size=max_msg_size) == (prefix, part)  # cached


def test_encoded_message_round_trip_through_the_decoder() -> None:
    # frame encoders -> decoder, for the fields a command later echoes back (the id FIN takes)
    [msg] = FrameDecoder().feed(encode_message(1, 1, MSG_ID, b"x"))
    assert commands.fin(msg.id) == b"FIN " + MSG_ID + b"\n"  # type: ignore[union-attr]


# -- names --

VALID_NAMES = [
    "a",
    "0",
    ".",
    "-",
    "_",
    "A.b-c_9",
    "a" * 64,
    "a" * 54 + "#ephemeral",  # 64 with the suffix
    "t#ephemeral",
    "...#ephemeral",
]
INVALID_NAMES = [
    "",
    "a" * 65,
    "a" * 55 + "#ephemeral",  # 65: the suffix counts toward the limit
    "#ephemeral",  # nothing before the suffix
    "a#eph",
    "a#ephemeral#ephemeral",
    "a#Ephemeral",
    "a b",  # would inject a parameter
    "a\n",  # trailing newline: would end the command line
    "a\nPUB x",
    "a\r",
    "a\t",
    "a\x00",
    "a/b",
    "a:b",
    "a!",
    "caf\u00e9",  # non-ASCII
    "\u0430",  # Cyrillic a, looks like "a"
    "\u0661",  # Arabic-Indic digit: a digit to str.isdigit, not to nsqd
    "t\u200b",  # zero-width space
]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_names(name: str) -> None:
    wire = name.encode()
    assert is_valid_name(wire)
    assert validate_topic(name) == wire
    assert validate_channel(name) == wire
    assert validate_topic(wire) == wire
    assert validate_channel(wire) == wire
    assert commands.sub(name, name) == b"SUB " + wire + b" " + wire + b"\n"
    assert commands.pub(name, b"x").startswith(b"PUB " + wire + b"\n")


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_names(name: str) -> None:
    wire = name.encode("utf-8")
    assert not is_valid_name(wire)
    for topic in (name, wire):
        with pytest.raises(errors.InvalidTopicError, match="topic name"):
            validate_topic(topic)
        with pytest.raises(errors.InvalidChannelError, match="channel name"):
            validate_channel(topic)
    calls: list[tuple[type[Exception], Callable[[], object]]] = [
        (errors.InvalidTopicError, lambda: commands.sub(name, "ok")),
        (errors.InvalidChannelError, lambda: commands.sub("ok", name)),
        (errors.InvalidTopicError, lambda: commands.pub(name, b"x")),
        (errors.InvalidTopicError, lambda: commands.mpub(name, [b"x"])),
        (errors.InvalidTopicError, lambda: commands.dpub(name, 0, b"x")),
    ]
    for exc_type, call in calls:
        with pytest.raises(exc_type) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, errors.InvalidInputError)
        assert isinstance(info.value, errors.NSQError)


def test_name_errors_say_why() -> None:
    with pytest.raises(errors.InvalidTopicError, match="it is empty"):
        validate_topic("")
    with pytest.raises(errors.InvalidTopicError, match="65 characters long"):
        validate_topic("a" * 65)
    with pytest.raises(errors.InvalidChannelError, match="#ephemeral' included"):
        validate_channel("a" * 55 + "#ephemeral")
    with pytest.raises(errors.InvalidTopicError, match="only letters, digits"):
        validate_topic("a b")


@pytest.mark.parametrize("bad", [None, 1, 1.5, ["a"], ("a",), object()])
def test_names_of_wrong_type(bad: Any) -> None:
    with pytest.raises(errors.InvalidTopicError, match="must be str or bytes"):
        validate_topic(bad)
    with pytest.raises(errors.InvalidChannelError, match="must be str or bytes"):
        validate_channel(bad)
    with pytest.raises(errors.InvalidTopicError):
        commands.pub(bad, b"x")


@pytest.mark.parametrize("cached_first", [False, True])
@pytest.mark.parametrize(
    "make", [bytearray, memoryview, lambda b: memoryview(bytearray(b))], ids=["ba", "mv", "rw-mv"]
)
def test_bytes_like_names_are_judged_by_their_bytes(cached_first: bool, make: Any) -> None:
    # A read-only memoryview compares (and hashes) equal to bytes, so it can hit the cache; the
    # answer must not depend on whether it does. (It used to: refused when not cached, accepted
    # when cached, and a writable memoryview raised a bare ValueError from hashing.)
    name = b"bl-%d" % id(make) + (b"-c" if cached_first else b"-n")
    if cached_first:
        validate_topic(name)
        validate_channel(name)
    assert validate_topic(make(name)) == name and type(validate_topic(make(name))) is bytes
    assert validate_channel(make(name)) == name
    assert commands.sub(make(name), make(name)) == b"SUB " + name + b" " + name + b"\n"
    for bad in (b"bad name", b"", b"x" * 65):
        with pytest.raises(errors.InvalidTopicError):
            validate_topic(make(bad))
        with pytest.raises(errors.InvalidChannelError):
            validate_channel(make(bad))


def test_a_mutable_name_buffer_is_not_kept() -> None:
    buf = bytearray(b"mutable-topic")
    assert validate_topic(buf) == b"mutable-topic"
    buf[:] = b"bad topic!!!!"
    with pytest.raises(errors.InvalidTopicError):
        validate_topic(buf)


def test_max_name_length_constant() -> None:
    assert MAX_NAME_LENGTH == 64


def test_name_cache_never_remembers_a_bad_name_and_survives_overflow() -> None:
    for _ in range(2):
        with pytest.raises(errors.InvalidTopicError):
            validate_topic("bad name")
    names = [f"topic-{i}" for i in range(names_mod._CACHE_LIMIT + 50)]
    for name in names:
        assert validate_topic(name) == name.encode()
        assert validate_channel(name) == name.encode()
    assert len(names_mod._topics) <= names_mod._CACHE_LIMIT
    assert len(names_mod._channels) <= names_mod._CACHE_LIMIT
    # str and bytes spellings of the same name stay distinct cache keys and both work
    assert validate_topic("same") == validate_topic(b"same") == b"same"


@given(st.text(max_size=70))
@settings(max_examples=300, deadline=None)
def test_name_rule_matches_a_direct_reading_of_nsqd(name: str) -> None:
    # nsqd: 1..64 bytes of [.a-zA-Z0-9_-], optionally followed by "#ephemeral" (within the 64)
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    stem = name.removesuffix("#ephemeral")
    expected = 0 < len(name) <= 64 and len(stem) > 0 and all(c in allowed for c in stem)
    try:
        validate_topic(name)
        accepted = True
    except errors.InvalidTopicError:
        accepted = False
    assert accepted is expected


# -- bodies --

ACCEPTED_BODIES = [
    (b"abc", b"abc"),
    (bytearray(b"abc"), b"abc"),
    (memoryview(b"abc"), b"abc"),
    ("abc", b"abc"),
    ("\u00e9", b"\xc3\xa9"),
    (memoryview(b"0a1b2c")[::2], b"012"),
]


@pytest.mark.parametrize(("body", "wire"), ACCEPTED_BODIES)
def test_accepted_body_types(body: Any, wire: bytes) -> None:
    assert bytes(coerce_body(body)) == wire
    assert commands.pub("t", body) == b"PUB t\n" + u32(len(wire)) + wire
    assert commands.dpub("t", 5, body) == b"DPUB t 5\n" + u32(len(wire)) + wire
    assert commands.mpub("t", [body]).endswith(u32(len(wire)) + wire)


def test_body_subclasses_are_accepted() -> None:
    class B(bytes):
        pass

    class S(str):
        pass

    assert commands.pub("t", B(b"ab")) == b"PUB t\n" + u32(2) + b"ab"
    assert commands.pub("t", S("ab")) == b"PUB t\n" + u32(2) + b"ab"


@pytest.mark.parametrize("body", [None, 1, 1.5, True, {"a": 1}, [b"a"], (b"a",), object()])
def test_refused_body_types(body: Any) -> None:
    for call in (
        lambda: commands.pub("t", body),
        lambda: commands.dpub("t", 0, body),
        lambda: commands.mpub("t", [b"ok", body]),
        lambda: check_body(body, 100),
    ):
        with pytest.raises(
            errors.InvalidBodyTypeError, match="bytes, bytearray, memoryview or str"
        ) as info:
            call()
        assert isinstance(info.value, TypeError)
        assert isinstance(info.value, errors.InvalidInputError)
    with pytest.raises(errors.InvalidBodyTypeError) as info:
        coerce_body(body)
    hint = "serialise it first" in str(info.value)
    assert hint is (body is not None)


@pytest.mark.parametrize("empty", [b"", bytearray(), memoryview(b""), ""])
def test_empty_bodies_are_refused(empty: Any) -> None:
    for call in (
        lambda: commands.pub("t", empty),
        lambda: commands.dpub("t", 0, empty),
        lambda: commands.mpub("t", [b"ok", empty]),
    ):
        with pytest.raises(errors.EmptyMessageError, match="empty") as info:
            call()
        assert isinstance(info.value, ValueError)


def test_body_size_limits() -> None:
    limit = commands.DEFAULT_MAX_MSG_SIZE
    assert limit == 1_048_576
    assert len(commands.pub("t", b"x" * limit)) == 10 + limit
    with pytest.raises(
        errors.MessageTooLargeError, match="1048577 bytes, above max_msg_size=1048576"
    ):
        commands.pub("t", b"x" * (limit + 1))
    with pytest.raises(errors.MessageTooLargeError):
        commands.dpub("t", 0, b"x" * (limit + 1))
    with pytest.raises(errors.MessageTooLargeError):
        commands.mpub("t", [b"x", b"x" * (limit + 1)])
    # custom limits, and str bodies measured in UTF-8 bytes
    assert commands.pub("t", "\u00e9" * 5, max_msg_size=10)
    with pytest.raises(errors.MessageTooLargeError, match="12 bytes"):
        commands.pub("t", "\u00e9" * 6, max_msg_size=10)
    with pytest.raises(errors.MessageTooLargeError):
        commands.pub("t", memoryview(array.array("I", [1, 2, 3])), max_msg_size=11)
    assert commands.pub("t", memoryview(array.array("I", [1, 2, 3])), max_msg_size=12)


def test_mpub_total_limit() -> None:
    # total = 4 (count) + sum(4 + len) must be <= max_body_size
    bodies = [b"x" * 44, b"y" * 44]  # 4 + 48 + 48 = 100
    assert commands.mpub("t", bodies, max_body_size=100)
    with pytest.raises(errors.MessageTooLargeError, match="MPUB body is 101 bytes") as info:
        commands.mpub("t", [b"x" * 44, b"y" * 45], max_body_size=100)
    assert isinstance(info.value, ValueError)
    assert commands.DEFAULT_MAX_BODY_SIZE == 5_242_880
    big = [b"z" * 1_048_576] * 5  # 5 MiB of bodies + 24 bytes of framing > 5 MiB
    with pytest.raises(errors.MessageTooLargeError, match="above max_body_size=5242880"):
        commands.mpub("t", big)


@pytest.mark.parametrize(
    ("bodies", "exc_type"),
    [
        ([], errors.InvalidArgumentError),
        ((), errors.InvalidArgumentError),
        (iter([]), errors.InvalidArgumentError),
        (b"abc", errors.InvalidArgumentError),  # a single body where a sequence is expected
        ("abc", errors.InvalidArgumentError),
        (bytearray(b"abc"), errors.InvalidArgumentError),
        (memoryview(b"abc"), errors.InvalidArgumentError),
        (None, errors.InvalidBodyTypeError),
        (5, errors.InvalidBodyTypeError),
        ({b"a": b"b"}, errors.InvalidBodyTypeError),  # would publish the keys
    ],
)
def test_mpub_refuses_bad_collections(bodies: Any, exc_type: type[Exception]) -> None:
    with pytest.raises(exc_type):
        commands.mpub("t", bodies)


# -- numbers and ids --

BAD_DELAYS = [-1, -(10**9), True, False, 1.0, 1.5, "10", None, 10**0.5]


@pytest.mark.parametrize("delay", BAD_DELAYS)
def test_bad_delays(delay: Any) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="non-negative int") as info:
        commands.dpub("t", delay, b"x")
    assert isinstance(info.value, ValueError)
    with pytest.raises(errors.InvalidArgumentError, match="non-negative int"):
        commands.req(MSG_ID, delay)


def test_delay_upper_bounds() -> None:
    assert commands.DEFAULT_MAX_REQ_TIMEOUT_MS == 3_600_000
    with pytest.raises(errors.InvalidArgumentError, match="3600001 is above 3600000"):
        commands.dpub("t", 3_600_001, b"x")
    assert commands.dpub("t", 10, b"x", max_delay_ms=10)
    with pytest.raises(errors.InvalidArgumentError):
        commands.dpub("t", 11, b"x", max_delay_ms=10)
    # REQ: nsqd clamps, so no bound unless asked for
    assert commands.req(MSG_ID, 3_600_001)
    with pytest.raises(errors.InvalidArgumentError):
        commands.req(MSG_ID, 11, max_delay_ms=10)


@pytest.mark.parametrize("count", [-1, True, False, 1.0, "1", None, 2501])
def test_bad_rdy_counts(count: Any) -> None:
    with pytest.raises(errors.InvalidArgumentError) as info:
        commands.rdy(count)
    assert isinstance(info.value, ValueError)


def test_rdy_bound_follows_the_server() -> None:
    assert commands.DEFAULT_MAX_RDY_COUNT == 2500
    with pytest.raises(errors.InvalidArgumentError, match="max_rdy_count=100"):
        commands.rdy(101, max_rdy_count=100)
    assert commands.rdy(100, max_rdy_count=100) == b"RDY 100\n"


BAD_IDS = [
    b"",
    b"0a1b2c3d4e5f607",  # 15
    b"0a1b2c3d4e5f60711",  # 17
    "0a1b2c3d4e5f607",
    "\u00e90a1b2c3d4e5f60",  # 16 characters, not ASCII
    bytearray(MSG_ID),
    None,
    12345678901234567,
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_message_ids(bad: Any) -> None:
    for encode in (commands.fin, commands.req, commands.touch):
        with pytest.raises(errors.InvalidArgumentError) as info:
            encode(bad)
        assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("secret", [b"", ""])
def test_empty_auth_secret(secret: str | bytes) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="empty"):
        commands.auth(secret)


def test_message_req_validates_its_delay() -> None:
    from nsqclient.message import Message

    msg = Message(1, 1, MSG_ID, b"x")
    for bad in (-1, 1.5, True):
        with pytest.raises(errors.InvalidArgumentError):
            msg.req(bad)  # type: ignore[arg-type]
    assert not msg.has_responded
    msg.req(0)
    assert msg.has_responded
