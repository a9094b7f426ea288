"""The stream codecs nsqd switches to after IDENTIFY, as pure byte transforms.

Snappy is the framing ("stream") format, one independent stream per direction, as golang/snappy
writes it; deflate is raw RFC 1951 with a sync flush after every write, so each batch of commands
can be decoded on arrival. Both directions of one connection share a codec object.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import ProtocolError

__all__ = ["Codec", "DeflateCodec", "SnappyCodec"]


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

    def compress(self, data: bytes) -> bytes:
        return bytes(self._compressor.add_chunk(data))

    def decompress(self, data: bytes) -> bytes:
        try:
            return bytes(self._decompressor.decompress(data))
        except Exception as exc:  # python-snappy raises several unrelated types
            raise ProtocolError(f"corrupt snappy stream from nsqd: {exc}") from exc


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
