"""A Writer connection shared with publishing threads: the seam the blocking facade uses.

A plain :class:`~nsqclient.aio.connection.Connection` is the loop's alone. The blocking facade
(:mod:`nsqclient.sync.door`) asks for :meth:`Connection.share
<nsqclient.aio.connection.Connection.share>`, and from then on the connection has a guard (one
lock, which the facade injects: the core imports nothing of threads) and a :class:`Shared`
that lets threads write their publishes to its socket
and, when it is their turn, read the replies, without ever touching the connection's insides:

* **Two locks, both injected.** The *wire* (:attr:`Shared.wire`) orders what is written: the
  loop's unwritten bytes, the socket's send side, the encoder (and a TLS session, its reads
  included), so that bytes reach nsqd in the order of the reply FIFO whoever writes them; it
  is held across a (non-blocking) send. The
  *guard* (:attr:`Shared.guard`) protects the state: the reply FIFO
  (:class:`~nsqclient.aio.replies.ReplyQueue`), the turn
  (:class:`~nsqclient.flow.turns.ReadTurns`: who reads) and the reading clock; it is never
  held across a system call, so a reading thread never waits behind a send. Order: wire, then
  guard, then the Writer's window lock (:mod:`nsqclient.aio.window`); never the other way
  round. No section completes a waiter or calls user code: what a section ends (waiters,
  wake-ups) is done after it.
* **Writing.** A thread holding the wire writes straight to a duplicate of the socket's
  descriptor when the loop has nothing unwritten (else behind the loop's bytes, in its next
  flush), so commands reach nsqd in the FIFO's order whoever writes them.
* **Reading.** Who reads is :mod:`nsqclient.flow.turns`'s decision; this module carries out
  its actions on the loop's side (pausing and resuming the transport's reading, the idle
  check) and gives the thread whose turn it is the socket (:meth:`Shared.read`) and the
  connection's decoder (:meth:`Shared.decode`, which the turn makes its own).
* **Every kind of connection.** On a compressed or TLS connection the stream layers
  (:mod:`.layers`) are used in the same order as the bytes: a thread encodes (compresses,
  encrypts) holding the wire just before its direct send, and a command it queues behind the
  loop's goes plain, encoded by the loop's flush in its turn; the unsent rest of a direct send
  is encoded already and goes first. The reading thread decompresses (the decompressor is the
  turn's, like the decoder) and decrypts holding the wire (the TLS session is one object for
  both directions, :mod:`.tlswire`), sending at once, in order, what TLS has to send.

Pure asyncio use pays nothing for this: an unshared connection has no guard and no Shared.
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any, Final, Protocol, cast

from ..errors import ConnectionClosedError, ProtocolError
from ..flow import turns as _turns
from ..flow.turns import ARM_IDLE, CLOSE_SOCKET, IDLE, PAUSE, RESUME, WAKE, Head, ReadTurns
from ..protocol import commands
from ..protocol.compression import Codec
from ..protocol.frames import Event, FrameDecoder
from .replies import Entry, ReplyQueue, SharedWaiter
from .state import ConnectionState
from .tlswire import TLSWire
from .window import Guard

__all__ = ["Shared", "ThreadSide"]

_NOP: Final = commands.nop()
_CONNECTED: Final = ConnectionState.CONNECTED
_monotonic = time.monotonic
_POLL_IN: Final = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP


class LoopSection(Protocol):
    """``with conn._section:``: the loop's locked sections of a shared connection."""

    def __enter__(self) -> None: ...

    def __exit__(self, *exc_info: object) -> None: ...


class SharedConnection(Protocol):
    """What of its connection the shared half uses (:class:`~.connection.Connection`; a
    protocol, so that this module imports nothing of the connection's)."""

    address: str
    heartbeats_received: int
    _transport: asyncio.Transport | None
    _loop: asyncio.AbstractEventLoop | None
    _replies: ReplyQueue
    _tls: TLSWire | None
    _codec: Codec | None
    _encode: Callable[[bytes], bytes] | None

    @property
    def _section(self) -> LoopSection: ...  # (answers.Section)

    _wake_at: float
    _last_read: float
    _decoder: FrameDecoder
    state: ConnectionState
    _write_paused_at: float | None
    _flush_scheduled: bool
    _wbuf: list[bytes]
    _wrest: memoryview | None
    _raw_rest: list[bytes]

    @property
    def buffered_bytes(self) -> int: ...

    @property
    def is_open(self) -> bool: ...

    def decode(self, data: bytes) -> list[Event]: ...

    def decode_clear(self, data: bytes) -> list[Event]: ...

    def abort(self, exc: BaseException | None = None) -> None: ...

    def _queue_for_loop(self, data: bytes, raw: bool) -> None: ...

    def _thread_write_failed(self, error: ConnectionClosedError) -> None: ...

    def _arm_by(self, when: float) -> None: ...

    def _check(self) -> None: ...

    def _dispatch_handed_back(self, events: list[Event]) -> None: ...


