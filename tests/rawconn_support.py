"""Raw NSQ connections for tests: :class:`RawConnection` (blocking: stdlib ``socket`` + ``ssl``)
and :class:`RawClient` (asyncio), sharing one receive path, plus the byte builders both use.

All protocol knowledge comes from :mod:`nsqclient.protocol` (the thing under test): the
:class:`~nsqclient.protocol.Handshake` decides the blocking client's setup steps,
:class:`FrameDecoder` cuts frames, the codecs compress, the command encoders build commands.
This module only moves bytes and keeps deadlines, so tests can also write deliberately *bad*
bytes that no encoder would build and see what real nsqd (or the embedded one) answers.

    with RawConnection.open(nsqd.tcp_address) as conn:            # the integration tests
        conn.handshake(IdentifyOptions(heartbeat_interval=1000))
        conn.send(commands.sub("t", "c"))
        assert conn.read_event() is OK

    client = await RawClient.connect(server.tcp_address)          # the embedded-server tests
    await client.setup()
    await client.sub("t", "c", rdy=1)

Heartbeats: with ``answer_heartbeats`` set, each one is answered with NOP as soon as it is read,
whatever the test is waiting for (also while a test reads other events, holds them, or waits
for the close), and ``heartbeats_seen`` counts them either way. ``RawClient`` answers by default,
as a client library would; ``RawConnection`` does not (its tests watch nsqd's heartbeat rules).

Every wait has a deadline; nothing sleeps. ``RawConnection.read_event`` raises
:class:`NSQTimeoutError` when the deadline passes and :class:`ConnectionClosedError` when nsqd
closes the connection; ``RawClient.event`` raises ``TimeoutError`` and :class:`Closed`.

(Longer than the ~500-line guideline: two clients, blocking and asyncio, over one receive path;
split, the shared part would be a module of its own for two users.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, ClassVar, Self

from nsqclient.errors import ConnectionClosedError, NSQTimeoutError, ProtocolError
from nsqclient.message import Message
from nsqclient.protocol import (
    Codec,
    DeflateCodec,
    EnableCompression,
    ErrorFrame,
    Event,
    FrameDecoder,
    Handshake,
    HandshakeDone,
    Heartbeat,
    IdentifyOptions,
    Response,
    Send,
    SnappyCodec,
    StartTLS,
    commands,
)
from nsqclient.protocol.commands import MAGIC_V2

__all__ = [
    "DEFAULT_TIMEOUT",
    "SYNC_TOPIC",
    "Closed",
    "RawClient",
    "RawConnection",
    "host_port",
    "identify_body",
    "mpub_body",
    "sized",
]

DEFAULT_TIMEOUT = 10.0
SYNC_TOPIC = b"sync_marker"
_READ_SIZE = 256 * 1024


# -- bytes as they go on the wire ----------------------------------------------------------------


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def identify_body(**fields: Any) -> bytes:
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + struct.pack(">I", len(body)) + body


def sized(cmd: bytes, body: bytes) -> bytes:
    return cmd + struct.pack(">I", len(body)) + body


def mpub_body(*bodies: bytes) -> bytes:
    parts = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    payload = struct.pack(">I", len(bodies)) + parts
    return struct.pack(">I", len(payload)) + payload


# -- the receive path both clients share ---------------------------------------------------------


class _Receiver:
    """Decoded events waiting to be read, and the heartbeat rule (answered as soon as read)."""

    def __init__(self, *, answer_heartbeats: bool, max_frame_size: int | None = None) -> None:
        self.decoder = (
            FrameDecoder()
            if max_frame_size is None
            else FrameDecoder(max_frame_size=max_frame_size)
        )
        self.codec: Codec | None = None
        self.events: deque[Event] = deque()
        self.answer_heartbeats = answer_heartbeats
        self.heartbeats_seen = 0

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def _received(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, Heartbeat):
                self.heartbeats_seen += 1
                if self.answer_heartbeats:
                    self.send(commands.nop())
            self.events.append(event)

    def _pop(self, *, skip_heartbeats: bool) -> Event | None:
        """The oldest waiting event (heartbeats dropped if ``skip_heartbeats``), or None."""
        while self.events:
            event = self.events.popleft()
            if not (skip_heartbeats and isinstance(event, Heartbeat)):
                return event
        return None


# -- blocking ------------------------------------------------------------------------------------


class RawConnection(_Receiver):
    """One blocking TCP (optionally TLS, optionally compressed) connection to nsqd."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        super().__init__(answer_heartbeats=False, max_frame_size=64 << 20)
        self.address = address
        self.sock: socket.socket = sock
        self.handshake_result: HandshakeDone | None = None
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
                    self._received(self.decoder.feed(self._plain))
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

        With ``answer_heartbeats`` set, heartbeats were answered with NOP when read and are
        skipped; otherwise they are returned like any other event.
        """
        deadline = time.monotonic() + timeout
        while True:
            event = self._pop(skip_heartbeats=self.answer_heartbeats)
            if event is not None:
                return event
            self._received(self.decoder.feed(self._recv(deadline)))

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


# -- asyncio -------------------------------------------------------------------------------------


class Closed(Exception):
    """The server closed the connection."""


class RawClient(_Receiver):
    """One asyncio connection (optionally TLS, optionally compressed) to nsqd or the embedded
    server; the setup steps are the test's (``identify``, ``start_tls``, ``enable``, or
    ``setup`` for the usual ones)."""

    instances: ClassVar[list[RawClient]] = []  # closed after each test by a conftest fixture

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(answer_heartbeats=True)  # like a client library
        RawClient.instances.append(self)
        self.reader = reader
        self.writer = writer
        self.closed = False
        self.single = False  # decode one frame at a time (the stream may switch after it)

    @classmethod
    async def connect(cls, address: str, *, magic: bool = True) -> RawClient:
        host, port = host_port(address)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), DEFAULT_TIMEOUT
        )
        client = cls(reader, writer)
        if magic:
            client.send(MAGIC_V2)
        return client

    def send(self, data: bytes) -> None:
        if self.codec is not None:
            data = self.codec.compress(data)
        self.writer.write(data)

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), DEFAULT_TIMEOUT)
        except (OSError, TimeoutError, ssl.SSLError):
            pass

    async def _fill(self, timeout: float) -> None:
        try:
            data = await asyncio.wait_for(self.reader.read(256 * 1024), timeout)
        except (ConnectionError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            self.writer.close()
            raise Closed
        if self.codec is not None:
            data = self.codec.decompress(data)
        if self.single:
            event = self.decoder.next_event(data)
            self._received([] if event is None else [event])
        else:
            self._received(self.decoder.feed(data))

    async def event(self, timeout: float = DEFAULT_TIMEOUT, *, heartbeats: bool = False) -> Event:
        """The next event (heartbeats only with ``heartbeats=True``); TimeoutError, Closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self.single and not self.events:
                event = self.decoder.next_event()
                self._received([] if event is None else [event])
            event = self._pop(skip_heartbeats=not heartbeats)
            if event is not None:
                return event
            await self._fill(max(deadline - loop.time(), 0.001))

    async def response(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        event = await self.event(timeout)
        assert isinstance(event, Response), event
        return event.data

    async def error(self, timeout: float = DEFAULT_TIMEOUT) -> str:
        event = await self.event(timeout)
        assert isinstance(event, ErrorFrame), event
        return event.text

    async def message(self, timeout: float = DEFAULT_TIMEOUT) -> Message:
        event = await self.event(timeout)
        assert isinstance(event, Message), event
        return event

    async def messages(self, count: int, timeout: float = DEFAULT_TIMEOUT) -> list[Message]:
        return [await self.message(timeout) for _ in range(count)]

    async def expect_closed(self, timeout: float = DEFAULT_TIMEOUT) -> list[Event]:
        """Every event until the server closes the connection (TimeoutError if it does not)."""
        seen: list[Event] = []
        try:
            while True:
                seen.append(await self.event(timeout, heartbeats=True))
        except Closed:
            return seen

    async def identify(self, **fields: Any) -> dict[str, Any] | bytes:
        """IDENTIFY and read the reply: the JSON dict, or the raw bytes (``OK``)."""
        self.send(identify_body(**fields))
        data = await self.handshake_response()
        return json.loads(data) if data.startswith(b"{") else data

    async def handshake_response(self) -> bytes:
        """One response, leaving later bytes undecoded (they may belong to a new layer)."""
        self.single = True
        try:
            return await self.response()
        finally:
            self.single = False

    async def start_tls(self, context: ssl.SSLContext, hostname: str = "localhost") -> None:
        await self.writer.start_tls(context, server_hostname=hostname)

    def enable(self, codec: Codec) -> None:
        """Switch to a compressed stream; bytes already received are decompressed too."""
        assert not self.events
        rest = self.decoder.take_unparsed()
        self.codec = codec
        if rest:
            self._received(self.decoder.feed(codec.decompress(rest)))

    async def setup(self, **fields: Any) -> dict[str, Any] | bytes:
        """IDENTIFY (heartbeats 1 s unless given) and apply the negotiated compression."""
        fields.setdefault("heartbeat_interval", 1000)
        reply = await self.identify(**fields)
        if isinstance(reply, dict):
            if reply.get("snappy"):
                self.enable(SnappyCodec())
                assert await self.handshake_response() == b"OK"
            if reply.get("deflate"):
                self.enable(DeflateCodec(reply["deflate_level"]))
                assert await self.handshake_response() == b"OK"
        return reply

    async def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        self.send(f"SUB {topic} {channel}\n".encode())
        assert await self.response() == b"OK"
        if rdy is not None:
            self.send(b"RDY %d\n" % rdy)

    async def pub(self, topic: str, *bodies: bytes) -> None:
        for body in bodies:
            self.send(sized(b"PUB %s\n" % topic.encode(), body))
        for _ in bodies:
            assert await self.response() == b"OK"

    async def sync(self) -> None:
        """Round-trip a PUB so everything sent before has been processed. Messages that
        arrive meanwhile stay queued for later reads; any other event fails the sync."""
        self.send(sized(b"PUB " + SYNC_TOPIC + b"\n", b"x"))
        held: list[Event] = []
        while True:
            reply = await self.event()
            if not isinstance(reply, Message):
                break
            held.append(reply)
        self.events.extendleft(reversed(held))
        assert reply == Response(b"OK"), reply
