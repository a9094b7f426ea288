"""An asyncio raw NSQ connection for the embedded-server tests, plus transcript helpers.

Bytes go out as given (so tests can send what no encoder would build); frames come back through
the protocol layer's :class:`FrameDecoder`. Every wait has a deadline. :func:`transcript` turns
what a server answers to a script into comparable tuples, which is how the differential tests
check the embedded nsqd against the real one.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
from collections import deque
from typing import Any, ClassVar

from nsqclient.message import Message
from nsqclient.protocol import (
    Codec,
    DeflateCodec,
    ErrorFrame,
    Event,
    FrameDecoder,
    Heartbeat,
    Response,
    SnappyCodec,
)
from nsqclient.protocol.commands import MAGIC_V2

TIMEOUT = 10.0
SYNC_TOPIC = b"sync_marker"


class Closed(Exception):
    """The server closed the connection."""


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


class RawClient:
    instances: ClassVar[list[RawClient]] = []  # closed after each test by a conftest fixture

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        RawClient.instances.append(self)
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.codec: Codec | None = None
        self.events: deque[Event] = deque()
        self.closed = False
        self.auto_nop = True  # answer heartbeats like a client library would
        self.single = False  # decode one frame at a time (the stream may switch after it)

    @classmethod
    async def connect(cls, address: str, *, magic: bool = True) -> RawClient:
        host, port = host_port(address)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), TIMEOUT)
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
            await asyncio.wait_for(self.writer.wait_closed(), TIMEOUT)
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
            if event is not None:
                self.events.append(event)
        else:
            self.events.extend(self.decoder.feed(data))

    async def event(self, timeout: float = TIMEOUT, *, heartbeats: bool = False) -> Event:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self.single and not self.events:
                event = self.decoder.next_event()
                if event is not None:
                    self.events.append(event)
            while self.events:
                event = self.events.popleft()
                if isinstance(event, Heartbeat) and self.auto_nop:
                    self.send(b"NOP\n")
                if heartbeats or not isinstance(event, Heartbeat):
                    return event
            await self._fill(max(deadline - loop.time(), 0.001))

    async def response(self, timeout: float = TIMEOUT) -> bytes:
        event = await self.event(timeout)
        assert isinstance(event, Response), event
        return event.data

    async def error(self, timeout: float = TIMEOUT) -> str:
        event = await self.event(timeout)
        assert isinstance(event, ErrorFrame), event
        return event.text

    async def message(self, timeout: float = TIMEOUT) -> Message:
        event = await self.event(timeout)
        assert isinstance(event, Message), event
        return event

    async def messages(self, count: int, timeout: float = TIMEOUT) -> list[Message]:
        return [await self.message(timeout) for _ in range(count)]

    async def expect_closed(self, timeout: float = TIMEOUT) -> list[Event]:
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
            self.events.extend(self.decoder.feed(codec.decompress(rest)))

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


def normalize(event: Event) -> tuple[Any, ...]:
    if isinstance(event, Heartbeat):
        return ("heartbeat",)
    if isinstance(event, ErrorFrame):
        return ("error", event.text)
    if isinstance(event, Message):
        return ("message", event.attempts, bytes(event.body))
    assert isinstance(event, Response)
    return ("response", event.data)


_REPLY_VERBS = (b"IDENTIFY", b"SUB ", b"PUB ", b"MPUB ", b"DPUB ", b"CLS", b"AUTH")


async def transcript(
    address: str, *chunks: bytes, sync: bool = True, replies: int | None = None
) -> list[tuple[Any, ...]]:
    """Send ``chunks`` (after the magic) and record every frame until the server closes the
    connection or, with ``sync``, answers a final sync PUB.

    The sync reply is the response after ``replies`` others (by default one per chunk that
    starts with a reply-producing command; each chunk should hold one command).
    """
    if replies is None:
        replies = sum(1 for c in chunks if c.startswith(_REPLY_VERBS))
    client = await RawClient.connect(address)
    for chunk in chunks:
        client.send(chunk)
    # The sync PUB leaves only once every reply-producing command has answered. Sent with the
    # script, it may still sit unread in the server's socket when a fatal error closes the
    # connection; a close with unread data is a TCP reset, and a reset can discard the error
    # frame before we read it (seen with real nsqd under CPU load).
    unsent_sync = sync
    answered = 0
    seen: list[tuple[Any, ...]] = []
    responses = 0
    try:
        while True:
            if unsent_sync and answered >= replies:
                client.send(sized(b"PUB " + SYNC_TOPIC + b"\n", b"x"))
                unsent_sync = False
            event = await client.event()
            if isinstance(event, Response | ErrorFrame):
                answered += 1
            if sync and isinstance(event, Response):
                if responses == replies:
                    seen.append(("sync", event.data))
                    break
                responses += 1
            seen.append(normalize(event))
    except Closed:
        seen.append(("closed",))
    await client.close()
    return seen