class ThreadSide(Protocol):
    """What the blocking facade plugs into a shared connection (its door)."""

    def after_loop(self) -> None:
        """The loop let go of the guard: write what threads queued while it held it."""

    def lost(self) -> None:
        """The connection is gone: hand back what is queued and unwritten."""

    def write_waiting(self) -> None:
        """A thread let go of the wire (outside the guard): write what threads queued
        while it held it."""


class Shared:
    """The seam of one connection shared with publishing threads (see the module docstring).

    Methods named ``*_wired`` are called holding :attr:`wire`, ``*_locked`` holding
    :attr:`guard`; :meth:`read` and :meth:`decode` only by the thread whose turn it is; the rest
    by any thread unless said.
    """

    def __init__(self, conn: SharedConnection, wire: Guard, guard: Guard) -> None:
        transport = conn._transport
        loop = conn._loop
        assert transport is not None and loop is not None
        self._conn = conn
        self._transport = transport
        self._loop = loop
        self.address = conn.address
        self.wire = wire
        self.guard = guard
        self.replies: ReplyQueue = conn._replies
        #: the connection's decoder: the turn's holder owns it while it reads
        self.decoder: FrameDecoder = conn._decoder
        self._tls = conn._tls
        self._encode = conn._encode
        #: no TLS, no compression: the socket carries frames as they are (a read of one OK
        #: frame's bytes is one OK)
        self.plain = conn._tls is None and conn._codec is None
        self.turns = ReadTurns()
        self.side: ThreadSide | None = None
        #: a duplicate of the socket's descriptor, so that a thread's send or read can never
        #: reach a descriptor number the loop has closed and the system has given to another
        #: file; closed by whoever leaves the turn last (flow.turns, invariant 4)
        self._sock: socket.socket | None = socket.socket(
            fileno=os.dup(transport.get_extra_info("socket").fileno())
        )
        self._poll = select.poll()
        self._poll.register(self._sock.fileno(), _POLL_IN)
        self._idle: asyncio.TimerHandle | None = None
        self.heartbeats = 0

    # ------------------------------------------------------------------ threads: writing

    def writable_wired(self) -> bool:
        """Whether threads may write now: connected, no failed write, writes not paused. (A
        failed write is the guard's to record; looked at here without it: once set it stays,
        and a write that misses it by a moment fails as the first one did.)"""
        conn = self._conn
        return (
            conn.state is _CONNECTED
            and conn._write_paused_at is None
            and self._sock is not None
            and not self.turns.failed
        )  # (a transport closing on its own is CONNECTED until connection_lost: a write to it
        # then fails, or is failed with what is pending, as maybe sent)

    def write_wired(
        self,
        entries: list[Entry],
        data: bytes,
        now: float,
        unwatched_deadline: float,
        take_turn: bool = False,
    ) -> int:
        """Write ``data``, the commands of ``entries`` (put on the reply FIFO first, in
        writing order), if threads may write now (:meth:`writable_wired`): -1 if not (nothing
        done). ``unwatched_deadline``: the earliest deadline no waiting thread looks at (a
        ``pub_nowait``'s), which the loop's liveness timer must then cover. With ``take_turn``,
        the calling thread also takes the turn to read if it is free (its reply is next to
        come): 1 if it did, else 0. (One call: this is every thread publish's way.)"""
        conn = self._conn
        if (
            conn.state is not _CONNECTED
            or conn._write_paused_at is not None
            or self._sock is None
            or self.turns.failed
        ):
            return -1  # (as writable_wired: the loop's way takes it)
        guard = self.guard
        guard.acquire()  # (not `with`: every thread publish is here; see window.Window.take)
        try:
            self.replies.extend(entries, now)
            took = 1 if take_turn and self.turns.take() else 0
        finally:
            guard.release()
        if unwatched_deadline < conn._wake_at:  # (a stale look only arms it once more: the
            self._call(conn._arm_by, unwatched_deadline)  # loop checks again when it runs)
        if self._encode is not None:  # compressed or TLS: encoded in writing order
            self.send_wired(data)
            return took
        # -- send_wired(data), inlined: every plain thread publish is written here --
        if (
            conn._flush_scheduled
            or conn._wbuf
            or conn._wrest is not None
            or conn._raw_rest
            or self._transport.get_write_buffer_size()
        ):  # behind the loop's bytes, written by its next flush
            conn._queue_for_loop(data, raw=False)
            return took
        try:
            n = self._sock.send(data)  # (not None: looked at above)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._broken_wired(exc)
            return took
        if n < len(data):  # the socket's buffer is full: the loop writes the rest, first
            conn._queue_for_loop(data[n:], raw=True)
        # -- end --
        return took

    def send_wired(self, data: bytes) -> bool:
        """Write ``data`` in order: straight to the socket when the loop has nothing unwritten,
        else behind its bytes (the loop's next flush); the loop writes what did not fit. False
        if the socket is broken (the loop then reads what nsqd said before the end)."""
        conn = self._conn
        if (
            conn._flush_scheduled
            or conn._wbuf
            or conn._wrest is not None
            or conn._raw_rest
            or self._transport.get_write_buffer_size()
        ):  # behind the loop's bytes, written by its next flush
            conn._queue_for_loop(data, raw=False)
            return True
        encode = self._encode
        if encode is not None:  # compressed, encrypted: in writing order (the wire's)
            try:
                data = encode(data)
            except ProtocolError as exc:  # (TLS failed on a read: the loop drops it)
                self._broken_wired(exc)
                return False
        return self._send_now_wired(data)

    def _send_encoded_wired(self, data: bytes) -> bool:
        """Send bytes encoded already (TLS's own): straight to the socket when nothing
        encoded before them waits to be written, else behind it (the loop writes it first)."""
        conn = self._conn
        if conn._raw_rest or self._transport.get_write_buffer_size():
            conn._queue_for_loop(data, raw=True)
            return True
        return self._send_now_wired(data)

    def _send_now_wired(self, data: bytes) -> bool:
        """Send ``data`` (encoded) now: nothing waits to be written before it."""
        conn = self._conn
        sock = self._sock
        if sock is None:
            return False
        try:
            n = sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._broken_wired(exc)
            return False
        if n < len(data):  # the socket's buffer is full: the loop writes the rest, first
            conn._queue_for_loop(data[n:], raw=True)
        return True

    def _broken_wired(self, failed: Exception) -> None:
        with self.guard:
            actions = self.turns.write_failed()
        error = ConnectionClosedError(f"write failed: {failed}", address=self.address)
        self._call(self._conn._thread_write_failed, error)
        if actions & RESUME:
            self._call(self._resume, [])

    # ------------------------------------------------------------------ threads: reading

    def read(self, view: memoryview, timeout: float) -> int:
        """Read into ``view`` (the turn's holder): the bytes read; 0 if none came within
        ``timeout`` seconds; -1 when reading must go back to the loop (the stream ended or
        broke, or the socket closed: the loop meets the same and drops the connection)."""
        sock = self._sock
        if sock is None:
            return -1
        if not self._poll.poll(timeout * 1000.0 + 1.0):
            return 0
        try:
            n = sock.recv_into(view)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            return -1
        if not n:
            return -1
        # the reading clock: written by whoever reads (one reader at a time: the turn), read by
        # the loop's liveness check (a value a moment old only makes it look a moment later)
        self._conn._last_read = self.turns.last_read = _monotonic()
        return n

    def decode(self, data: bytes) -> list[Event]:
        """Frames out of bytes a thread read (the turn's holder owns the decompressor and the
        decoder meanwhile; it decrypts holding the wire). Raises ProtocolError for a damaged
        stream or a TLS alert (then :meth:`damaged`)."""
        tls = self._tls
        if tls is None:
            return self._conn.decode(data)
        with self.wire:
            clear = tls.decrypt(data)
            out = tls.outgoing()  # (a KeyUpdate answering nsqd's): before anything else
            if out:
                self._send_encoded_wired(out)
        side = self.side
        if side is not None:  # publishers that found the wire taken queued their tickets
            side.write_waiting()
        return self._conn.decode_clear(clear)

    def heartbeats_locked(self, heartbeats: int) -> None:
        """The holder read ``heartbeats`` heartbeats (then answered with
        :meth:`answer_heartbeats_wired`, once it let go of the guard)."""
        self.heartbeats += heartbeats
        self._conn.heartbeats_received += heartbeats

    def answer_heartbeats_wired(self, n: int) -> None:
        """Answer ``n`` heartbeats with NOPs, in order with the threads' writes."""
        for _ in range(n):
            if self._sock is None or not self.send_wired(_NOP):
                break

    def act(self, actions: int, events: list[Event] | None = None) -> None:
        """Carry out a turn's actions from a thread, after the guard: RESUME through the
        loop (with ``events``, what the thread read that only the loop may handle) and
        CLOSE_SOCKET. (WAKE is the caller's: it knows the threads.)"""
        if actions & RESUME:
            self._call(self._resume, events or [])
        if actions & CLOSE_SOCKET:
            self._close_socket()

    def damaged(self, error: ProtocolError) -> None:
        """A thread read a damaged stream: the loop drops the connection (after the guard)."""
        self._call(self._conn.abort, error)

    def overdue(self) -> None:
        """A thread's sent publish got no reply by its deadline: let the loop look now."""
        self._call(self._conn._check)

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nothing left to do there
            pass

    # ------------------------------------------------------------------ the loop

    def loop_read_ended_locked(self, now: float) -> None:
        """Loop: the end of one of its reads (turn LOOP): the turn may pass to the threads."""
        turns = self.turns
        if not turns.want:
            return
        head = self.replies.head()
        actions = turns.read_ended(now, self.replies.loop_own > 0, self.head_kind(head, None))
        if actions:
            self._apply_loop(actions)
            if actions & WAKE and head is not None:
                cast("SharedWaiter", head[0]).wake_reader()

    def loop_command_locked(self, now: float) -> None:
        """Loop: it queued a command whose reply only it may complete: it reads."""
        actions = self.turns.loop_command(now)
        if actions:
            self._apply_loop(actions)

    def _apply_loop(self, actions: int) -> None:
        if actions & PAUSE:
            self._transport.pause_reading()
        if actions & RESUME:
            self._transport.resume_reading()
        if actions & ARM_IDLE and self._idle is None:
            self._idle = self._loop.call_later(IDLE, self._idle_check)

    def _idle_check(self) -> None:
        self._idle = None
        conn = self._conn
        with conn._section:
            actions = self.turns.idle(self._loop.time())
            if actions:
                self._apply_loop(actions)

    def _resume(self, events: list[Event]) -> None:
        """Loop: a thread handed reading back, with what it read that the loop must handle."""
        conn = self._conn
        with conn._section:
            if self.turns.state is _turns.Turn.CLOSED:
                return
            self.turns.resumed()
            if conn.is_open:
                self._transport.resume_reading()
        if events:
            conn._dispatch_handed_back(events)

    def lost(self) -> None:
        """Loop, the connection gone (holding the guard): nobody reads any more; the socket
        closes now, or when the holder of the turn lets go."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        actions = self.turns.close()
        sock = self._sock
        if actions & CLOSE_SOCKET:
            self._close_socket()
        elif sock is not None:
            try:  # a thread reads it: end its poll now (it closes the descriptor when it leaves)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        side = self.side
        if side is not None:
            side.lost()

    def _close_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                self._poll.unregister(sock.fileno())
            except (KeyError, ValueError, OSError):
                pass
            sock.close()

    @property
    def socket_closed(self) -> bool:
        return self._sock is None

    def head_kind(self, entry: Entry | None, mine: object) -> Head:
        """What ``entry`` (the FIFO's head) is, for a thread letting go of the turn: a reply
        only the loop may complete, or one completed already (timed out) or nobody waits for,
        is the loop's to read."""
        if entry is None:
            return Head.NONE
        waiter: Any = entry[0]
        if waiter is mine:
            return Head.MINE
        if not entry[3] or waiter.done() or not waiter.watched():
            return Head.UNWATCHED
        return Head.WAITED
