"""Frames from nsqd, decoded incrementally from arbitrary byte chunks.

Wire format: ``[int32 size][int32 type][payload]`` with ``size`` counting the type field. Type 0 is
a response (``OK``, ``CLOSE_WAIT``, ``_heartbeat_``, JSON), 1 an error (``E_CODE text``), 2 a
message (``[int64 ts][uint16 attempts][16-byte id][body]``).

:class:`FrameDecoder.feed` is the hot path of every consumer: it takes a chunk and returns the
list of complete events in it, building each :class:`~nsqclient.message.Message` directly (one
allocation per message, one copy of its body) with a single ``struct.unpack_from`` per message
frame. Partial frames wait in a list of chunks that is joined once the frame is complete, so a
multi-megabyte frame arriving in small reads costs one join, not a quadratic series of copies.

The module also encodes frames, for servers (the embedded test nsqd) and tests.
"""

from __future__ import annotations

import struct
from typing import Final

from ..errors import (
    NON_FATAL_CODES,
    FrameTooLargeError,
    ProtocolError,
    ServerError,
    error_from_frame,
)
from ..message import Message, Responder

__all__ = [
    "CLOSE_WAIT",
    "FRAME_ERROR",
    "FRAME_MESSAGE",
    "FRAME_RESPONSE",
    "HEARTBEAT",
    "HTTP_REPLY_SIZE",
    "OK",
    "CloseWait",
    "ErrorFrame",
    "Event",
    "FrameDecoder",
    "Heartbeat",
    "Response",
    "UntypedErrorReply",
    "encode_error",
    "encode_frame",
    "encode_message",
    "encode_response",
]

FRAME_RESPONSE: Final = 0
FRAME_ERROR: Final = 1
FRAME_MESSAGE: Final = 2

_HEADER = struct.Struct(">ii")
_MESSAGE = struct.Struct(">iiqH16s")  # size, type, timestamp, attempts, id
_MESSAGE_MIN = 4 + 26  # type + message header
_MESSAGE_OFFSET = 34  # body starts 34 bytes after the frame start


class Response:
    """A response frame other than a heartbeat or CLOSE_WAIT: ``OK`` or a JSON document."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Response) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __repr__(self) -> str:
        return f"Response({self.data[:80]!r})"


class Heartbeat:
    """nsqd's ``_heartbeat_``; answer with NOP."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HEARTBEAT"


class CloseWait(Response):
    """nsqd's answer to CLS: no more messages will come; close once in-flight ones are answered."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CLOSE_WAIT"


class ErrorFrame:
    """An ``E_CODE description`` error frame."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    @property
    def code(self) -> str:
        return self.text.partition(" ")[0]

    @property
    def fatal(self) -> bool:
        """Whether nsqd closes the connection after this error."""
        return self.code not in NON_FATAL_CODES

    def to_exception(self, address: str | None = None) -> ServerError:
        return error_from_frame(self.text, address=address)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorFrame) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"ErrorFrame({self.text!r})"


HEARTBEAT: Final = Heartbeat()
CLOSE_WAIT: Final = CloseWait(b"CLOSE_WAIT")
OK: Final = Response(b"OK")
_OK_FRAME: Final = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"  # size 6, type 0 (response), OK
#: one OK reply as it is on the wire (a publisher's read of just this is its acknowledgement)
OK_FRAME: Final = _OK_FRAME

Event = Message | Response | Heartbeat | ErrorFrame


