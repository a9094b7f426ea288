"""A connection's write path: every command of one loop iteration joined and written once.

The half of :class:`~nsqclient.aio.connection.Connection` that writes (a mixin: one object, so
the per-command paths stay one attribute away). Commands queue in a buffer written at the end
of the loop iteration (``call_soon``), so a burst of FINs or pipelined PUBs is one syscall; a
batch over ``_MAX_WRITE`` goes out in slices that follow the transport's pause and resume; a
connection shared with publishing threads (:mod:`.sharing`) writes holding its wire, and
what a thread could not send whole goes first.

On a compressed or TLS connection what is written is encoded (:mod:`.layers`) as it goes to the
transport, in writing order: the queued commands here (``_wbuf``, ``_wrest``) are not encoded
yet, ``_raw_rest`` is (a thread's unsent rest, TLS's own messages), which is why it goes first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..errors import ConnectionClosedError, ProtocolError
from ..flow.turns import IDLE
from .state import ConnectionState
from .window import Guard

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["WritePath"]

_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED
#: Bytes handed to the transport per write when a lot is queued. asyncio (3.11) keeps unsent
#: bytes in one bytearray and moves the whole remainder after every partial send, so handing it
#: hundreds of megabytes at once is quadratic; bigger batches go out in slices of this size,
#: following pause_writing/resume_writing.
_MAX_WRITE: Final = 1 << 20


class WritePath:
    """The writing half of a Connection (which sets these attributes up)."""

    address: str
    config: Config
    state: ConnectionState
    _loop: asyncio.AbstractEventLoop | None
    _transport: asyncio.Transport | None
    _encode: Callable[[bytes], bytes] | None  # frames -> codec -> TLS (see .layers)
    _guard: Guard | None
    _section: Any  # the connection's section (see connection._Section)
    _wake_at: float
    _wbuf: list[bytes]
    _wrest: memoryview | None
    _raw_rest: list[bytes]
    _flush_scheduled: bool
    _batch_now: float | None
    _write_paused_at: float | None
    _paused_buffer_size: int
    _drain_waiters: list[asyncio.Future[None]]

    if TYPE_CHECKING:  # (the Connection's; declared for the type checker only)

        def _arm(self, when: float) -> None: ...

        def abort(self, exc: BaseException | None = None) -> None: ...

    # ------------------------------------------------------------------ asyncio.Protocol

    def pause_writing(self) -> None:
        """asyncio.Protocol callback: the transport's buffer is over its high-water mark."""
        assert self._loop is not None
        with self._section:  # (threads look at it before writing)
            self._write_paused_at = self._loop.time()
            transport = self._transport
            self._paused_buffer_size = transport.get_write_buffer_size() if transport else 0
        due = self._write_paused_at + self.config.sec.write_timeout
        if due < self._wake_at and self.state is not _CLOSED:
            self._arm(due)

    def resume_writing(self) -> None:
        """asyncio.Protocol callback: the buffer drained; flush held-back writes, wake drain()."""
        with self._section:
            self._write_paused_at = None
            held = self._wbuf or self._wrest is not None or self._raw_rest
            if held and not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)  # type: ignore[union-attr]
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ writing

    def _write(self, data: bytes) -> None:
        """Queue bytes for the single write at the end of this loop iteration (on a shared
        connection the caller is inside a section)."""
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _flush(self, force: bool = False) -> None:
        if self._guard is not None:
            with self._section:
                self._flush_locked(force)
        else:
            self._flush_locked(force)

    def _flush_locked(self, force: bool) -> None:
        self._flush_scheduled = False
        self._batch_now = None
        transport = self._transport
        if transport is None or self.state is _CLOSED:
            self._wbuf.clear()
            self._wrest = None
            self._raw_rest.clear()
            return
        if self._write_paused_at is not None and not force:
            return  # resume_writing() flushes; meanwhile the timer enforces write_timeout
        raw = self._raw_rest
        if raw:  # what a publishing thread could not send whole goes first
            transport.write(raw[0] if len(raw) == 1 else b"".join(raw))
            raw.clear()
        if self._wrest is not None and not self._write_big(None, force):
            return  # paused again before the rest of an earlier big batch went out
        buf = self._wbuf
        if not buf:
            return
        data = buf[0] if len(buf) == 1 else b"".join(buf)
        buf.clear()
        if len(data) > _MAX_WRITE:
            self._write_big(data, force)
            return
        encode = self._encode
        if encode is not None:
            try:
                data = encode(data)
            except ProtocolError as exc:  # (TLS failed on a read already)
                self.abort(exc)
                return
        transport.write(data)

    def _write_big(self, data: bytes | None, force: bool) -> bool:
        """Write ``data`` (or the rest of an earlier batch) in ``_MAX_WRITE`` slices, stopping
        when the transport asks us to pause; True once everything went out."""
        transport = self._transport
        assert transport is not None
        view = memoryview(data) if data is not None else self._wrest
        assert view is not None
        encode = self._encode
        pos, end = 0, len(view)
        while pos < end and (force or self._write_paused_at is None):
            chunk = view[pos : pos + _MAX_WRITE]
            pos += len(chunk)
            if encode is not None:
                try:
                    chunk = encode(bytes(chunk))  # type: ignore[assignment]
                except ProtocolError as exc:
                    self._wrest = None
                    self.abort(exc)
                    return True
            # the transport may call pause_writing() before returning
            transport.write(chunk)
        self._wrest = view[pos:] if pos < end else None
        return self._wrest is None

    def hold_writes(self) -> bool:
        """Queue the commands that follow without scheduling their write; True if this call
        holds them, and the caller then writes them with :meth:`write_held` before its
        callback returns. For commands queued from a callback that itself runs at the end of a
        loop iteration (the Writer's coalescing): scheduling their write would take one loop
        iteration (and one more poll of the selector) more than a PUB. False if a write is
        scheduled already: it takes these too."""
        with self._section:
            if self._flush_scheduled:
                return False
            self._flush_scheduled = True
            return True

    def write_held(self) -> None:
        """Write what was queued since :meth:`hold_writes` (and end the hold)."""
        self._flush()

    def send(self, data: bytes) -> None:
        """Queue a command that gets no reply (RDY, FIN, REQ, TOUCH, NOP)."""
        if self.state is _CLOSED:
            raise ConnectionClosedError("connection is closed", address=self.address)
        with self._section:
            self._write(data)

    @property
    def writable(self) -> bool:
        """False while the transport's buffer is above its high-water mark."""
        return self._write_paused_at is None

    async def drain(self) -> None:
        """Wait until the transport accepts more data (or the connection closes)."""
        if self._write_paused_at is None or self.state is _CLOSED:
            return
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(fut)
        await fut

    # -- for the shared half (.sharing), holding the guard --

    def _queue_for_loop(self, data: bytes, raw: bool) -> None:
        """A thread's bytes, written by the loop's next flush (``raw``: encoded already, the
        rest of a send or TLS's own message, written before anything else; else a command,
        encoded by the flush in its turn)."""
        (self._raw_rest if raw else self._wbuf).append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon_threadsafe(self._flush)  # type: ignore[union-attr]

    def _thread_write_failed(self, error: ConnectionClosedError) -> None:
        """Loop: a thread's write met a broken socket. nsqd may have said why before it closed
        (an error frame after a refused publish, still unread), so the loop reads first (the
        turn is the loop's: flow.turns); if the end is not seen within ``IDLE``, the connection
        is dropped with ``error``."""
        if self.state is not _CLOSED:
            self._loop.call_later(IDLE, self._drop_if_open, error)  # type: ignore[union-attr]

    def _drop_if_open(self, error: ConnectionClosedError) -> None:
        if self.state is not _CLOSED:
            self.abort(error)
