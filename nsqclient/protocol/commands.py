"""Encoders for every client command, each returning the exact bytes to write.

Arguments are checked here, before anything is sent: topic and channel names, body types, sizes,
delays, counts and message ids, with the limits nsqd applies (its defaults unless given). Each
encoder builds its result with one join, so a body is copied once.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from itertools import chain
from typing import Final

from ..errors import (
    InvalidArgumentError,
    InvalidBodyTypeError,
    MessageTooLargeError,
)
from .names import body_size, check_body, validate_channel, validate_topic

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_MSG_SIZE",
    "DEFAULT_MAX_RDY_COUNT",
    "DEFAULT_MAX_REQ_TIMEOUT_MS",
    "MAGIC_V2",
    "auth",
    "batch_bodies",
    "check_timeout",
    "cls",
    "dpub",
    "fin",
    "fin_unchecked",
    "identify",
    "mpub",
    "nop",
    "pub",
    "pub_parts",
    "rdy",
    "rdy_unchecked",
    "req",
    "req_unchecked",
    "sub",
    "touch",
    "touch_unchecked",
]

MAGIC_V2: Final = b"  V2"
DEFAULT_MAX_MSG_SIZE: Final = 1_048_576
DEFAULT_MAX_BODY_SIZE: Final = 5_242_880
DEFAULT_MAX_REQ_TIMEOUT_MS: Final = 3_600_000
DEFAULT_MAX_RDY_COUNT: Final = 2_500

_U32 = struct.Struct(">I")
_pack_u32 = _U32.pack
_NOP: Final = b"NOP\n"
_CLS: Final = b"CLS\n"


def identify(body_json: bytes) -> bytes:
    """``IDENTIFY`` with its JSON body (see :mod:`nsqclient.protocol.identify`)."""
    return b"".join((b"IDENTIFY\n", _pack_u32(len(body_json)), body_json))


def auth(secret: str | bytes) -> bytes:
    data = secret.encode() if isinstance(secret, str) else secret
    if not data:
        raise InvalidArgumentError("auth secret must not be empty")
    return b"".join((b"AUTH\n", _pack_u32(len(data)), data))


def sub(topic: str | bytes, channel: str | bytes) -> bytes:
    return b"".join((b"SUB ", validate_topic(topic), b" ", validate_channel(channel), b"\n"))


def pub(topic: str | bytes, body: object, *, max_msg_size: int = DEFAULT_MAX_MSG_SIZE) -> bytes:
    try:
        prefix = _pub_prefixes.get(topic)
    except TypeError:  # unhashable: validate_topic below says what is wrong
        prefix = None
    if prefix is not None and type(body) is bytes and 0 < len(body) <= max_msg_size:
        return b"".join((prefix, _pack_u32(len(body)), body))  # the hot path: one join
    data = check_body(body, max_msg_size)
    return b"".join((_pub_prefix(topic), _pack_u32(body_size(data)), data))


_pub_prefixes: dict[str | bytes, bytes] = {}  # validated topic -> b"PUB <topic>\n"


def _pub_prefix(topic: str | bytes) -> bytes:
    """``b"PUB <topic>\\n"`` of a topic checked now (refused with a typed error), remembered
    for the hot paths of :func:`pub` and :func:`pub_parts` (at most 4,096 topics)."""
    prefix = b"".join((b"PUB ", validate_topic(topic), b"\n"))
    if type(topic) is str or type(topic) is bytes:
        if len(_pub_prefixes) >= 4096:
            _pub_prefixes.clear()
        _pub_prefixes[topic] = prefix
    return prefix


def pub_parts(
    topic: str | bytes, body: object, *, max_msg_size: int = DEFAULT_MAX_MSG_SIZE
) -> tuple[bytes, bytes]:
    """A PUB's two parts, ``b"PUB <topic>\\n"`` and its body as bytes, checked as :func:`pub`
    checks them but not joined: the Writer's coalescing puts the bodies of many PUBs into one
    MPUB (``b"M" + prefix``) without encoding each PUB first."""
    try:
        prefix = _pub_prefixes.get(topic)
    except TypeError:  # unhashable: validate_topic below says what is wrong
        prefix = None
    if prefix is not None and type(body) is bytes and 0 < len(body) <= max_msg_size:
        return prefix, body  # the hot path: nothing made
    data = check_body(body, max_msg_size)
    return _pub_prefix(topic), data if type(data) is bytes else bytes(data)


def dpub(
    topic: str | bytes,
    delay_ms: int,
    body: object,
    *,
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_delay_ms: int = DEFAULT_MAX_REQ_TIMEOUT_MS,
) -> bytes:
    """Deferred publish: nsqd holds the message ``delay_ms`` (0 to its --max-req-timeout)."""
    _check_ms("delay_ms", delay_ms, max_delay_ms)
    data = check_body(body, max_msg_size)
    return b"".join(
        (b"DPUB ", validate_topic(topic), b" %d\n" % delay_ms, _pack_u32(body_size(data)), data)
    )


def batch_bodies(bodies: object) -> list[object] | tuple[object, ...]:
    """The bodies of an MPUB batch as a list or tuple (no copy for those), checked here for
    every face (aio, sync, HTTP): a bare ``str``/``bytes``/``bytearray``/``memoryview`` is one
    body, not a batch: iterating it would publish one message per character or byte, so it is
    refused (:class:`~nsqclient.errors.InvalidArgumentError`, an ``InvalidInputError``)."""
    if type(bodies) is list or type(bodies) is tuple:
        return bodies
    if isinstance(bodies, str | bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"mpub takes a list of message bodies, got a single {type(bodies).__name__}: "
            "wrap it in a list, mpub(topic, [body]) (or use pub)"
        )
    if isinstance(bodies, Mapping) or not isinstance(bodies, Iterable):
        raise InvalidBodyTypeError(
            f"mpub takes an iterable of message bodies, got {type(bodies).__name__}"
        )
    return list(bodies)


def check_timeout(timeout: float | None) -> None:
    """Refuse a publish ``timeout`` that is not None or a number of seconds >= 0."""
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not timeout >= 0  # also NaN
    ):
        raise InvalidArgumentError(
            f"timeout must be None (the publish_timeout option) or seconds >= 0, got {timeout!r}"
        )


def mpub(
    topic: str | bytes,
    bodies: Iterable[object],
    *,
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> bytes:
    """Publish several messages atomically: nsqd queues all of them or none.

    ``bodies`` goes through :func:`batch_bodies` (a single body is refused)."""
    bodies = batch_bodies(bodies)
    topic_b = validate_topic(topic)
    if type(bodies) is list or type(bodies) is tuple:
        fast = _mpub_all_bytes(topic_b, bodies, max_msg_size, max_body_size)
        if fast is not None:
            return fast
    parts: list[bytes | bytearray | memoryview] = []
    append = parts.append
    total = 4
    for body in bodies:
        data = check_body(body, max_msg_size)
        size = body_size(data)
        append(_pack_u32(size))
        append(data)
        total += 4 + size
    count = len(parts) // 2
    if count == 0:
        raise InvalidArgumentError("mpub needs at least one message")
    if total > max_body_size:
        raise MessageTooLargeError(
            f"MPUB body is {total} bytes, above max_body_size={max_body_size} "
            "(nsqd's --max-body-size); publish in smaller batches"
        )
    return b"".join((b"MPUB ", topic_b, b"\n", _pack_u32(total), _pack_u32(count), *parts))


def _mpub_all_bytes(
    topic_b: bytes, bodies: list[object] | tuple[object, ...], max_msg_size: int, max_body_size: int
) -> bytes | None:
    """The common MPUB, a list of ``bytes`` within limits, with the per-body work done in C
    (``map``/``zip``); None sends the caller down the general path, which explains any refusal."""
    if not bodies or set(map(type, bodies)) != {bytes}:
        return None
    sizes = list(map(len, bodies))  # type: ignore[arg-type]  # all bytes, checked above
    total = 4 + 4 * len(sizes) + sum(sizes)
    if min(sizes) == 0 or max(sizes) > max_msg_size or total > max_body_size:
        return None
    return b"".join(
        (
            b"MPUB ",
            topic_b,
            b"\n",
            _pack_u32(total),
            _pack_u32(len(sizes)),
            *chain.from_iterable(zip(map(_pack_u32, sizes), bodies, strict=True)),  # type: ignore[arg-type]
        )
    )


def rdy(count: int, *, max_rdy_count: int | None = DEFAULT_MAX_RDY_COUNT) -> bytes:
    """``RDY count``; nsqd closes the connection for a count above its max_rdy_count.

    Pass the ``max_rdy_count`` from the IDENTIFY reply (None skips the upper check).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidArgumentError(f"RDY count must be a non-negative int, got {count!r}")
    if max_rdy_count is not None and count > max_rdy_count:
        raise InvalidArgumentError(
            f"RDY count {count} is above nsqd's max_rdy_count={max_rdy_count} (--max-rdy-count)"
        )
    return rdy_unchecked(count)