class FrameDecoder:
    """Turns the byte stream from nsqd into events.

    ``responder`` is attached to every Message built (the connection that will answer FIN/REQ).
    ``max_frame_size`` bounds the ``size`` field: a larger frame raises
    :class:`FrameTooLargeError` at once instead of being buffered.
    """

    __slots__ = ("_chunks", "_have", "_need", "max_frame_size", "responder")

    def __init__(
        self, responder: Responder | None = None, *, max_frame_size: int = 5_242_944
    ) -> None:
        self.responder = responder
        self.max_frame_size = max_frame_size
        self._chunks: list[bytes] = []
        self._have = 0  # bytes buffered in _chunks
        self._need = 0  # bytes required before parsing can make progress

    @property
    def buffered(self) -> int:
        """Bytes received but not yet decoded (a partial frame)."""
        return self._have

    def feed(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Add a chunk; return every event it completes, in order."""
        if self._chunks:
            chunk = bytes(data)  # len() of a memoryview counts items, not bytes
            self._chunks.append(chunk)
            self._have += len(chunk)
            if self._have < self._need:
                return []
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._have = 0
        elif type(data) is not bytes:
            data = bytes(data)
        if data.startswith(_OK_FRAME):
            # a publisher's read path: a chunk of nothing but OK replies, one C scan (the
            # occurrences tile the chunk exactly when they cover its length)
            n = data.count(_OK_FRAME)
            if n * 10 == len(data):
                return [OK] * n
        events: list[Event] = []
        end = self._parse(data, events, 1 << 62)
        if end < len(data):
            rest = data[end:]
            self._chunks.append(rest)
            self._have = len(rest)
        return events

    def next_event(self, data: bytes = b"") -> Event | None:
        """Add ``data`` (may be empty) and return at most one event, keeping the rest buffered.

        Used during the handshake, where bytes after a frame may belong to a TLS or compressed
        stream and must not be parsed as plaintext frames.
        """
        if data:
            chunk = bytes(data)
            self._chunks.append(chunk)
            self._have += len(chunk)
        if self._have < max(self._need, 8):
            return None
        buf = b"".join(self._chunks)
        self._chunks.clear()
        events: list[Event] = []
        end = self._parse(buf, events, 1)
        rest = buf[end:]
        self._have = len(rest)
        if rest:
            self._chunks.append(rest)
        return events[0] if events else None

    def take_unparsed(self) -> bytes:
        """Remove and return the buffered bytes not yet decoded (for a transport switch)."""
        rest = b"".join(self._chunks)
        self._chunks.clear()
        self._have = 0
        self._need = 0
        return rest

    def _parse(self, data: bytes, events: list[Event], limit: int) -> int:
        """Decode up to ``limit`` frames; return the offset of the first byte not consumed."""
        append = events.append
        unpack_message = _MESSAGE.unpack_from
        unpack_header = _HEADER.unpack_from
        responder = self.responder
        max_size = self.max_frame_size
        pos = 0
        end = len(data)
        while end - pos >= 8 and limit:
            if end - pos >= _MESSAGE_OFFSET:
                size, kind, timestamp, attempts, msg_id = unpack_message(data, pos)
            else:
                size, kind = unpack_header(data, pos)
            frame_end = pos + 4 + size
            if size < 4 or size > max_size:
                self._bad_size(size)
            if frame_end > end:
                self._need = frame_end - pos
                break
            if kind == 2:
                if size < _MESSAGE_MIN:
                    raise ProtocolError(f"message frame of {size} bytes is shorter than its header")
                append(Message(timestamp, attempts, msg_id, data[pos + 34 : frame_end], responder))
            elif kind == 0:
                payload = data[pos + 8 : frame_end]
                if payload == b"_heartbeat_":
                    append(HEARTBEAT)
                elif payload == b"OK":
                    append(OK)
                elif payload == b"CLOSE_WAIT":
                    append(CLOSE_WAIT)
                else:
                    append(Response(payload))
            elif kind == 1:
                append(ErrorFrame(data[pos + 8 : frame_end].decode("utf-8", "replace")))
            elif data[pos + 4 : frame_end] == _UNTYPED_BAD_PROTOCOL:
                # nsqlookupd's TCP port answers nsqd's magic with [size]"E_BAD_PROTOCOL", no type
                raise UntypedErrorReply(_UNTYPED_BAD_PROTOCOL.decode())
            else:
                raise ProtocolError(f"unknown frame type {kind} (size {size})")
            pos = frame_end
            limit -= 1
        else:
            self._need = 0
        return pos

    def _bad_size(self, size: int) -> None:
        if size < 4:
            raise ProtocolError(f"frame size {size} is below the minimum of 4")
        if size == HTTP_REPLY_SIZE:
            raise FrameTooLargeError(
                "the server answered in HTTP: this is an HTTP port, not nsqd's TCP port "
                "(usually 4150)",
                size=size,
            )
        raise FrameTooLargeError(
            f"frame of {size} bytes exceeds the limit of {self.max_frame_size}; raise max_msg_size "
            "or max_frame_size to match nsqd's --max-msg-size",
            size=size,
        )


_UNTYPED_BAD_PROTOCOL: Final = b"E_BAD_PROTOCOL"


class UntypedErrorReply(ProtocolError):
    """A sized ``E_*`` reply with no frame type: what nsqlookupd's TCP port (usually 4160)
    answers to nsqd's protocol magic (``E_BAD_PROTOCOL``). ``text`` is the reply."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(f"the server answered {text!r} without a frame type: not nsqd")


#: What a frame's size field reads when the server answered in HTTP ("HTTP/1.1 400 ..."): the
#: client dialled an HTTP port (nsqd's 4151, nsqlookupd's 4161) instead of nsqd's TCP port.
HTTP_REPLY_SIZE: Final = int.from_bytes(b"HTTP", "big")


# -- encoding, for servers and tests --


def encode_frame(kind: int, payload: bytes) -> bytes:
    return _HEADER.pack(len(payload) + 4, kind) + payload


def encode_response(data: bytes) -> bytes:
    return encode_frame(FRAME_RESPONSE, data)


def encode_error(text: str | bytes) -> bytes:
    return encode_frame(FRAME_ERROR, text.encode() if isinstance(text, str) else text)


_MESSAGE_HEADER = struct.Struct(">qH16s")


def encode_message(timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    if len(msg_id) != 16:
        raise ValueError("message id must be 16 bytes")
    return encode_frame(FRAME_MESSAGE, _MESSAGE_HEADER.pack(timestamp, attempts, msg_id) + body)
