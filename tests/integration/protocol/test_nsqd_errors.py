"""Local validation matches the server: for each kind of command our encoders refuse to build,
the raw bad bytes are sent by hand to real nsqd and its exact error frame is checked, and the
encoder is shown to refuse the same input with the matching typed error.

Only the bytes nsqd needs to reach its verdict are sent (the command line, a size field), never a
body it would not read: closing a socket with unread input makes the kernel send RST, which could
destroy the error frame before we read it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from nsqd_support import options, unique

from nsqclient import errors
from nsqclient.protocol import OK, ErrorFrame, IdentifyOptions, commands
from nsqclient.protocol.names import is_valid_name
from nsqclient.testing.daemons import NsqdProcess
from tests.rawconn_support import RawConnection

pytestmark = pytest.mark.timeout(60)

MAX_MSG = 1024
MAX_BODY = 4096
ID = b"0a1b2c3d4e5f6071"


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


@pytest.fixture
def small_nsqd(nsqd_factory: Callable[..., NsqdProcess]) -> NsqdProcess:
    """nsqd with small size limits, so "too big" cases need kilobytes, not megabytes."""
    return nsqd_factory(extra_args=[f"--max-msg-size={MAX_MSG}", f"--max-body-size={MAX_BODY}"])


@dataclass(frozen=True)
class Case:
    id: str
    raw: bytes  # sent after magic + IDENTIFY (+ SUB when subscribed)
    server: str  # nsqd's exact error frame text
    local: Callable[[], object]  # our encoder given the same input
    local_error: type[Exception]
    subscribed: bool = False
    small: bool = False  # needs the small-limit nsqd


BAD = "bad!"

CASES = [
    # names
    Case("pub-bad-topic", b"PUB bad!\n", 'E_BAD_TOPIC PUB topic name "bad!" is not valid',
         lambda: commands.pub(BAD, b"x"), errors.InvalidTopicError),
    Case("sub-bad-topic", b"SUB bad! ch\n", 'E_BAD_TOPIC SUB topic name "bad!" is not valid',
         lambda: commands.sub(BAD, "ch"), errors.InvalidTopicError),
    # nsqd repeats the code inside the MPUB description (nsq-protocol.md §4.5)
    Case("mpub-bad-topic", b"MPUB bad!\n",
         'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!" is not valid',
         lambda: commands.mpub(BAD, [b"x"]), errors.InvalidTopicError),
    Case("dpub-bad-topic", b"DPUB bad! 0\n", 'E_BAD_TOPIC DPUB topic name "bad!" is not valid',
         lambda: commands.dpub(BAD, 0, b"x"), errors.InvalidTopicError),
    Case("sub-bad-channel", b"SUB good bad!\n",
         'E_BAD_CHANNEL SUB channel name "bad!" is not valid',
         lambda: commands.sub("good", BAD), errors.InvalidChannelError),
    Case("pub-empty-topic", b"PUB \n", 'E_BAD_TOPIC PUB topic name "" is not valid',
         lambda: commands.pub("", b"x"), errors.InvalidTopicError),
    # empty bodies
    Case("pub-empty", b"PUB t\n" + u32(0), "E_BAD_MESSAGE PUB invalid message body size 0",
         lambda: commands.pub("t", b""), errors.EmptyMessageError),
    Case("dpub-empty", b"DPUB t 0\n" + u32(0), "E_BAD_MESSAGE DPUB invalid message body size 0",
         lambda: commands.dpub("t", 0, b""), errors.EmptyMessageError),
    Case("mpub-empty-item", b"MPUB t\n" + u32(8) + u32(1) + u32(0),
         "E_BAD_MESSAGE MPUB invalid message(0) body size 0",
         lambda: commands.mpub("t", [b""]), errors.EmptyMessageError),
    # too big (nsqd started with --max-msg-size=1024 --max-body-size=4096)
    Case("pub-too-big", b"PUB t\n" + u32(MAX_MSG + 1),
         "E_BAD_MESSAGE PUB message too big 1025 > 1024",
         lambda: commands.pub("t", b"x" * (MAX_MSG + 1), max_msg_size=MAX_MSG),
         errors.MessageTooLargeError, small=True),
    Case("dpub-too-big", b"DPUB t 0\n" + u32(MAX_MSG + 1),
         "E_BAD_MESSAGE DPUB message too big 1025 > 1024",
         lambda: commands.dpub("t", 0, b"x" * (MAX_MSG + 1), max_msg_size=MAX_MSG),
         errors.MessageTooLargeError, small=True),
    Case("mpub-item-too-big", b"MPUB t\n" + u32(4 + 4 + MAX_MSG + 1) + u32(1) + u32(MAX_MSG + 1),
         "E_BAD_MESSAGE MPUB message too big 1025 > 1024",
         lambda: commands.mpub("t", [b"x" * (MAX_MSG + 1)], max_msg_size=MAX_MSG),
         errors.MessageTooLargeError, small=True),
    Case("mpub-body-too-big", b"MPUB t\n" + u32(MAX_BODY + 1),
         "E_BAD_BODY MPUB body too big 4097 > 4096",
         lambda: commands.mpub("t", [b"a" * 1020] * 3 + [b"b" * 1017], max_msg_size=MAX_MSG,
                               max_body_size=MAX_BODY),
         errors.MessageTooLargeError, small=True),
    Case("mpub-zero-messages", b"MPUB t\n" + u32(4) + u32(0),
         "E_BAD_BODY MPUB invalid message count 0",
         lambda: commands.mpub("t", []), errors.InvalidArgumentError),
    # numbers
    Case("dpub-delay-too-big", b"DPUB t 3600001\n",
         "E_INVALID DPUB timeout 3600001 out of range 0-3600000",
         lambda: commands.dpub("t", 3_600_001, b"x"), errors.InvalidArgumentError),
    Case("dpub-negative-delay", b"DPUB t -1\n", "E_INVALID DPUB could not parse timeout -1",
         lambda: commands.dpub("t", -1, b"x"), errors.InvalidArgumentError),
    Case("rdy-too-big", b"RDY 2501\n", "E_INVALID RDY count 2501 out of range 0-2500",
         lambda: commands.rdy(2501), errors.InvalidArgumentError, subscribed=True),
    Case("rdy-negative", b"RDY -1\n", "E_INVALID RDY could not parse count -1",
         lambda: commands.rdy(-1), errors.InvalidArgumentError, subscribed=True),
    Case("req-negative-delay", b"REQ " + ID + b" -1\n", "E_INVALID REQ could not parse timeout -1",
         lambda: commands.req(ID, -1), errors.InvalidArgumentError, subscribed=True),
    # message ids
    Case("fin-short-id", b"FIN abc\n", "E_INVALID invalid message ID",
         lambda: commands.fin(b"abc"), errors.InvalidArgumentError, subscribed=True),
    Case("fin-long-id", b"FIN " + ID + b"0\n", "E_INVALID invalid message ID",
         lambda: commands.fin(ID + b"0"), errors.InvalidArgumentError, subscribed=True),
    Case("req-short-id", b"REQ abc 0\n", "E_INVALID invalid message ID",
         lambda: commands.req(b"abc", 0), errors.InvalidArgumentError, subscribed=True),
    Case("touch-short-id", b"TOUCH abc\n", "E_INVALID invalid message ID",
         lambda: commands.touch(b"abc"), errors.InvalidArgumentError, subscribed=True),
    # AUTH
    Case("auth-empty", b"AUTH\n" + u32(0), "E_BAD_BODY AUTH invalid body size 0",
         lambda: commands.auth(b""), errors.InvalidArgumentError),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_server_and_encoder_refuse_the_same_input(
    case: Case, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(case.local_error) as info:
        case.local()
    assert isinstance(info.value, errors.InvalidInputError)
    server: NsqdProcess = request.getfixturevalue("small_nsqd" if case.small else "nsqd")
    with RawConnection.connect(server.tcp_address, options()) as conn:
        if case.subscribed:
            assert conn.command(commands.sub(unique(), "ch")) is OK
        conn.send(case.raw)
        events = conn.expect_closed()  # every one of these is fatal
    assert events == [ErrorFrame(case.server)]
    exc = events[0].to_exception(server.tcp_address)
    assert exc.fatal
    assert exc.code == case.server.split(" ", 1)[0]


def test_the_same_encoders_pass_valid_input_to_the_small_nsqd(small_nsqd: NsqdProcess) -> None:
    # the limits on both sides agree at the boundary too
    topic = unique()
    with RawConnection.connect(small_nsqd.tcp_address, options()) as conn:
        assert conn.command(commands.pub(topic, b"x" * MAX_MSG, max_msg_size=MAX_MSG)) is OK
        assert (
            conn.command(commands.dpub(topic, 3_600_000, b"x" * MAX_MSG, max_msg_size=MAX_MSG))
            is OK
        )
        exactly = [b"a" * 1020] * 3 + [b"b" * 1016]  # 4 + 3 * 1024 + 1020 = 4096
        data = commands.mpub(topic, exactly, max_msg_size=MAX_MSG, max_body_size=MAX_BODY)
        assert struct.unpack_from(">I", data, len(b"MPUB ") + len(topic) + 1)[0] == MAX_BODY
        assert conn.command(data) is OK


NAMES = [
    "a",
    "A.b-c_9",
    "a" * 64,
    "a" * 54 + "#ephemeral",
    "x#ephemeral",
    "a" * 65,
    "a" * 55 + "#ephemeral",
    "#ephemeral",
    "a#eph",
    "a#ephemeral#ephemeral",
    "a!",
    "a/b",
    "a:b",
    "caf\u00e9",
    "\u0430",
]


@pytest.mark.parametrize("name", NAMES)
def test_name_rule_agrees_with_nsqd(nsqd: NsqdProcess, name: str) -> None:
    wire = name.encode()
    local_ok = is_valid_name(wire)
    # as a topic (PUB: checked before the body is read, so send the line only when refused)
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        if local_ok:
            assert conn.command(commands.pub(name, b"x")) is OK
        else:
            with pytest.raises(errors.InvalidTopicError):
                commands.pub(name, b"x")
            conn.send(b"PUB " + wire + b"\n")
            [error] = conn.expect_closed()
            assert isinstance(error, ErrorFrame)
            assert error.code == "E_BAD_TOPIC"
            assert error.text.startswith("E_BAD_TOPIC PUB topic name ")
            if name.isascii():
                assert error.text == f"E_BAD_TOPIC PUB topic name {json.dumps(name)} is not valid"
    # as a channel
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        if local_ok:
            assert conn.command(commands.sub(unique(), name)) is OK
        else:
            with pytest.raises(errors.InvalidChannelError):
                commands.sub("t", name)
            conn.send(b"SUB " + unique().encode() + b" " + wire + b"\n")
            [error] = conn.expect_closed()
            assert isinstance(error, ErrorFrame) and error.code == "E_BAD_CHANNEL"


# -- IDENTIFY: both compressions, and every field just outside its range --

IDENTIFY_CASES = [
    ("heartbeat_interval", 999, "heartbeat interval (999) is invalid"),
    ("heartbeat_interval", 60001, "heartbeat interval (60001) is invalid"),
    ("heartbeat_interval", -2, "heartbeat interval (-2) is invalid"),
    ("output_buffer_timeout", 24, "output buffer timeout (24) is invalid"),
    ("output_buffer_timeout", 30001, "output buffer timeout (30001) is invalid"),
    ("output_buffer_size", 63, "output buffer size (63) is invalid"),
    ("output_buffer_size", 65537, "output buffer size (65537) is invalid"),
    ("sample_rate", 100, "sample rate (100) is invalid"),
    ("sample_rate", -1, "sample rate (-1) is invalid"),
    ("msg_timeout", 999, "msg timeout (999) is invalid"),
    ("msg_timeout", 900001, "msg timeout (900001) is invalid"),
]


@pytest.mark.parametrize(("field", "value", "text"), IDENTIFY_CASES)
def test_identify_out_of_range(nsqd: NsqdProcess, field: str, value: int, text: str) -> None:
    with pytest.raises(errors.ConfigError, match=field):
        IdentifyOptions(**{field: value})
    body = options().to_dict() | {field: value}
    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + commands.identify(json.dumps(body).encode()))
        [error] = conn.expect_closed()
    assert error == ErrorFrame(f"E_BAD_BODY IDENTIFY {text}")
    assert isinstance(error.to_exception(), errors.BadBodyError)


IDENTIFY_BOUNDS = (
    [("heartbeat_interval", v) for v in (-1, 0, 1000, 60000)]
    + [("output_buffer_timeout", v) for v in (-1, 0, 25, 30000)]
    + [("output_buffer_size", v) for v in (-1, 0, 64, 65536)]
    + [("sample_rate", v) for v in (0, 99)]
    + [("msg_timeout", v) for v in (0, 1000, 900000)]
)


@pytest.mark.parametrize(("field", "value"), IDENTIFY_BOUNDS)
def test_identify_bounds_are_accepted_by_both(nsqd: NsqdProcess, field: str, value: int) -> None:
    with RawConnection.connect(nsqd.tcp_address, options(**{field: value})) as conn:
        assert conn.handshake_result is not None
        assert conn.command(commands.pub(unique(), b"x")) is OK


def test_identify_with_both_compressions(nsqd: NsqdProcess) -> None:
    with pytest.raises(errors.ConfigError, match="snappy and deflate"):
        IdentifyOptions(snappy=True, deflate=True)
    body = options().to_dict() | {"snappy": True, "deflate": True}
    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.send(commands.MAGIC_V2 + commands.identify(json.dumps(body).encode()))
        [error] = conn.expect_closed()
    assert error == ErrorFrame(
        "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    )
    assert isinstance(error.to_exception(), errors.IdentifyFailedError)


# -- non-fatal: FIN/REQ/TOUCH of an id nsqd does not know --

NOT_IN_FLIGHT = [
    (commands.fin, "E_FIN_FAILED FIN 0a1b2c3d4e5f6071 failed ID not in flight",
     errors.FinFailedError),
    (lambda i: commands.req(i, 0), "E_REQ_FAILED REQ 0a1b2c3d4e5f6071 failed ID not in flight",
     errors.ReqFailedError),
    (commands.touch, "E_TOUCH_FAILED TOUCH 0a1b2c3d4e5f6071 failed ID not in flight",
     errors.TouchFailedError),
]  # fmt: skip


@pytest.mark.parametrize(("encode", "text", "exc_type"), NOT_IN_FLIGHT, ids=["fin", "req", "touch"])
def test_unknown_id_is_a_non_fatal_error(
    nsqd: NsqdProcess, encode: Callable[[bytes], bytes], text: str, exc_type: type[Any]
) -> None:
    topic = unique()
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        assert conn.command(commands.sub(topic, "ch")) is OK
        conn.send(encode(ID))  # well formed: our encoder accepts it, only nsqd can know
        error = conn.read_error()
        assert error.text == text
        assert not error.fatal
        exc = error.to_exception()
        assert isinstance(exc, exc_type) and isinstance(exc, errors.ResponseFailedError)
        assert exc.fatal is False
        # the connection stays usable: a message still flows and can be finished
        conn.send(commands.rdy(1))
        assert conn.command(commands.pub(unique(), b"publish still works")) is OK
        nsqd.pub(topic, b"delivered after the error")
        msg = conn.read_message()
        assert msg.body == b"delivered after the error"
        conn.send(commands.fin(msg.id))
        assert conn.command(commands.pub(unique(), b"fin was accepted")) is OK


def test_fin_before_sub_is_fatal(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        conn.send(commands.fin(ID))
        assert conn.expect_closed() == [ErrorFrame("E_INVALID cannot FIN in current state")]


def test_rdy_before_sub_is_fatal(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        conn.send(commands.rdy(1))
        assert conn.expect_closed() == [ErrorFrame("E_INVALID cannot RDY in current state")]


def test_sub_twice_is_fatal(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        assert conn.command(commands.sub(unique(), "ch")) is OK
        conn.send(commands.sub(unique(), "ch"))
        assert conn.expect_closed() == [ErrorFrame("E_INVALID cannot SUB in current state")]


def test_auth_on_nsqd_without_auth(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        conn.send(commands.auth(b"secret"))
        [error] = conn.expect_closed()
    assert error == ErrorFrame("E_AUTH_DISABLED AUTH disabled")
    assert isinstance(error.to_exception(), errors.ServerAuthError)


async def test_default_output_buffer_timeout_refused_by_a_stricter_nsqd_says_what_to_do(
    nsqd_factory: Any,
) -> None:
    """nsqclient asks for 25 ms; an nsqd whose --min-output-buffer-timeout is higher refuses
    IDENTIFY, and the error names the option and the way out (0: nsqd's own default)."""
    from nsqclient.aio import Reader

    strict = nsqd_factory(extra_args=["--min-output-buffer-timeout=50ms"])
    reader = Reader("t", "c", nsqd_tcp_addresses=[strict.tcp_address])
    with pytest.raises(errors.BadBodyError, match="output buffer timeout") as info:
        await reader.start()
    await reader.close()
    assert "set a value within them, or 0 for nsqd's own default" in str(info.value)
    async with Reader(
        "t", "c", nsqd_tcp_addresses=[strict.tcp_address], output_buffer_timeout=0
    ) as ok:
        assert len(ok.connections) == 1
