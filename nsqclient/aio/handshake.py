"""One connection's setup on the wire: driving :mod:`nsqclient.protocol.handshake` over a transport.

The protocol layer decides the steps (IDENTIFY, TLS, compression, AUTH); this module carries them
out: it writes the steps' bytes, runs the TLS handshake over the raw transport (the connection
keeps TLS itself, :mod:`.tlswire`), switches the stream to the negotiated codec, and waits for
nsqd's next frame. Received bytes pass raw -> TLS -> codec -> frames, sent ones frames -> codec
-> TLS -> raw. It also says what ``connect()`` raises for a failure during setup (a wrong port,
a refused certificate, a timeout), with the fix in the text.

While :class:`Setup` runs, the :class:`~nsqclient.aio.connection.Connection` hands it every
chunk it receives (:meth:`Setup.feed`) and its loss (:meth:`Setup.lost`); once it returns, the
connection's own read path takes over with the frames that were read past the last reply.
"""

from __future__ import annotations

import asyncio
import ssl

from ..errors import (
    ConnectError,
    FrameTooLargeError,
    NSQError,
    NSQTimeoutError,
    ProtocolError,
    TLSError,
    WrongPortError,
)
from ..protocol.compression import Codec, DeflateCodec, SnappyCodec
from ..protocol.frames import HTTP_REPLY_SIZE, Event, FrameDecoder, UntypedErrorReply
from ..protocol.handshake import EnableCompression, Handshake, HandshakeDone, Send, StartTLS
from ..protocol.identify import AuthResponse, IdentifyOptions, IdentifyResponse
from .tlswire import TLSWire

__all__ = ["Setup", "handshake_error", "tls_hint"]


class Setup:
    """The handshake of one connection, fed by its protocol's ``data_received`` until done."""

    def __init__(self, decoder: FrameDecoder, address: str) -> None:
        self._decoder = decoder
        self.address = address
        self._raw: list[bytes] = []  # received, not yet decoded (maybe encrypted, compressed)
        #: decrypted bytes still to pass through the codec (read past the last reply before
        #: compression was switched on)
        self._clear = b""
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._cause: BaseException | None = None
        #: the transport, the negotiated TLS session and codec, the replies: set by run()
        self.transport: asyncio.Transport | None = None
        self.tls: TLSWire | None = None
        self.codec: Codec | None = None
        self.identify: IdentifyResponse | None = None
        self.auth: AuthResponse | None = None
        #: seconds from sending IDENTIFY to its reply
        self.rtt = 0.0

    def feed(self, data: bytes) -> None:
        """Bytes the transport received during setup."""
        self._raw.append(data)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def lost(self, cause: BaseException | None) -> None:
        """The transport closed (``cause``: why, if known): the next wait raises."""
        self._closed = True
        self._cause = cause
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run(
        self,
        transport: asyncio.Transport,
        protocol: asyncio.BaseProtocol,
        *,
        options: IdentifyOptions,
        auth_secret: bytes | None,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str,
    ) -> list[Event]:
        """Run the handshake; return the frames already decoded past the last reply (for the
        read path). :attr:`tls` and :attr:`codec` are the stream's from now on, even after a
        failure."""
        loop = asyncio.get_running_loop()
        self.transport = transport
        hs = Handshake(options, auth_secret=auth_secret, address=self.address)
        transport.write(hs.start())
        sent_at = loop.time()
        while not hs.done:
            event = await self._next_event(loop)
            if not self.rtt:
                self.rtt = loop.time() - sent_at
            for step in hs.receive(event):
                if isinstance(step, Send):
                    transport.write(self._encode(step.data))
                elif isinstance(step, StartTLS):
                    if ssl_context is None:
                        raise TLSError("nsqd offered TLS but no SSL context", address=self.address)
                    await self._start_tls(loop, transport, ssl_context, server_hostname)
                elif isinstance(step, EnableCompression):
                    self.codec = (
                        SnappyCodec() if step.kind == "snappy" else DeflateCodec(step.level)
                    )
                    # bytes already read past the IDENTIFY reply belong to the compressed stream
                    self._clear = self._decoder.take_unparsed()
                elif isinstance(step, HandshakeDone):
                    self.identify = step.identify
                    self.auth = step.auth
        return self._decoder.feed(self._pull())

    def _encode(self, data: bytes) -> bytes:
        codec = self.codec
        if codec is not None:
            data = codec.compress(data)
        tls = self.tls
        return tls.encrypt(data) if tls is not None else data

    async def _start_tls(
        self,
        loop: asyncio.AbstractEventLoop,
        transport: asyncio.Transport,
        context: ssl.SSLContext,
        server_hostname: str,
    ) -> None:
        """The TLS handshake over the raw transport; the session is the stream's from now on.
        Raises ``ssl.SSLError`` as ``loop.start_tls`` would (:func:`handshake_error` says
        what to do about it)."""
        tls = TLSWire(context, server_hostname)
        # bytes read past the IDENTIFY reply belong to the TLS stream (nsqd sends none first)
        data = self._decoder.take_unparsed() + b"".join(self._raw)
        self._raw.clear()
        while True:
            try:
                done = tls.handshake(data)
            finally:
                out = tls.outgoing()  # (after a refusal: the alert saying why)
                if out:
                    transport.write(out)
            if done:
                break
            data = await self._next_raw(loop, "the TLS handshake")
        self.tls = tls

    async def _next_raw(self, loop: asyncio.AbstractEventLoop, during: str) -> bytes:
        while not self._raw:
            if self._closed:
                raise ConnectError(
                    f"nsqd closed the connection during {during}", address=self.address
                ) from self._cause
            self._waiter = loop.create_future()
            await self._waiter
        data = b"".join(self._raw)
        self._raw.clear()
        return data

    def _pull(self) -> bytes:
        """What was received, as frame bytes: decrypted, then decompressed."""
        data = b"".join(self._raw)
        self._raw.clear()
        tls = self.tls
        if tls is not None and (data or tls.pending):
            try:
                data = tls.decrypt(data)
            except ProtocolError as exc:  # nsqd refused the session (e.g. no or an untrusted
                cause = exc.__cause__  # client certificate: TLS 1.3 says so after the handshake)
                raise TLSError(
                    f"nsqd closed the connection during TLS: {cause}{tls_hint(cause or exc)}",
                    address=self.address,
                ) from cause
            out = tls.outgoing()
            if out and self.transport is not None:
                self.transport.write(out)
        if self._clear:
            data, self._clear = self._clear + data, b""
        codec = self.codec
        if codec is not None and data:
            data = codec.decompress(data)
        return data

    async def _next_event(self, loop: asyncio.AbstractEventLoop) -> Event:
        """One frame at a time: the bytes after a reply may belong to an upgraded stream."""
        while True:
            if self._raw or self._clear or (self.tls is not None and self.tls.pending):
                event = self._decoder.next_event(self._pull())
            else:
                event = self._decoder.next_event()
            if event is not None:
                return event
            if self._closed:
                cause = self._cause
                if isinstance(cause, ssl.SSLError):
                    raise TLSError(
                        f"nsqd closed the connection during TLS: {cause}{tls_hint(cause)}",
                        address=self.address,
                    ) from cause
                raise ConnectError(
                    "nsqd closed the connection during the handshake", address=self.address
                ) from cause
            self._waiter = loop.create_future()
            await self._waiter


