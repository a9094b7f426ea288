"""The NSQ protocol with no I/O: frames in, commands out, names, IDENTIFY, setup, compression.

Nothing here waits, sleeps, opens sockets or starts threads; a test checks that no module of this
package imports asyncio, socket, ssl or threading. The asyncio core, the test connection and the
embedded test server all speak NSQ through it.

The setup (:mod:`.handshake`) and IDENTIFY (:mod:`.identify`, with json) load on first use of
their names, not with the package: the clients need them when a Reader or Writer is created,
and ``import nsqclient.sync`` should not pay for them (issue 51: import time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import commands
from .commands import MAGIC_V2
from .compression import Codec, DeflateCodec, SnappyCodec
from .frames import (
    CLOSE_WAIT,
    HEARTBEAT,
    OK,
    CloseWait,
    ErrorFrame,
    Event,
    FrameDecoder,
    Heartbeat,
    Response,
    encode_error,
    encode_frame,
    encode_message,
    encode_response,
)
from .names import check_body, coerce_body, is_valid_name, validate_channel, validate_topic

if TYPE_CHECKING:
    from .handshake import EnableCompression, Handshake, HandshakeDone, Send, StartTLS, Step
    from .identify import AuthResponse, IdentifyOptions, IdentifyResponse, ServerLimits

#: the names loaded on first use, by module
_HANDSHAKE = frozenset(
    ("EnableCompression", "Handshake", "HandshakeDone", "Send", "StartTLS", "Step")
)
_IDENTIFY = frozenset(("AuthResponse", "IdentifyOptions", "IdentifyResponse", "ServerLimits"))


def __getattr__(name: str) -> Any:
    if name in _HANDSHAKE:
        from . import handshake

        value = getattr(handshake, name)
    elif name in _IDENTIFY:
        from . import identify

        value = getattr(identify, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once: later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HANDSHAKE, *_IDENTIFY})


__all__ = [
    "CLOSE_WAIT",
    "HEARTBEAT",
    "MAGIC_V2",
    "OK",
    "AuthResponse",
    "CloseWait",
    "Codec",
    "DeflateCodec",
    "EnableCompression",
    "ErrorFrame",
    "Event",
    "FrameDecoder",
    "Handshake",
    "HandshakeDone",
    "Heartbeat",
    "IdentifyOptions",
    "IdentifyResponse",
    "Response",
    "Send",
    "ServerLimits",
    "SnappyCodec",
    "StartTLS",
    "Step",
    "check_body",
    "coerce_body",
    "commands",
    "encode_error",
    "encode_frame",
    "encode_message",
    "encode_response",
    "is_valid_name",
    "validate_channel",
    "validate_topic",
]
