"""A minimal blocking NSQ connection for tests: stdlib ``socket`` + ``ssl``, no asyncio.

All protocol knowledge comes from :mod:`nsqclient.protocol` (the thing under test): the
:class:`~nsqclient.protocol.Handshake` decides the setup steps, :class:`FrameDecoder` cuts
frames, the codecs compress, the command encoders build commands. This module only moves bytes
and keeps deadlines, so tests can also write deliberately *bad* bytes that no encoder would build
and see what real nsqd answers.

    with RawConnection.open(nsqd.tcp_address) as conn:
        conn.handshake(IdentifyOptions(heartbeat_interval=1000))
        conn.send(commands.sub("t", "c"))
        assert conn.read_event() is OK

Every wait has a deadline; nothing sleeps. ``read_event`` raises :class:`NSQTimeoutError` when the
deadline passes and :class:`ConnectionClosedError` when nsqd closes the connection.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Self

from nsqclient.errors import ConnectionClosedError, NSQTimeoutError, ProtocolError
from nsqclient.message import Message
from nsqclient.protocol import (
    HEARTBEAT,
    Codec,
    DeflateCodec,
    EnableCompression,
    ErrorFrame,
    Event,
    FrameDecoder,
    Handshake,
    HandshakeDone,
    IdentifyOptions,
    Response,
    Send,
    SnappyCodec,
    StartTLS,
    commands,
)

__all__ = ["DEFAULT_TIMEOUT", "RawConnection"]

DEFAULT_TIMEOUT = 10.0
_READ_SIZE = 256 * 1024


class RawConnection:
    """One blocking TCP (optionally TLS, optionally compressed) connection to nsqd."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.address = address
        self.sock: socket.socket = sock
        self.decoder = FrameDecoder(max_frame_size=64 << 20)
        self.codec: Codec | None = None
        self.handshake_result: HandshakeDone | None = None
        self.answer_heartbeats = False
        self.heartbeats_seen = 0
        self._events: deque[Event] = deque()
        self._plain = b""  # decoded bytes not yet handed to the decoder (handshake only)
        self._closed_by_peer = False

    # -- life cycle --

    @classmethod
    def open(cls, address: str, *, timeout: float = DEFAULT_TIMEOUT) -> Self:
        """Connect (TCP only: no magic, no IDENTIFY)."""
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, address)

    @classmethod
    def connect(
        cls,
        address: str,
        options: IdentifyOptions | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        auth_secret: bytes | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Self:
        """Connect and run the whole handshake (magic, IDENTIFY, upgrades, AUTH)."""
        conn = cls.open(address, timeout=timeout)
        try:
            conn.handshake(
                options,
                ssl_context=ssl_context,
                server_hostname=server_hostname,
                auth_secret=auth_secret,
                timeout=timeout,
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- setup --

    def handshake(
        self,
        options: IdentifyOptions | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        auth_secret: bytes | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> HandshakeDone:
        """Drive :class:`Handshake` to the end; server errors raise their typed exceptions."""
        deadline = time.monotonic() + timeout
        hs = Handshake(
            options if options is not None else IdentifyOptions(),
            auth_secret=auth_secret,
            address=self.address,
        )
        self._write(hs.start())
        while True:
            event = self._next_handshake_event(deadline)
            for step in hs.receive(event):
                if isinstance(step, Send):
                    self.send(step.data)
                elif isinstance(step, StartTLS):
                    self._start_tls(ssl_context, server_hostname, deadline)
                elif isinstance(step, EnableCompression):
                    self.codec = (
                        SnappyCodec() if step.kind == "snappy" else DeflateCodec(step.level)
                    )
                    # Bytes read past the last plaintext frame are already compressed.
                    self._plain = self.codec.decompress(self.decoder.take_unparsed())
                elif isinstance(step, HandshakeDone):
                    self.handshake_result = step
                    # whatever followed the last handshake frame is ordinary traffic
                    self._events.extend(self.decoder.feed(self._plain))
                    self._plain = b""
                    return step

    def _next_handshake_event(self, deadline: float) -> Event:
        while True:
            event = self.decoder.next_event(self._plain)
            self._plain = b""
            if event is not None:
                return event
            self._plain = self._recv(deadline)

    def _start_tls(
        self, context: ssl.SSLContext | None, server_hostname: str | None, deadline: float
    ) -> None:
        if context is None:
            raise AssertionError("nsqd agreed to TLS but no ssl_context was given")
        leftover = self.decoder.take_unparsed() + self._plain
        if leftover:
            # nsqd sends nothing between its reply and our ClientHello; bytes here would belong
            # to the TLS stream, which wrap_socket cannot be handed.
            raise ProtocolError(f"{len(leftover)} unexpected bytes before the TLS handshake")
        self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        host = server_hostname or self.address.rpartition(":")[0]
        self.sock = context.wrap_socket(self.sock, server_hostname=host)

    # -- traffic --

    def send(self, data: bytes) -> None:
        """Write bytes as they are (through the compressor once compression is on)."""
        self._write(self.codec.compress(data) if self.codec is not None else data)

    def send_raw(self, data: bytes) -> None:
        """Write bytes bypassing the compressor (for deliberately corrupt streams)."""
        self._write(data)

    def _write(self, data: bytes) -> None:
        self.sock.settimeout(DEFAULT_TIMEOUT)
        self.sock.sendall(data)

    def _recv(self, deadline: float) -> bytes:
        """One read, decompressed. Raises NSQTimeoutError / ConnectionClosedError."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NSQTimeoutError("no data from nsqd before the deadline", address=self.address)
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(_READ_SIZE)
        except TimeoutError:
            raise NSQTimeoutError(
                "no data from nsqd before the deadline", address=self.address
            ) from None
        except (ConnectionResetError, ssl.SSLEOFError) as exc:
            self._closed_by_peer = True
            raise ConnectionClosedError(
                f"nsqd reset the connection ({exc})", address=self.address
            ) from None
        if not data:
            self._closed_by_peer = True
            raise ConnectionClosedError("nsqd closed the connection", address=self.address)
        return self.codec.decompress(data) if self.codec is not None else data

    def read_event(self, timeout: float = DEFAULT_TIMEOUT) -> Event:
        """The next event, waiting at most ``timeout`` seconds.

        With ``answer_heartbeats`` set, heartbeats are answered with NOP and skipped; otherwise
        they are returned like any other event. ``heartbeats_seen`` counts them either way.
        """
        deadline = time.monotonic() + timeout
        while True:
            while self._events:
                event = self._events.popleft()
                if event is HEARTBEAT:
                    self.heartbeats_seen += 1
                    if self.answer_heartbeats:
                        self.send(commands.nop())
                        continue
                return event
            self._events.extend(self.decoder.feed(self._recv(deadline)))

    def read_until(
        self, accept: Callable[[Event], bool], timeout: float = DEFAULT_TIMEOUT
    ) -> tuple[Event, list[Event]]:
        """Read until an event satisfies ``accept``; return it and the events skipped before it."""
        deadline = time.monotonic() + timeout
        skipped: list[Event] = []
        while True:
            event = self.read_event(max(deadline - time.monotonic(), 0.0))
            if accept(event):
                return event, skipped
            skipped.append(event)

    def read_response(self, timeout: float = DEFAULT_TIMEOUT) -> Response:
        """The next event, which must be a Response (an error frame raises its exception)."""
        event = self.read_event(timeout)
        if isinstance(event, ErrorFrame):
            raise event.to_exception(self.address)
        if not isinstance(event, Response):
            raise AssertionError(f"expected a response, got {event!r}")
        return event

    def read_message(self, timeout: float = DEFAULT_TIMEOUT) -> Message:
        event = self.read_event(timeout)
        if not isinstance(event, Message):
            raise AssertionError(f"expected a message, got {event!r}")
        return event

    def read_error(self, timeout: float = DEFAULT_TIMEOUT) -> ErrorFrame:
        event = self.read_event(timeout)
        if not isinstance(event, ErrorFrame):
            raise AssertionError(f"expected an error frame, got {event!r}")
        return event

    def command(self, data: bytes, timeout: float = DEFAULT_TIMEOUT) -> Response:
        """Send one reply-producing command (PUB, SUB, ...) and return its Response."""
        self.send(data)
        return self.read_response(timeout)

    def expect_closed(self, timeout: float = DEFAULT_TIMEOUT) -> list[Event]:
        """Wait for nsqd to close the connection; return the events that came before."""
        deadline = time.monotonic() + timeout
        seen: list[Event] = []
        while True:
            try:
                seen.append(self.read_event(max(deadline - time.monotonic(), 0.0)))
            except ConnectionClosedError:
                return seen

    def expect_silence(self, duration: float) -> None:
        """Assert that no event arrives for ``duration`` seconds (heartbeats count as events
        unless ``answer_heartbeats`` is set). For "nothing more comes" checks only."""
        try:
            event = self.read_event(duration)
        except NSQTimeoutError:
            return
        raise AssertionError(f"expected no event for {duration}s, got {event!r}")

    @property
    def closed_by_peer(self) -> bool:
        return self._closed_by_peer