def handshake_error(exc: BaseException, address: str) -> BaseException:
    """What ``connect()`` raises for ``exc``, a failure during the handshake with ``address``."""
    if isinstance(exc, FrameTooLargeError) and exc.size == HTTP_REPLY_SIZE:
        return WrongPortError(
            f"{address} answered in HTTP: it is an HTTP port (nsqd's is usually 4151, "
            "nsqlookupd's 4161), not nsqd's TCP port (usually 4150); fix the address",
            address=address,
        )
    if isinstance(exc, UntypedErrorReply):
        return WrongPortError(
            f"{address} answered {exc.text!r} with no frame type, as nsqlookupd's TCP "
            "port (usually 4160) does: it is not nsqd. Give nsqd's TCP address (usually "
            "4150) as nsqd_tcp_addresses, or nsqlookupd's HTTP address (usually 4161) as "
            "lookupd_http_addresses",
            address=address,
        )
    if isinstance(exc, NSQError) or not isinstance(exc, Exception):
        return exc  # typed already (server errors, AuthRequiredError...), or cancellation
    if isinstance(exc, TimeoutError):
        return NSQTimeoutError("handshake timed out", address=address)
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return TLSError(f"TLS handshake failed: {exc}{tls_hint(exc)}", address=address)
    if isinstance(exc, ConnectionError | OSError):
        return ConnectError(f"connection lost during handshake: {exc}", address=address)
    return exc


def tls_hint(exc: BaseException) -> str:
    """What to do about a TLS failure, appended to its message ("" when nothing specific)."""
    text = str(exc).upper()
    if "CERTIFICATE_REQUIRED" in text or "UNKNOWN_CA" in text or "BAD_CERTIFICATE" in text:
        return (
            "; nsqd refused the client certificate: pass tls_cert_file/tls_key_file signed by "
            "a CA that nsqd trusts (--tls-root-ca-file)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(exc, ssl.CertificateError):
        return (
            "; nsqd's certificate could not be verified: for a private CA pass "
            "tls_ca_file=..., and check tls_server_hostname"
        )
    return ""
