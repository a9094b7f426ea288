"""How nsqd 1.3.0 cuts compressed output into writes, so a client meets the same pieces.

nsqd stacks a ``bufio.Writer`` (the client's ``output_buffer_size``, 16 KiB by default) on the
compressor on the connection (TLS or TCP), and each write the compressor makes on the connection
is one TLS record (or one ``send``). A client that mishandles a record holding only part of a
chunk breaks on real nsqd (pynsq with tornado >= 6.1 over TLS + snappy), so the embedded server
makes the same writes:

* bufio: responses and errors are flushed one by one (``Send`` flushes every frame but
  messages); messages fill the buffer, which is passed on whenever it is full.
* snappy (``golang/snappy``'s unbuffered ``Writer``): each write it gets is cut into 64 KiB
  blocks. A block that compresses is one write (the stream identifier, on the first write, then
  chunk header and body); one that does not (12.5 % rule) is two writes: the 8-byte chunk header
  (with CRC), then the raw body. Measured on nsqd 1.3.0 over TLS: the OK after the upgrade
  arrives as records of 18 and 10 bytes, a 3,000-byte random message as 8 and 3,034.
* deflate (``compress/flate``): it compresses across bufio's writes; its sync ``Flush`` (after
  each response, and after a batch of messages) writes what is pending, then the stored
  block's length bytes (``00 00 ff ff``) as a write of their own. Go's exact cuts inside a block
  (its bit writer's 240-byte pieces, stored blocks written whole) are not modelled.

Compressed output only: plain connections keep one write per flush (see DIFFERENCES.md).
"""

from __future__ import annotations

from typing import Final

__all__ = ["bufio_writes", "deflate_writes", "flushes", "snappy_writes"]

_MESSAGE: Final = 2  # frame type of a message; every other frame is flushed on its own
_SYNC_MARKER: Final = b"\x00\x00\xff\xff"
_UNCOMPRESSED: Final = 0x01
_STREAM_ID: Final = 0xFF


def bufio_writes(frames: list[bytes], size: int) -> list[bytes]:
    """What a Go ``bufio.Writer`` of ``size`` bytes, then ``Flush``, passes on for ``frames``:
    each frame as ``SendFramedResponse``'s three writes (size, frame type, data); a write that
    does not fit is topped up to a full buffer, or passed on whole when the buffer is empty.
    Every frame but a message is followed by a flush, as nsqd's ``Send`` does."""
    out: list[bytes] = []
    buf = bytearray()
    for frame in frames:
        for piece in (frame[:4], frame[4:8], frame[8:]):
            while len(piece) > size - len(buf):
                if not buf:
                    out.append(piece)
                    piece = b""
                    break
                room = size - len(buf)
                buf += piece[:room]
                piece = piece[room:]
                out.append(bytes(buf))
                buf.clear()
            buf += piece
        if int.from_bytes(frame[4:8], "big") != _MESSAGE and buf:
            out.append(bytes(buf))
            buf.clear()
    if buf:
        out.append(bytes(buf))
    return out


def flushes(frames: list[bytes]) -> list[bytes]:
    """``frames`` joined between nsqd's flushes (after every frame but a message): what one
    compress/flate ``Flush`` covers, whatever the bufio size."""
    out: list[bytes] = []
    batch: list[bytes] = []
    for frame in frames:
        batch.append(frame)
        if int.from_bytes(frame[4:8], "big") != _MESSAGE:
            out.append(b"".join(batch))
            batch.clear()
    if batch:
        out.append(b"".join(batch))
    return out


def snappy_writes(framed: bytes) -> list[bytes]:
    """The writes golang/snappy makes for ``framed`` (a framed-format stream piece whose chunks
    each hold one block): header and raw body apart for uncompressed chunks, one write otherwise;
    the stream identifier goes with the chunk after it."""
    out: list[bytes] = []
    view = memoryview(framed)
    start = pos = 0
    end = len(framed)
    while pos + 4 <= end:
        kind = framed[pos]
        chunk_end = pos + 4 + int.from_bytes(framed[pos + 1 : pos + 4], "little")
        if kind == _UNCOMPRESSED:
            out.append(bytes(view[start : pos + 8]))
            out.append(bytes(view[pos + 8 : chunk_end]))
            start = chunk_end
        elif kind != _STREAM_ID:
            out.append(bytes(view[start:chunk_end]))
            start = chunk_end
        pos = chunk_end
    if start < end:
        out.append(bytes(view[start:]))
    return out


def deflate_writes(data: bytes) -> list[bytes]:
    """``data`` (one sync-flushed deflate piece) as compress/flate's ``Flush`` writes it: the
    pending bytes, then the 4 length bytes of the empty stored block apart."""
    if len(data) > 4 and data.endswith(_SYNC_MARKER):
        return [data[:-4], data[-4:]]
    return [data]
