"""The NSQ protocol with no I/O: frames in, commands out, names, IDENTIFY, setup, compression.

Nothing here waits, sleeps, opens sockets or starts threads; a test checks that no module of this
package imports asyncio, socket, ssl or threading. The asyncio core, the test connection and the
embedded test server all speak NSQ through it.
"""

from __future__ import annotations

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
from .handshake import EnableCompression, Handshake, HandshakeDone, Send, StartTLS, Step
from .identify import AuthResponse, IdentifyOptions, IdentifyResponse, ServerLimits
from .names import check_body, coerce_body, is_valid_name, validate_channel, validate_topic

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