def rdy_unchecked(count: int) -> bytes:
    """``RDY count`` for a count the caller already bounded (the connection clamps it)."""
    return b"RDY %d\n" % count


# The per-message answers. The ``*_unchecked`` forms are the hot path's (a connection answering
# a message it decoded, whose id is 16 bytes by construction); the checked forms validate
# caller-supplied arguments first and then build the same bytes.


def fin_unchecked(msg_id: bytes) -> bytes:
    return b"FIN " + msg_id + b"\n"


def req_unchecked(msg_id: bytes, delay_ms: int) -> bytes:
    return b"REQ %s %d\n" % (msg_id, delay_ms)


def touch_unchecked(msg_id: bytes) -> bytes:
    return b"TOUCH " + msg_id + b"\n"


def fin(msg_id: bytes) -> bytes:
    return fin_unchecked(_check_id(msg_id))


def req(msg_id: bytes, delay_ms: int = 0, *, max_delay_ms: int | None = None) -> bytes:
    """Requeue. nsqd clamps delays above its --max-req-timeout, so no upper bound by default."""
    _check_ms("delay_ms", delay_ms, max_delay_ms)
    return req_unchecked(_check_id(msg_id), delay_ms)


def touch(msg_id: bytes) -> bytes:
    return touch_unchecked(_check_id(msg_id))


def cls() -> bytes:
    return _CLS


def nop() -> bytes:
    return _NOP


def _check_id(msg_id: object) -> bytes:
    if isinstance(msg_id, str):
        try:
            msg_id = msg_id.encode("ascii")
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"message id must be ASCII, got {msg_id!r}") from None
    if not isinstance(msg_id, bytes) or len(msg_id) != 16:
        raise InvalidArgumentError(f"message id must be 16 bytes, got {msg_id!r}")
    return msg_id


def _check_ms(name: str, value: object, maximum: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"{name} must be a non-negative int of milliseconds, got {value!r}"
        )
    if maximum is not None and value > maximum:
        raise InvalidArgumentError(
            f"{name}={value} is above {maximum} ms (nsqd's --max-req-timeout)"
        )
