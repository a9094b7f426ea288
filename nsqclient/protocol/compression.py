"""The stream codecs nsqd switches to after IDENTIFY, as pure byte transforms.

Snappy is the framing ("stream") format, one independent stream per direction, as golang/snappy
writes it; deflate is raw RFC 1951 with a sync flush after every write, so each batch of commands
can be decoded on arrival. Both directions of one connection share a codec object; each
direction has one user at a time (on a connection shared with publishing threads: the writer
holding the connection's wire compresses, the reader whose turn it is decompresses).
"""

from __future__ import annotations

from typing import Protocol

from ..errors import ProtocolError

__all__ = ["Codec", "DeflateCodec", "SnappyCodec"]

#: the largest snappy chunk an encoder writes: its CRC and a compressed 64 KiB block (golang/snappy
#: and cramjam, the encoders of nsqd and of this client, write blocks of at most 64 KiB)
_MAX_CHUNK = 4 + 32 + 65536 + 65536 // 6


class Codec(Protocol):
    name: str

    def compress(self, data: bytes) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...


class SnappyCodec:
    """Snappy framing format in both directions."""

    name = "snappy"

    def __init__(self) -> None:
        import snappy  # python-snappy (and cramjam) load only when snappy is negotiated

        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()
        self._left = 0  # bytes of the current chunk still to come
        self._head = b""  # the start of a chunk header cut by a read

    def compress(self, data: bytes) -> bytes:
        return bytes(self._compressor.add_chunk(data))

    def decompress(self, data: bytes) -> bytes:
        self._follow(data)
        try:
            return bytes(self._decompressor.decompress(data))
        except Exception as exc:  # python-snappy raises several unrelated types
            raise ProtocolError(f"corrupt snappy stream from nsqd: {exc}") from exc

    def _follow(self, data: bytes) -> None:
        """Follow the chunk headers of what is read: a header no encoder writes (a reserved
        type, a chunk over :data:`_MAX_CHUNK`) is damage, refused now. python-snappy would
        wait for the chunk it announces (up to 16 MiB), so bytes lost in transit would show as
        a silent connection instead of an error."""
        left = self._left
        n = len(data)
        if left >= n:
            self._left = left - n
            return
        if self._head:  # (at a chunk boundary: left is 0)
            data = self._head + data
            n = len(data)
        pos = left
        while pos + 4 <= n:
            kind = data[pos]
            size = data[pos + 1] | data[pos + 2] << 8 | data[pos + 3] << 16
            if size > _MAX_CHUNK or 0x02 <= kind <= 0x7F:
                raise ProtocolError(
                    f"corrupt snappy stream from nsqd: a chunk header (type {kind:#04x}, "
                    f"{size} bytes) that no snappy encoder writes"
                )
            pos += 4 + size
        if pos >= n:
            self._left = pos - n
            self._head = b""
        else:
            self._left = 0
            self._head = bytes(data[pos:])


class DeflateCodec:
    """Raw deflate, sync-flushed after every compressed write."""

    name = "deflate"

    def __init__(self, level: int = 6) -> None:
        if not 1 <= level <= 9:
            raise ValueError(f"deflate level must be within 1..9, got {level}")
        import zlib  # loads only when deflate is negotiated

        self.level = level
        self._error = zlib.error
        self._z_sync_flush = zlib.Z_SYNC_FLUSH
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS)

    def compress(self, data: bytes) -> bytes:
        c = self._compressor
        return c.compress(data) + c.flush(self._z_sync_flush)

    def decompress(self, data: bytes) -> bytes:
        try:
            return self._decompressor.decompress(data)
        except self._error as exc:
            raise ProtocolError(f"corrupt deflate stream from nsqd: {exc}") from exc
