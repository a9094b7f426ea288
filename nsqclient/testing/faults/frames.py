"""Frame boundaries in the byte stream from nsqd to a client, and damage done at them.

nsqd's frames are ``[int32 size][int32 type][payload]`` (``size`` counts the type field). The
proxy forwards bytes as they arrive (a cut can land mid-frame, as on a real network) while a
:class:`FrameCursor` follows where each frame starts. Only while a frame operation is armed does
the cursor hold bytes back, from the next frame boundary, until it has whole frames to change.

Once a client asks for TLS, snappy or deflate in its IDENTIFY (:func:`identify_upgrades`, fed by
the proxy from the client's first bytes) the stream is opaque: the cursor stops interpreting it.
Frame operations armed on an opaque stream are counted as skipped and never applied.
"""

from __future__ import annotations

import collections
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FrameCursor", "FrameOp", "FrameOpKind", "identify_upgrades"]

_HEADER = struct.Struct(">ii")
#: a size field beyond this means we are not looking at plain NSQ frames (or lost track)
_SANE_SIZE = 1 << 28
_HEARTBEAT = b"_heartbeat_"
_TYPES = {"response": 0, "error": 1, "message": 2}

FrameOpKind = str  # "drop" | "duplicate" | "size" | "replace"


@dataclass
class FrameOp:
    """One change to the next frame that matches ``frame`` (a type name, ``"any"`` or
    ``"heartbeat"``; heartbeats match only ``"heartbeat"``)."""

    action: FrameOpKind
    frame: str = "any"
    delta: int = 0
    payload: bytes = b""
    #: called with the action once applied (the proxy's counters)
    on_applied: Callable[[str], None] | None = None
    cancelled: bool = False

    def matches(self, kind: int, payload: bytes) -> bool:
        if kind == 0 and payload == _HEARTBEAT:
            return self.frame == "heartbeat"
        return self.frame == "any" or _TYPES.get(self.frame) == kind


class FrameCursor:
    """Follows frame boundaries in one server-to-client stream; applies armed operations."""

    __slots__ = ("_buf", "_head", "_left", "frames", "injects", "opaque", "ops")

    def __init__(self) -> None:
        self._left = 0  # bytes of the current (already forwarded) frame still to come
        self._head = b""  # part of a header already forwarded
        self._buf = bytearray()  # held bytes, starting at a frame boundary
        self.frames = 0
        self.opaque = False
        self.ops: collections.deque[FrameOp] = collections.deque()
        #: raw bytes to write at the next frame boundary (injected frames or garbage)
        self.injects: list[bytes] = []

    @property
    def at_boundary(self) -> bool:
        return not self._left and not self._head and not self._buf

    @property
    def holding(self) -> bool:
        return bool(self.injects or any(not op.cancelled for op in self.ops))

    def process(self, data: bytes) -> bytes:
        """The bytes to forward for ``data`` just received from nsqd."""
        if self.opaque:
            return data
        if not self.holding and not self._buf:
            self._track(data, 0, stop=False)
            return data
        pos = self._track(data, 0, stop=True)
        if pos < 0:
            return data  # lost track: opaque from now on
        out = bytearray(data[:pos])
        if self._left or self._head:
            return bytes(out)  # still inside a frame that was already partly forwarded
        if self.injects:
            out += b"".join(self.injects)
            self.injects.clear()
        buf = self._buf
        buf += data[pos:]
        while len(buf) >= 8 and self.holding:
            size, kind = _HEADER.unpack_from(buf)
            if size < 4 or size > _SANE_SIZE:
                self.opaque = True
                break
            if len(buf) < 4 + size:
                break
            frame = bytes(buf[: 4 + size])
            del buf[: 4 + size]
            self.frames += 1
            out += self._apply(frame, kind)
        if self.opaque or not self.holding:
            rest = bytes(buf)
            buf.clear()
            if not self.opaque:
                self._track(rest, 0, stop=False)
            out += rest
        return bytes(out)

    def release(self) -> bytes:
        """Bytes held back that may go now that no operation is armed (after an undo)."""
        if self.holding or not self._buf:
            return b""
        rest = bytes(self._buf)
        self._buf.clear()
        self._track(rest, 0, stop=False)
        return rest

    def _apply(self, frame: bytes, kind: int) -> bytes:
        ops = self.ops
        while ops and ops[0].cancelled:
            ops.popleft()
        if not ops or not ops[0].matches(kind, frame[8:]):
            return frame
        op = ops.popleft()
        if op.on_applied is not None:
            op.on_applied(op.action)
        if op.action == "drop":
            return b""
        if op.action == "duplicate":
            return frame + frame
        if op.action == "size":
            size = len(frame) - 4 + op.delta
            return struct.pack(">i", size) + frame[4:]
        if op.action == "replace":
            return _HEADER.pack(len(op.payload) + 4, kind) + op.payload
        raise ValueError(f"unknown frame operation {op.action!r}")

    def _track(self, data: bytes, pos: int, *, stop: bool) -> int:
        """Follow forwarded bytes from ``pos``; with ``stop``, return at the first boundary.
        Returns -1 if the bytes are not NSQ frames (the cursor turns opaque)."""
        n = len(data)
        while pos < n:
            if self._left:
                take = min(self._left, n - pos)
                self._left -= take
                pos += take
                continue
            if stop and not self._head:
                return pos
            need = 8 - len(self._head)
            self._head += data[pos : pos + need]
            pos = min(pos + need, n)
            if len(self._head) < 8:
                return pos
            size, _kind = _HEADER.unpack(self._head)
            self._head = b""
            if size < 4 or size > _SANE_SIZE:
                self.opaque = True
                return -1
            self._left = size - 4
            self.frames += 1
        return pos


_IDENTIFY = b"IDENTIFY\n"


def identify_upgrades(first: bytes) -> bool | None:
    """From a client's first bytes (magic, then maybe IDENTIFY): whether it asks for TLS or
    compression (True), not (False), or None while more bytes are needed."""
    rest = first[4:]
    if not _IDENTIFY.startswith(rest[: len(_IDENTIFY)]):
        return False  # no IDENTIFY first: nothing is negotiated
    if len(rest) < len(_IDENTIFY) + 4:
        return None
    (size,) = struct.unpack_from(">i", rest, len(_IDENTIFY))
    body = rest[len(_IDENTIFY) + 4 : len(_IDENTIFY) + 4 + size]
    if len(body) < size:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and any(doc.get(k) for k in ("tls_v1", "snappy", "deflate"))
