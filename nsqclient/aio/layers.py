"""A connection's stream layers between its frames and its socket: TLS and compression.

The half of :class:`~nsqclient.aio.connection.Connection` that passes bytes through what IDENTIFY
negotiated (a mixin: one object, so the read path stays one attribute away). Writing, frames ->
codec -> TLS -> raw: :attr:`StreamLayers._encode` (None on a plain connection), called by the
write path (:mod:`.writes`) and by publishing threads (:mod:`.sharing`), always holding the
connection's wire on a shared connection, so that the stream is encoded in writing order.
Reading, raw -> TLS -> codec -> frames: :meth:`StreamLayers.decode`, by the loop or by the
thread whose turn it is to read (which takes the wire to decrypt: the TLS session is one object
for both directions, :mod:`.tlswire`; the decompressor is the reader's alone, like the frame
decoder).

What TLS itself sends (a KeyUpdate, a close_notify) goes out at once, in order: after every
byte encoded before it, ahead of everything not encoded yet (:meth:`StreamLayers._write_encoded`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol.compression import Codec
from ..protocol.frames import Event, FrameDecoder
from .tlswire import TLSWire
from .window import Guard

__all__ = ["StreamLayers"]


class StreamLayers:
    """The stream layers of a Connection (which sets these attributes up)."""

    _transport: asyncio.Transport | None
    _loop: asyncio.AbstractEventLoop | None
    _decoder: FrameDecoder
    _guard: Guard | None  # a shared connection's guard (see .sharing)
    _section: Any  # the connection's section (see answers.Section)
    _raw_rest: list[bytes]
    _flush_scheduled: bool
    #: the TLS session when nsqd and the client negotiated TLS (:mod:`.tlswire`)
    _tls: TLSWire | None
    #: the compression nsqd and the client negotiated
    _codec: Codec | None
    #: frames -> codec -> TLS: what is written (None: bytes go as they are)
    _encode: Callable[[bytes], bytes] | None

    if TYPE_CHECKING:  # (the WritePath's; declared for the type checker only)

        def _flush(self, force: bool = False) -> None: ...

    def _set_stream(self, tls: TLSWire | None, codec: Codec | None) -> None:
        """The layers setup negotiated (the handshake's: :mod:`.handshake`)."""
        self._tls = tls
        self._codec = codec
        if tls is None:
            self._encode = None if codec is None else codec.compress
        elif codec is None:
            self._encode = tls.encrypt
        else:
            compress, encrypt = codec.compress, tls.encrypt
            self._encode = lambda data: encrypt(compress(data))

    def decode(self, data: bytes) -> list[Event]:
        """Frames out of raw bytes read by the loop (by a reading thread: through
        :meth:`.sharing.Shared.decode`); raises ProtocolError for a damaged stream or a TLS
        alert."""
        if self._tls is not None:
            data = self._decrypt(data)
        codec = self._codec
        if codec is not None:
            data = codec.decompress(data)
        return self._decoder.feed(data)

    def decode_clear(self, data: bytes) -> list[Event]:
        """Frames out of decrypted bytes (a reading thread's, which decrypted holding the
        wire); the decompressor and the decoder are the turn's holder's."""
        codec = self._codec
        if codec is not None:
            data = codec.decompress(data)
        return self._decoder.feed(data)

    def _decrypt(self, data: bytes) -> bytes:
        """The loop decrypts (in a section on a shared connection: the TLS session is the
        writers' too) and sends at once what TLS has to send."""
        tls = self._tls
        assert tls is not None
        if self._guard is None:  # the loop's alone
            clear = tls.decrypt(data)
            if tls.wants_to_send:
                self._write_encoded(tls.outgoing())
            return clear
        with self._section:
            clear = tls.decrypt(data)
            if tls.wants_to_send:
                self._write_encoded(tls.outgoing())
        return clear

    def _write_encoded(self, data: bytes) -> None:
        """Loop, holding the wire: bytes encoded already (TLS's own messages) written after
        every byte encoded before them (the transport's buffer, then a thread's unsent rest),
        ahead of what is not encoded yet."""
        transport = self._transport
        if transport is None:
            return
        if self._raw_rest:
            self._raw_rest.append(data)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)  # type: ignore[union-attr]
        else:
            transport.write(data)

    def _say_goodbye(self) -> None:
        """Closing (holding the wire): TLS's close_notify after everything written."""
        tls = self._tls
        transport = self._transport
        if tls is not None and transport is not None and not transport.is_closing():
            out = tls.goodbye()
            if out:
                transport.write(out)
