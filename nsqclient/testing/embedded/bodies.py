"""How a command's body is read off the stream, and what a command hands back to its connection.

A command returns a :data:`Result`: nothing, a response payload, a *body reader* (a generator that
yields a :data:`Need`: ``(bytes_needed, code, text_if_the_read_fails)``, and receives those bytes,
or an :class:`ItemReader` that takes MPUB's items straight from the buffer), or a coroutine. The
connection (:mod:`.connection`) feeds the readers; the commands (:mod:`.commands`,
:mod:`.identify`) and HTTP ``/mpub?binary=true`` (:mod:`.nsqd_http`) make them.
"""

from __future__ import annotations

import struct
from collections.abc import Coroutine, Generator
from typing import Any, Final, TypeAlias

from .wire import ClientError, int32_at

__all__ = ["ItemReader", "Need", "Result", "read_mpub_items"]

Need: TypeAlias = "tuple[int, str, bytes] | ItemReader"
Result: TypeAlias = "bytes | Generator[Need, bytes, Result] | Coroutine[Any, Any, Result] | None"

_INT32_AT: Final = struct.Struct(">i").unpack_from  # an MPUB item's size, no slice made


def read_mpub_items(max_msg: int, max_body: int) -> Generator[Need, bytes, list[bytes]]:
    """``readMPUB``: count then sized items (shared with HTTP ``/mpub?binary=true``)."""
    count = int32_at((yield (4, "E_BAD_BODY", b"MPUB failed to read message count")))
    if count <= 0 or count > (max_body - 4) // 5:
        raise ClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
    reader = ItemReader(count, max_msg)
    yield reader
    return reader.bodies


class ItemReader:
    """MPUB's ``count`` sized items, parsed in one pass over whatever is buffered.

    The reader's side of ``readMPUB`` without a generator step per item (two per message made
    MPUB the embedded server's hottest path): :meth:`feed` takes every complete item from the
    buffer, checking each size when its 4 bytes are there, as nsqd reads them off the stream (the
    MPUB's declared body size bounds nothing here either). :attr:`need` is what a read that ends
    now fails with.
    """

    __slots__ = ("bodies", "count", "in_body", "max_msg")

    def __init__(self, count: int, max_msg: int) -> None:
        self.count = count
        self.max_msg = max_msg
        self.bodies: list[bytes] = []
        self.in_body = False  # the next item's size is buffered (and valid), its body is not

    @property
    def done(self) -> bool:
        return len(self.bodies) == self.count

    @property
    def need(self) -> tuple[str, bytes]:
        """(code, text) of the error if the stream ends (or times out) now."""
        if self.in_body:
            return "E_BAD_MESSAGE", b"MPUB failed to read message body"
        return "E_BAD_MESSAGE", b"MPUB failed to read message(%d) body size" % len(self.bodies)

    def feed(self, buf: bytes | bytearray, pos: int) -> int:
        """Take the complete items from ``buf[pos:]``; the position after the last one taken."""
        bodies = self.bodies
        append = bodies.append
        end = len(buf)
        left = self.count - len(bodies)
        max_msg = self.max_msg
        with memoryview(buf) as view:
            while left and pos + 4 <= end:
                (size,) = _INT32_AT(buf, pos)
                if size <= 0:
                    i = len(bodies)
                    raise ClientError(
                        "E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}"
                    )
                if size > max_msg:
                    raise ClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg}")
                start = pos + 4
                if start + size > end:
                    self.in_body = True
                    return pos
                pos = start + size
                append(bytes(view[start:pos]))
                left -= 1
        self.in_body = False
        return pos
