"""FaultProxy: an in-process TCP proxy that does to a connection what a bad network does.

Every accepted connection gets its own upstream connection; bytes are forwarded as they arrive,
with flow control (a reader that stops reading stops the proxy reading its peer, so nothing is
buffered without bound). Each fault method returns a :class:`Fault`, undone by ``undo()`` or by
leaving its ``with`` block; :meth:`FaultProxy.heal` undoes every fault at once.

The proxy runs on an asyncio loop: the running one (``await proxy.start()``, for async tests)
or a thread of its own (``proxy.start_in_thread()``, for sync tests and the pytest fixtures).
Every public method may be called from any thread: off the proxy's loop it is handed to that
loop and returns once applied.
The forwarding itself lives in :mod:`.links`, frame damage in :mod:`.frames`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import TracebackType
from typing import Literal, Self, TypeVar

from .frames import FrameOp
from .links import Direction, Link, Pipe

__all__ = ["Fault", "FaultCounters", "FaultProxy"]

_T = TypeVar("_T")
_TIMEOUT = 30.0
RefuseMode = Literal["refuse", "reset", "close"]


@dataclass
class FaultCounters:
    """What a proxy forwarded and did (a snapshot: :meth:`FaultProxy.counters`)."""

    connections_accepted: int = 0
    #: connections turned away while refusing (accept-and-reset, accept-and-close)
    connections_refused: int = 0
    upstream_failures: int = 0
    connections_cut: int = 0
    bytes_up: int = 0  # client -> server, forwarded
    bytes_down: int = 0  # server -> client, forwarded
    bytes_dropped: int = 0
    frames_down: int = 0  # frames from the server seen by the frame cursors
    frames_dropped: int = 0
    frames_duplicated: int = 0
    frames_resized: int = 0
    frames_replaced: int = 0
    frames_injected: int = 0  # injected frames and garbage insertions
    frame_ops_skipped: int = 0  # armed on an opaque (TLS/compressed) connection


class Fault:
    """An active fault: ``undo()`` it, or use it as a context manager (sync or async)."""

    def __init__(self, proxy: FaultProxy, name: str, undo: Callable[[], None]) -> None:
        self.proxy = proxy
        self.name = name
        self._undo: Callable[[], None] | None = undo

    @property
    def active(self) -> bool:
        """True until :meth:`undo` (or the end of the ``with`` block)."""
        return self._undo is not None

    def undo(self) -> None:
        """End this fault (idempotent)."""
        undo, self._undo = self._undo, None
        if undo is not None:
            self.proxy._on_loop(undo)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        return f"<Fault {self.name} {'active' if self.active else 'undone'}>"


class FaultProxy:
    """A TCP proxy in front of ``upstream`` (``"host:port"`` or ``(host, port)``), listening
    on ``host:port`` (port 0: a free one; see :attr:`address`)."""

    def __init__(
        self, upstream: str | tuple[str, int], *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if isinstance(upstream, str):
            up_host, _, up_port = upstream.rpartition(":")
            self.upstream: tuple[str, int] = (up_host.strip("[]") or "127.0.0.1", int(up_port))
        else:
            self.upstream = (upstream[0], int(upstream[1]))
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._links: dict[int, Link] = {}
        self._next = 0
        self._count = FaultCounters()
        self._refusing: RefuseMode | None = None
        self._closing = False
        self._stall_new = False
        self._rates: dict[Direction, float | None] = {"up": None, "down": None}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Self:
        """Listen on the running loop (every fault method then runs on it)."""
        self._loop = asyncio.get_running_loop()
        await self._listen()
        return self

    def start_in_thread(self, timeout: float = _TIMEOUT) -> Self:
        """Run on a loop thread of its own; returns once listening."""
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        ready.wait(timeout)
        self._loop = loop
        asyncio.run_coroutine_threadsafe(self._listen(), loop).result(timeout)
        return self

    def _bind(self) -> socket.socket:
        """A listening socket, bound at once (connections queue in its backlog from now on)."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        return sock

    async def _listen(self) -> None:
        await self._serve(self._bind())

    async def _serve(self, sock: socket.socket) -> None:
        assert self._loop is not None
        server = await self._loop.create_server(self._accept, sock=sock)
        if self._refusing == "refuse" or self._closing:  # refused again before this ran
            server.close()
        else:
            self._server = server

    def _relisten(self) -> None:
        if self._server is None and self._loop is not None and not self._closing:
            self._loop.create_task(self._serve(self._bind()))

    async def close(self) -> None:
        """Stop listening and drop every connection (for a proxy started with ``start()``)."""
        self._shutdown()
        await asyncio.sleep(0)

    def stop(self, timeout: float = _TIMEOUT) -> None:
        """Stop a proxy started with :meth:`start_in_thread` (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._on_loop(self._shutdown, timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._thread = None

    def _shutdown(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self._links.values()):
            link.close()

    def _on_loop(self, fn: Callable[[], _T], timeout: float = _TIMEOUT) -> _T:
        """Run ``fn`` on the proxy's loop: now if this is its thread, else there and wait."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the FaultProxy is not started")
        if self._thread is None or threading.current_thread() is self._thread:
            return fn()
        result: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(fn())
            except BaseException as exc:
                result.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return result.result(timeout)

    def __enter__(self) -> Self:
        return self.start_in_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ accepting

    def _accept(self) -> asyncio.Protocol:
        self._next += 1
        return Link(self, self._next).client

    def _admit(self, link: Link) -> None:
        if self._refusing is not None:
            self._count.connections_refused += 1
            link.closed = True
            link.client.close(rst=self._refusing == "reset")
            return
        self._count.connections_accepted += 1
        self._links[link.number] = link
        for pipe in (link.up, link.down):
            if self._stall_new:
                pipe.stalled = True
            rate = self._rates[pipe.direction]
            if rate is not None:
                pipe.set_rate(rate)
        link.start()

    # ------------------------------------------------------------------ inspection

    @property
    def address(self) -> str:
        """``host:port`` to give the client instead of nsqd's."""
        return f"{self.host}:{self.port}"

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        return len(self._links)

    def counters(self) -> FaultCounters:
        """A snapshot of what the proxy forwarded and did."""

        def snap() -> FaultCounters:
            return FaultCounters(
                **{f.name: getattr(self._count, f.name) for f in fields(self._count)}
            )

        return self._on_loop(snap)

    # ------------------------------------------------------------------ faults

    def cut(self, *, rst: bool = False) -> int:
        """Close every connection now, both ways: FIN, or RST (SO_LINGER 0) with ``rst``.
        Returns how many were cut. New connections are accepted as usual."""

        def run() -> int:
            links = list(self._links.values())
            for link in links:
                link.close(rst=rst)
            self._count.connections_cut += len(links)
            return len(links)

        return self._on_loop(run)

    def stall(self, *, new_connections: bool = False) -> Fault:
        """Forward nothing either way, keeping connections open (the kernel buffers fill up, as
        with a black-holed route); with ``new_connections``, connections accepted meanwhile are
        stalled too. Undo forwards what waited."""

        def run() -> None:
            self._stall_new = new_connections
            for link in self._links.values():
                link.up.set_stalled(True)
                link.down.set_stalled(True)

        def undo() -> None:
            self._stall_new = False
            for link in self._links.values():
                link.up.set_stalled(False)
                link.down.set_stalled(False)

        self._on_loop(run)
        return Fault(self, "stall", undo)

    def slow(self, *, down: float | None = None, up: float | None = None) -> Fault:
        """Limit bytes per second toward the client (``down``) and/or the server (``up``), for
        current and new connections."""
        if (down is not None and down <= 0) or (up is not None and up <= 0):
            raise ValueError("rates are bytes per second, > 0")

        def apply(rates: dict[Direction, float | None]) -> None:
            self._rates = dict(rates)
            for link in self._links.values():
                link.up.set_rate(rates["up"])
                link.down.set_rate(rates["down"])

        self._on_loop(lambda: apply({"up": up, "down": down}))
        return Fault(self, "slow", lambda: apply({"up": None, "down": None}))

    def drop(self, nbytes: int, direction: Direction = "down") -> Fault:
        """Silently discard the next ``nbytes`` bytes going ``direction`` on every current
        connection (the stream then continues out of step, as after a lost segment)."""
        if nbytes <= 0:
            raise ValueError("nbytes must be > 0")

        def pipes() -> list[Pipe]:
            return [getattr(link, direction) for link in self._links.values()]

        def run() -> None:
            for pipe in pipes():
                pipe.drop += nbytes

        def undo() -> None:
            for pipe in pipes():
                pipe.drop = 0

        self._on_loop(run)
        return Fault(self, f"drop {nbytes} {direction}", undo)

    def refuse(self, mode: RefuseMode = "refuse") -> Fault:
        """Turn new connections away until undone: ``"refuse"`` stops listening (clients get
        ECONNREFUSED), ``"reset"`` accepts and resets, ``"close"`` accepts and closes.
        Connections already open are left alone."""

        def run() -> None:
            self._refusing = mode
            if mode == "refuse" and self._server is not None:
                self._server.close()
                self._server = None

        def undo() -> None:
            self._refusing = None
            self._relisten()  # bound before undo() returns: connections queue meanwhile

        self._on_loop(run)
        return Fault(self, f"refuse ({mode})", undo)

    # -- frame damage, toward the client (plain connections only) --

    def _arm(self, op: FrameOp, name: str) -> Fault:
        counters = {
            "drop": "frames_dropped",
            "duplicate": "frames_duplicated",
            "size": "frames_resized",
            "replace": "frames_replaced",
        }

        def applied(action: str) -> None:
            key = counters[action]
            setattr(self._count, key, getattr(self._count, key) + 1)

        armed: list[tuple[Pipe, FrameOp]] = []

        def run() -> None:
            for link in self._links.values():
                cursor = link.down.cursor
                assert cursor is not None
                if not link.client.writable:
                    continue
                if cursor.opaque:
                    self._count.frame_ops_skipped += 1
                    continue
                mine = FrameOp(op.action, op.frame, op.delta, op.payload, applied)
                cursor.ops.append(mine)
                armed.append((link.down, mine))

        def undo() -> None:
            for pipe, mine in armed:
                mine.cancelled = True
                pipe.release()

        self._on_loop(run)
        return Fault(self, name, undo)

    def change_frame_size(self, delta: int, frame: str = "any") -> Fault:
        """Add ``delta`` to the size field of the next frame (``frame``: ``"any"``,
        ``"response"``, ``"error"``, ``"message"`` or ``"heartbeat"``) on every connection."""
        return self._arm(FrameOp("size", frame, delta=delta), f"size {delta:+d}")

    def replace_next_frame(self, payload: bytes, frame: str = "response") -> Fault:
        """Replace the payload of the next such frame (keeping its type)."""
        return self._arm(FrameOp("replace", frame, payload=payload), "replace")

    def drop_next_frame(self, frame: str = "any") -> Fault:
        """Swallow the next such frame (``frame`` as in :meth:`change_frame_size`) on every
        connection, as a lost write would; the client never sees it.
        """
        return self._arm(FrameOp("drop", frame), "drop frame")

    def duplicate_next_frame(self, frame: str = "any") -> Fault:
        """Deliver the next such frame (``frame`` as in :meth:`change_frame_size`) twice on every
        connection.
        """
        return self._arm(FrameOp("duplicate", frame), "duplicate frame")

    def inject_frame(self, frame_type: int, payload: bytes) -> int:
        """Write a well-formed frame to every client at its next frame boundary (0 response,
        1 error, 2 message). Returns how many connections got it (opaque ones do not)."""
        return self.inject_bytes(struct.pack(">ii", len(payload) + 4, frame_type) + payload)

    def inject_bytes(self, data: bytes) -> int:
        """Write raw bytes (garbage) to every client at its next frame boundary."""

        def run() -> int:
            done = 0
            for link in self._links.values():
                cursor = link.down.cursor
                assert cursor is not None
                if not link.client.writable:
                    continue  # closing: nothing more reaches that client
                if cursor.opaque:
                    self._count.frame_ops_skipped += 1
                    continue
                link.down.inject(data)
                self._count.frames_injected += 1
                done += 1
            return done

        return self._on_loop(run)

    def heal(self) -> None:
        """Undo every fault: forward again at full speed, accept again, disarm frame damage."""

        def run() -> None:
            self._refusing = None
            self._stall_new = False
            self._rates = {"up": None, "down": None}
            for link in self._links.values():
                for pipe in (link.up, link.down):
                    pipe.drop = 0
                    pipe.set_stalled(False)
                    pipe.set_rate(None)
                    if pipe.cursor is not None:
                        for op in pipe.cursor.ops:
                            op.cancelled = True
                        pipe.release()
            self._relisten()

        self._on_loop(run)

    def __repr__(self) -> str:
        up = f"{self.upstream[0]}:{self.upstream[1]}"
        return f"<FaultProxy {self.address} -> {up} connections={len(self._links)}>"
