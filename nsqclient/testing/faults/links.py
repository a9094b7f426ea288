"""The forwarding machinery of :class:`~.proxy.FaultProxy`: a link per client connection, made
of two sockets and one pipe per direction.

A pipe forwards bytes as they arrive, or queues them while it is stalled, rate-limited or its
destination is not ready; its source stops being read while it cannot forward (a stall, a full
destination, more than ``_QUEUE_HIGH`` queued), so nothing is buffered without bound and the
kernel's buffers fill up as they would on a real network. The pipe toward the client carries a
:class:`~.frames.FrameCursor` for frame damage. A link sees the proxy that made it through
:class:`Proxy` (a protocol: the proxy imports this module, not the other way round).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Literal, Protocol

from .frames import FrameCursor, identify_upgrades

__all__ = ["Direction", "Link", "LinkCounts", "Pipe", "Proxy"]

#: bytes a pipe queues (slow link, stall, upstream still connecting) before it stops reading
_QUEUE_HIGH = 256 * 1024
_TICK = 0.01  # seconds between two slices of a rate-limited pipe
_LINGER_RST = struct.pack("ii", 1, 0)

Direction = Literal["up", "down"]


class LinkCounts(Protocol):
    """The counters a link adds to (:class:`~.proxy.FaultCounters`)."""

    bytes_up: int
    bytes_down: int
    bytes_dropped: int
    frames_down: int
    upstream_failures: int


class Proxy(Protocol):
    """What of its :class:`~.proxy.FaultProxy` a link uses: where to connect, the proxy's
    loop, its counters, and its table of links (a link admits itself once its client
    connection is made, and leaves the table when it closes)."""

    upstream: tuple[str, int]
    _loop: asyncio.AbstractEventLoop | None
    _links: dict[int, Link]

    @property
    def _count(self) -> LinkCounts: ...

    def _admit(self, link: Link) -> None: ...


class Side(asyncio.Protocol):
    """One socket of a link (the client's, or ours to the server)."""

    def __init__(self, link: Link, name: str) -> None:
        self.link = link
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reading = True
        self.eof_sent = False  # write_eof() was called: nothing more may be written

    @property
    def writable(self) -> bool:
        transport = self.transport
        return (
            transport is not None
            and not self.closed
            and not self.eof_sent
            and not transport.is_closing()
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.name == "client":
            self.link.proxy._admit(self.link)

    def data_received(self, data: bytes) -> None:
        self.link.received(self, data)

    def eof_received(self) -> bool:
        self.link.eof(self)
        return True  # keep the other direction open until the peer's EOF is forwarded

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.link.lost(self, exc)

    def pause_writing(self) -> None:
        self.link.pipe_into(self).set_dst_paused(True)

    def resume_writing(self) -> None:
        self.link.pipe_into(self).set_dst_paused(False)

    def set_reading(self, on: bool) -> None:
        transport = self.transport
        if transport is None or self.closed or on == self.reading:
            return
        self.reading = on
        with contextlib.suppress(RuntimeError, AttributeError):
            if on:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def write(self, data: bytes) -> None:
        if data and self.writable:
            self.transport.write(data)  # type: ignore[union-attr]

    def close(self, rst: bool = False) -> None:
        transport = self.transport
        if transport is None or self.closed:
            return
        if rst:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
            transport.abort()
        else:
            transport.close()


class Pipe:
    """One direction of a link: drop, slow, stall and (toward the client) frame damage."""

    def __init__(self, link: Link, src: Side, dst: Side, direction: Direction) -> None:
        self.link = link
        self.src = src
        self.dst = dst
        self.direction: Direction = direction
        self.queue = bytearray()
        self.stalled = False
        self.rate: float | None = None
        self.drop = 0
        self.dst_ready = direction == "down"  # "up" waits for the server connection
        self.dst_paused = False
        self.eof = False
        self._allowance = 0.0
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.cursor = FrameCursor() if direction == "down" else None
        #: the client's first bytes, until they tell whether IDENTIFY asks for TLS/compression
        self.sniff: bytearray | None = bytearray() if direction == "up" else None

    def feed(self, data: bytes) -> None:
        proxy = self.link.proxy
        if self.sniff is not None:
            self._sniff(data)
        if self.drop:
            n = min(self.drop, len(data))
            self.drop -= n
            proxy._count.bytes_dropped += n
            data = data[n:]
        cursor = self.cursor
        if cursor is not None and data:
            before = cursor.frames
            data = cursor.process(data)
            proxy._count.frames_down += cursor.frames - before
        if not data:
            return
        if self.queue or self.stalled or self.rate is not None or not self.dst_ready:
            self.queue += data
            self.schedule()
        elif self.dst_paused:
            self.queue += data
        else:
            self._send(data)
        self.update_reading()

    def _sniff(self, data: bytes) -> None:
        sniff = self.sniff
        assert sniff is not None
        sniff += data
        verdict = identify_upgrades(bytes(sniff)) if len(sniff) < 65536 else False
        if verdict is not None:
            self.sniff = None
            if verdict:
                cursor = self.link.down.cursor
                assert cursor is not None
                cursor.opaque = True

    def _send(self, data: bytes) -> None:
        if self.direction == "up":
            self.link.proxy._count.bytes_up += len(data)
        else:
            self.link.proxy._count.bytes_down += len(data)
        self.dst.write(data)

    def inject(self, data: bytes) -> None:
        """Write ``data`` at the next frame boundary (toward the client)."""
        cursor = self.cursor
        assert cursor is not None
        if cursor.at_boundary and not cursor.holding and not self.queue:
            self._send(data)
        elif cursor.at_boundary and not cursor.holding:
            self.queue += data
            self.schedule()
        else:
            cursor.injects.append(data)

    def release(self) -> None:
        """Forward what a frame cursor held for an operation that was undone."""
        if self.cursor is not None:
            rest = self.cursor.release()
            if rest:
                self.queue += rest
                self.schedule()

    def schedule(self) -> None:
        if self._timer is None:
            loop = self.link.proxy._loop
            assert loop is not None
            self._timer = loop.call_soon(self.pump)  # type: ignore[assignment]

    def pump(self) -> None:
        self._timer = None
        if self.stalled or self.dst_paused or not self.dst_ready or self.dst.closed:
            self.update_reading()
            return
        loop = self.link.proxy._loop
        assert loop is not None
        queue = self.queue
        if self.rate is None:
            if queue:
                self._send(bytes(queue))
                queue.clear()
        elif queue:
            now = loop.time()
            burst = max(self.rate * _TICK * 2, 1.0)
            self._allowance = min(self._allowance + (now - self._last) * self.rate, burst)
            self._last = now
            n = min(int(self._allowance), len(queue))
            if n:
                self._send(bytes(queue[:n]))
                del queue[:n]
                self._allowance -= n
            if queue:
                self._timer = loop.call_later(_TICK, self.pump)
        if not queue and self.eof:
            self.eof = False
            transport = self.dst.transport
            if self.dst.writable and transport is not None and transport.can_write_eof():
                self.dst.eof_sent = True
                transport.write_eof()
        self.update_reading()

    def set_rate(self, rate: float | None) -> None:
        self.rate = rate
        loop = self.link.proxy._loop
        assert loop is not None
        self._last = loop.time()
        self._allowance = 0.0
        self.schedule()

    def set_stalled(self, on: bool) -> None:
        self.stalled = on
        if not on:
            self.schedule()
        self.update_reading()

    def set_dst_paused(self, on: bool) -> None:
        self.dst_paused = on
        if not on:
            self.schedule()
        self.update_reading()

    def update_reading(self) -> None:
        blocked = (
            self.stalled or self.dst_paused or not self.dst_ready or len(self.queue) > _QUEUE_HIGH
        )
        self.src.set_reading(not blocked)

    def source_eof(self) -> None:
        self.eof = True
        self.schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.queue.clear()


class Link:
    """One client connection and its own connection to the server."""

    def __init__(self, proxy: Proxy, number: int) -> None:
        self.proxy = proxy
        self.number = number
        self.client = Side(self, "client")
        self.server = Side(self, "server")
        self.up = Pipe(self, self.client, self.server, "up")
        self.down = Pipe(self, self.server, self.client, "down")
        self.closed = False
        self._connector: asyncio.Task[None] | None = None

    def pipe_into(self, side: Side) -> Pipe:
        return self.up if side is self.server else self.down

    def start(self) -> None:
        loop = self.proxy._loop
        assert loop is not None
        self.up.update_reading()  # nothing read from the client before the server is there
        self._connector = loop.create_task(self._connect(), name=f"fault-proxy-link-{self.number}")

    async def _connect(self) -> None:
        loop = self.proxy._loop
        assert loop is not None
        host, port = self.proxy.upstream
        try:
            await loop.create_connection(lambda: self.server, host, port)
        except OSError:
            self.proxy._count.upstream_failures += 1
            self.close(rst=True)
            return
        if self.closed:
            self.server.close(rst=True)
            return
        self.up.dst_ready = True
        self.up.schedule()
        self.up.update_reading()
        self.down.update_reading()

    def received(self, side: Side, data: bytes) -> None:
        (self.up if side is self.client else self.down).feed(data)

    def eof(self, side: Side) -> None:
        (self.up if side is self.client else self.down).source_eof()

    def lost(self, side: Side, exc: Exception | None) -> None:
        other = self.server if side is self.client else self.client
        if other.transport is None:
            if self._connector is not None:
                self._connector.cancel()
        elif not other.closed:
            pipe = self.pipe_into(other)
            if exc is None and pipe.queue and not pipe.stalled:
                pipe.pump()  # what arrived before the FIN still goes out, then the FIN
            other.close(rst=exc is not None)  # a reset travels on as a reset
        self._closed()

    def close(self, rst: bool = False) -> None:
        self.up.stop()
        self.down.stop()
        if self._connector is not None and not self._connector.done():
            self._connector.cancel()
        self.client.close(rst)
        self.server.close(rst)
        self._closed()

    def _closed(self) -> None:
        if not self.closed:
            self.closed = True
            self.up.stop()
            self.down.stop()
            self.proxy._links.pop(self.number, None)
