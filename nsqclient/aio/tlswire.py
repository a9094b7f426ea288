"""A connection's TLS, run by the connection itself: an ``ssl.SSLObject`` over memory BIOs.

Why not asyncio's SSL transport (``loop.start_tls``): its TLS state lives inside the loop's
transport, which only the loop may touch, so a publishing thread could neither encrypt its PUB
nor decrypt its reply (every TLS publish from a thread crossed to the loop and back); and the
standard library's SSL protocol is pure Python around this same object. Here the connection
keeps the raw TCP transport and passes its bytes through a :class:`TLSWire`, both ways and
whoever reads or writes (the loop, or a thread of the blocking facade on a shared connection,
:mod:`.sharing`): frames -> codec -> TLS -> raw when writing, raw -> TLS -> codec -> frames
when reading.

One ``SSLObject`` serves both directions and is not safe for concurrent use (nor is OpenSSL's
``SSL``): on a connection shared with threads every call of a :class:`TLSWire`, reads included,
is made holding the connection's *wire*, the lock that orders writes (so the thread whose turn
it is to read takes the wire briefly to decrypt). Whatever TLS itself has to send (the
handshake's messages, the alert of a refused one, a TLS 1.3 KeyUpdate answering the peer's,
a close_notify) is taken with :meth:`TLSWire.outgoing` and written at once by the same holder,
in order with the encrypted writes. Session tickets and key updates that arrive while the
application reads are consumed by :meth:`TLSWire.decrypt` on the way.
"""

from __future__ import annotations

import ssl
from typing import Final

from ..errors import ProtocolError

__all__ = ["TLSWire"]

#: plaintext asked for per read: a TLS record's most (OpenSSL returns one record per read)
_READ: Final = 16 * 1024
_WantRead: Final = ssl.SSLWantReadError
_ZeroReturn: Final = ssl.SSLZeroReturnError
_SSLError: Final = ssl.SSLError


class TLSWire:
    """The TLS session of one connection (client side; see the module docstring).

    Not thread-safe by itself: its owner serialises every call (on a shared connection, the
    wire). :meth:`decrypt` and :meth:`encrypt` raise :class:`~nsqclient.errors.ProtocolError`
    (its ``__cause__`` the ``ssl.SSLError``) for a TLS alert from nsqd or a damaged stream.
    """

    __slots__ = ("_in", "_obj", "_out", "ended")

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(
            self._in, self._out, server_side=False, server_hostname=server_hostname
        )
        #: nsqd ended the TLS session (close_notify): nothing more is decrypted
        self.ended = False

    @property
    def ssl_object(self) -> ssl.SSLObject:
        """The session (cipher, version, peer certificate); do not read or write through it."""
        return self._obj

    # -- the handshake (during connection setup: the loop alone) --

    def handshake(self, data: bytes) -> bool:
        """Feed ``data`` received from nsqd; True once the handshake is done. What to send
        is in :meth:`outgoing` (also after it raised: the alert telling nsqd why). Raises
        ``ssl.SSLError`` (``ssl.SSLCertVerificationError`` for an untrusted certificate)."""
        if data:
            self._in.write(data)
        try:
            self._obj.do_handshake()
        except _WantRead:
            return False
        return True

    @property
    def pending(self) -> bool:
        """Whether received bytes wait in the session, not decrypted yet (after the handshake:
        records that came with its last message, as nsqd's OK does under TLS 1.2)."""
        return self._in.pending > 0

    # -- the stream --

    def encrypt(self, data: bytes) -> bytes:
        """``data`` as TLS records to write (with whatever TLS must send before them)."""
        try:
            self._obj.write(data)
        except _SSLError as exc:  # (the session failed on a read already: its end is on its way)
            raise _failed("encrypting", exc) from exc
        return self._out.read()

    def decrypt(self, data: bytes | memoryview) -> bytes:
        """The plaintext of the records ``data`` completes (b"" while a record is partial;
        post-handshake messages are consumed). Afterwards :meth:`outgoing` may hold bytes TLS
        must send (write them before anything else is encrypted)."""
        if self.ended:
            return b""  # after nsqd's close_notify only the TCP end is left
        incoming = self._in
        incoming.write(data)
        obj = self._obj
        first = b""
        chunks: list[bytes] | None = None
        try:
            while True:
                chunk = obj.read(_READ)
                if not chunk:  # close_notify: the stream ends here (its TCP end follows)
                    self.ended = True
                    break
                if chunks is not None:
                    chunks.append(chunk)
                elif first:
                    chunks = [first, chunk]
                else:
                    first = chunk
                # without read-ahead (the ssl module never sets it) OpenSSL reads one record
                # at a time: nothing left in the BIO and no plaintext kept means nothing more
                # to read now, known without the cost of raising SSLWantReadError
                if not incoming.pending and not obj.pending():
                    break
        except _WantRead:
            pass
        except _ZeroReturn:  # close_notify, after ours (read() says b"" only before ours)
            self.ended = True
        except _SSLError as exc:
            raise _failed("decrypting", exc) from exc
        return first if chunks is None else b"".join(chunks)

    @property
    def wants_to_send(self) -> bool:
        """Whether TLS itself has bytes to send now (take them with :meth:`outgoing`)."""
        return self._out.pending > 0

    def outgoing(self) -> bytes:
        """What TLS itself has to send now (b"" mostly): written at once, in order."""
        out = self._out
        return out.read() if out.pending else b""

    def goodbye(self) -> bytes:
        """A close_notify to send before closing (b"" when TLS is past saying one)."""
        try:
            self._obj.unwrap()
        except (_SSLError, ValueError):  # (WantRead: nsqd's own close_notify is not awaited)
            pass
        return self.outgoing()


def _failed(doing: str, exc: ssl.SSLError) -> ProtocolError:
    reason = getattr(exc, "reason", None) or str(exc)
    return ProtocolError(
        f"TLS failed while {doing} ({reason}): nsqd sent a TLS alert or the stream is damaged; "
        "the connection is dropped (a pending command may or may not have been applied) and "
        "reconnects"
    )
