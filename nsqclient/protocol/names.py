"""Legal topic and channel names and message bodies, checked exactly as nsqd checks them.

Validated names are cached as their encoded bytes, so the per-publish cost of a check on a topic
already seen is one dict lookup.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import (
    EmptyMessageError,
    InvalidBodyTypeError,
    InvalidChannelError,
    InvalidTopicError,
    MessageTooLargeError,
)

__all__ = [
    "MAX_NAME_LENGTH",
    "Body",
    "body_size",
    "check_body",
    "coerce_body",
    "is_valid_name",
    "single_body_batch",
    "validate_channel",
    "validate_topic",
]

MAX_NAME_LENGTH = 64
_NAME = re.compile(rb"[.a-zA-Z0-9_-]+(?:#ephemeral)?")
_CACHE_LIMIT = 4096
_topics: dict[str | bytes, bytes] = {}
_channels: dict[str | bytes, bytes] = {}

Body = bytes | bytearray | memoryview | str

_F = TypeVar("_F", bound=Callable[..., Any])

if TYPE_CHECKING:
    # PEP 702: marks the mpub overload that takes one body, so mypy (with the ``deprecated``
    # error code enabled) and pyright flag ``mpub(topic, "abc")``, which a str's being an
    # Iterable[str] would otherwise let through; typing_extensions is a type checker's, not a
    # run-time, dependency. Its message must be a string literal at each use (mypy's rule).
    from typing_extensions import deprecated as single_body_batch
else:

    def single_body_batch(_message: str) -> Callable[[_F], _F]:
        """Run time: nothing (the overload it marks is never called)."""
        return _identity


def _identity(func: _F) -> _F:
    return func


def is_valid_name(name: bytes) -> bool:
    """nsqd's rule: 1-64 bytes of ``[.a-zA-Z0-9_-]``, optionally ending in ``#ephemeral``."""
    return 0 < len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


def _encode(name: object) -> bytes | None:
    if isinstance(name, str):
        try:
            return name.encode("ascii")
        except UnicodeEncodeError:
            return None
    if isinstance(name, bytes):
        return name
    # Other bytes-likes are judged by their bytes, as a cache hit on an equal bytes name would.
    if isinstance(name, bytearray | memoryview):
        return bytes(name)
    return None


def validate_topic(topic: str | bytes) -> bytes:
    """Return the topic as wire bytes, or raise :class:`InvalidTopicError` saying why."""
    try:
        return _topics[topic]
    except (KeyError, TypeError, ValueError):  # ValueError: hashing a writable memoryview
        pass  # the miss is handled outside the except, so its error carries no KeyError context
    return _validate_and_cache(topic, _topics, InvalidTopicError, "topic")


def validate_channel(channel: str | bytes) -> bytes:
    """Return the channel as wire bytes, or raise :class:`InvalidChannelError` saying why."""
    try:
        return _channels[channel]
    except (KeyError, TypeError, ValueError):  # ValueError: hashing a writable memoryview
        pass  # the miss is handled outside the except, so its error carries no KeyError context
    return _validate_and_cache(channel, _channels, InvalidChannelError, "channel")


def _validate_and_cache(
    name: str | bytes,
    cache: dict[str | bytes, bytes],
    error: type[InvalidTopicError | InvalidChannelError],
    kind: str,
) -> bytes:
    """The cache miss of :func:`validate_topic` / :func:`validate_channel`."""
    encoded = _encode(name)
    if encoded is None or not is_valid_name(encoded):
        raise error(_explain(kind, name))
    if type(name) is str or type(name) is bytes:  # never keep a caller's mutable buffer
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[name] = encoded
    return encoded


def _explain(kind: str, name: object) -> str:
    if not isinstance(name, str | bytes | bytearray | memoryview):
        return f"{kind} name must be str or bytes, got {type(name).__name__}"
    size = len(name)
    if size == 0:
        why = "it is empty"
    elif size > MAX_NAME_LENGTH:
        why = f"it is {size} characters long (at most {MAX_NAME_LENGTH}, '#ephemeral' included)"
    else:
        why = "use only letters, digits, '.', '_' and '-', optionally ending in '#ephemeral'"
    return f"{kind} name {name!r} is not valid: {why}"


def coerce_body(body: object) -> bytes | bytearray | memoryview:
    """Accept bytes-like bodies as they are and ``str`` as UTF-8; refuse anything else."""
    kind = type(body)
    if kind is bytes or kind is bytearray:
        return body  # type: ignore[return-value]
    if kind is str:
        return body.encode("utf-8")  # type: ignore[attr-defined,no-any-return]
    if isinstance(body, memoryview):
        if body.c_contiguous and body.itemsize == 1:
            return body
        return body.tobytes()
    if isinstance(body, bytes | bytearray):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    raise InvalidBodyTypeError(
        f"message body must be bytes, bytearray, memoryview or str, got {type(body).__name__}"
        + (" (serialise it first, e.g. json.dumps(obj).encode())" if body is not None else "")
    )


def body_size(body: bytes | bytearray | memoryview) -> int:
    return body.nbytes if isinstance(body, memoryview) else len(body)


def check_body(body: object, max_msg_size: int) -> bytes | bytearray | memoryview:
    """Coerce a body and refuse empty or oversized ones, as nsqd would (before sending)."""
    data = coerce_body(body)
    size = body_size(data)
    if size == 0:
        raise EmptyMessageError("message body is empty; nsqd refuses empty messages")
    if size > max_msg_size:
        raise MessageTooLargeError(
            f"message body is {size} bytes, above max_msg_size={max_msg_size} "
            "(nsqd's --max-msg-size); split it or raise both limits"
        )
    return data
