"""The read baton: the replies to publishing threads read by those threads, not the loop.

Reading, too, passes to the threads while they publish (so a publish costs the one wake-up
its reply causes in the kernel, as a bare socket's ``recv`` does, and the loop thread is not a
second GIL contender per reply). When the loop completes a blocking publish a thread wrote, it
pauses its own reading at the end of that read and hands reading to the threads. A waiting
thread then takes the read baton (a lock, tried without blocking), polls the socket and reads;
each OK that answers a ticket of this door completes it right there, a heartbeat is answered
with a NOP written through the door; anything else (an error frame, a reply for the loop's
own requests, the end of the stream, a damaged frame) goes back to the loop with the rest of
that read, and the loop reads again. The thread whose ticket is done passes the baton to the
thread owning the next pending ticket. The loop takes reading back when it sends a command of
its own, and when no thread has read for ``_IDLE`` seconds (so heartbeats are always
answered).

This is the reading half of :class:`~.door.ThreadWrites` (a mixin: the door's state is one
object, its writing half is in :mod:`.door`).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from ..aio.connection import ConnectionState
from ..errors import ProtocolError
from ..protocol.frames import HEARTBEAT, OK, OK_FRAME
from .door_batch import DoorBatch
from .wakes import Waker, wake_each

if TYPE_CHECKING:
    import asyncio
    import collections

    from ..aio.connection import Connection

__all__ = ["ReadBaton"]

_CONNECTED = ConnectionState.CONNECTED
_monotonic = time.monotonic
_INF = float("inf")
_DONE = 2  # PublishTicket's state (sync.publish)
_ONE_OK: list[Any] = [OK]
#: seconds without a thread reading after which the loop reads again (well under nsqd's
#: heartbeat interval: a heartbeat is answered within this)
_IDLE = 0.25
#: after the loop's own command, seconds before reading passes to the threads again
_LOOP_HOLD = 1.0
#: the pending replies the loop looks through for one of its own before ending its hold early
_SCAN = 64
_SLICE = 0.1  # the longest single poll (a waiting thread looks at its deadline in between)
_READ_SIZE = 64 * 1024
_POLL_IN = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP


class ReadBaton:
    """Reading by publishing threads, for :class:`~.door.ThreadWrites` (which sets up the
    attributes declared here and calls :meth:`_init_baton`)."""

    _conn: Connection
    _sock: socket.socket | None
    _loop: asyncio.AbstractEventLoop
    _transport: asyncio.Transport
    _writer: Any
    _queue: collections.deque[Any]
    lock: threading.RLock
    _on_way: int

    def write_queued(self) -> None:
        raise NotImplementedError

    def _write_nop_locked(self) -> None:
        raise NotImplementedError

    def _close_socket(self) -> None:
        raise NotImplementedError

    def _init_baton(self, sock: socket.socket) -> None:
        #: threads read the socket (the transport's reading is paused); changed under read_lock
        self.reading = False
        self.read_lock = threading.Lock()  # the read baton
        self._poll = select.poll()
        self._poll.register(sock.fileno(), _POLL_IN)
        self._rbuf = bytearray(_READ_SIZE)
        self._rview = memoryview(self._rbuf)
        self._switch = False  # loop: pass reading to the threads at the end of this read
        self._want_loop = False  # the loop asked for reading back while a thread held it
        self._loop_until = 0.0  # loop: no passing to threads before this (its own traffic)
        self._last_read = 0.0  # when a thread last read
        self._idle: Any = None  # the loop's idle timer while threads read
        self._closing = False  # the connection closed: the last to hold the baton closes the socket
        self.ok = 0  # messages acknowledged to tickets the threads completed
        self.done_threads = 0  # tickets the threads completed (under read_lock)
        #: futures (pub_nowait) a thread's read answered, resolved once it let go of the baton
        self._later: list[Any] = []

    def read_for(self, ticket: Any, remaining: float) -> bool:
        """Read replies in the calling thread until ``ticket`` is done (at most one slice of
        ``remaining``); False if another thread holds the baton or the loop reads."""
        lock = self.read_lock
        if not lock.acquire(blocking=False):
            return False
        try:
            if not self.reading:
                return False
            poll = self._poll.poll
            wait = remaining if remaining < _SLICE else _SLICE
            end = 0.0
            nowait = ticket.future is not None  # (a PublishFuture's result(): see wait_answer)
            while True:
                if self._want_loop:
                    self._hand_back([])
                    break
                if not poll(wait * 1000.0 + 1.0):
                    break  # the slice passed: the caller looks at its deadline
                self._read_once(ticket)
                if ticket.state == _DONE or not self.reading:
                    break
                if nowait and ticket in self._later:  # answered: resolved once we let go
                    break
                # a read for other threads' tickets: poll again for what is left of the slice
                if not end:
                    end = _monotonic() + wait
                wait = end - _monotonic()
                if wait <= 0:
                    break
        finally:
            later = self._later
            if later:
                self._later = []
            lock.release()
            if self._closing:  # the connection closed while this thread read
                self._close_after()
        self._pass_baton(ticket)
        if later:
            if nowait and ticket in later:  # resolved here: no wake-up byte for this thread
                ticket._waker = None
            self._resolve(later)
        return True

    def round_trip(self, ticket: Any) -> bool:
        """Read the reply to the calling thread's own blocking publish at once, if the baton is
        free: one poll (a slice), one read and, when that read is the lone OK for ``ticket``,
        its settlement here; True if nsqd acknowledged ``ticket``. Anything else read is taken as
        :meth:`read_for` takes it, and False tells the caller to wait as usual (which raises the
        ticket's error if it failed meanwhile).

        Why apart from :meth:`read_for`: this is what a script publishing in a loop pays per
        publish, and read_for's layers (its loop, the general match) cost it about 2 of its
        12 µs of Python per publish (measured 2026-12-03, in one process against a bare socket).
        """
        if not self.reading:
            return False
        baton = self.read_lock
        if not baton.acquire(blocking=False):
            return False
        conn = self._conn
        try:
            if self._want_loop or not self.reading:
                if self.reading:  # the loop asked for reading back
                    self._hand_back([])
                return False
            remaining = ticket.deadline - _monotonic()
            wait = remaining if remaining < _SLICE else _SLICE
            if wait <= 0 or not self._poll.poll(wait * 1000.0 + 1.0):
                return False
            n = self._recv()
            if not n:
                return False
            mine = False
            own_future = ticket.future is not None  # (PublishFuture.result(): wait_answer)
            if n == 10 and self._rbuf.startswith(OK_FRAME) and not conn._decoder.buffered:
                now = _monotonic()
                self._last_read = conn._last_read = now
                with self.lock:
                    pending = conn._pending
                    mine = ticket.state != _DONE and bool(pending) and pending[0][0] is ticket
                    if mine:
                        pending.popleft()
                        conn._waiting_since = now
                        ticket._on_sent_done = None  # settled here, not by the loop
                        self.ok += ticket.count
                        self.done_threads += 1
                        if not own_future:  # (a future is resolved once the baton is let go)
                            ticket.error = None
                            ticket.state = _DONE
            if not mine:  # anything else: the reply of another, or of the loop's command
                self._take(n, ticket)
            else:
                if self._queue:
                    self.write_queued()  # queued while this thread held the lock
                writer = self._writer
                if writer._idle_waiters or writer._slot_waiters:
                    self._loop.call_soon_threadsafe(writer._after_release)
        finally:
            later = self._later
            if later:
                self._later = []
            baton.release()
            if self._closing:  # the connection closed while this thread read
                self._close_after()
        if conn._pending:
            self._pass_baton(ticket)
        if mine and own_future:
            ticket._waker = None  # resolved here: no wake-up byte for this thread
            ticket.complete(None)
        if later:
            self._resolve(later)
        # an error (a refusal, a cut) is the caller's to raise, as the general wait raises it
        acknowledged: bool = ticket.state == _DONE and ticket.error is None
        return acknowledged

    def _read_once(self, me: Any) -> None:
        """One read by the baton holder: complete what answers this door's tickets."""
        n = self._recv()
        if n:
            self._take(n, me)

    def _recv(self) -> int:
        """Read into the read buffer (holding the baton): the bytes read, or 0 when none came
        or reading went back to the loop (the socket closed, broke, or reached its end)."""
        sock = self._sock
        if sock is None:
            self._hand_back([])
            return 0
        try:
            n = sock.recv_into(self._rview)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            self._hand_back([])  # the loop meets the same error and drops the connection
            return 0
        if not n:
            self._hand_back([])  # the end of the stream: the loop reads it again
        return n

    def _take(self, n: int, me: Any) -> None:
        """Complete what the ``n`` bytes just read answer among this door's tickets."""
        conn = self._conn
        now = _monotonic()
        self._last_read = now
        decoder = conn._decoder
        if n == 10 and self._rbuf.startswith(OK_FRAME) and not decoder.buffered:
            events = _ONE_OK  # one OK alone: no decoding
        else:
            try:
                events = decoder.feed(self._rview[:n].tobytes())
            except ProtocolError as exc:
                self.reading = False
                self._loop.call_soon_threadsafe(self._damaged, exc)
                return
            if not events:
                return
        conn._last_read = now
        with self.lock:
            done = self._match_locked(events, conn._pending, now)
        if self._queue:
            self.write_queued()  # queued while this thread held the lock
        if done:
            blocked: list[Waker] = []  # the threads to wake, woken together below
            for ticket in done:
                if ticket.__class__ is DoorBatch:  # coalescing: each of its tickets
                    ticket.complete_ok(me, self._later, blocked)
                elif ticket.future is not None:  # its callbacks may publish and block:
                    self._later.append(ticket)  # run them off the baton (even if it is me)
                elif ticket.state != _DONE:  # a blocking publish (PublishTicket.complete)
                    ticket.error = None
                    ticket.state = _DONE
                    if ticket is not me:
                        blocked.append(ticket._waker)
            if blocked:
                wake_each(blocked)
        writer = self._writer
        # a graceful close or a waiting publish; if futures wait in _later, once they resolved
        if (writer._idle_waiters or writer._slot_waiters) and not self._later:
            self._loop.call_soon_threadsafe(writer._after_release)

    def _resolve(self, tickets: list[Any]) -> None:
        """Resolve the futures of ``tickets`` (acknowledged) in the calling thread, which now
        holds no lock of the door's: a done callback that publishes and blocks reads its own
        reply (under the baton it would wait out its timeout, as no other thread may read)."""
        for ticket in tickets:
            ticket.complete(None)
        writer = self._writer
        if writer._idle_waiters or writer._slot_waiters:
            try:
                self._loop.call_soon_threadsafe(writer._after_release)
            except RuntimeError:  # the loop is closed
                pass

    def _match_locked(self, events: list[Any], pending: Any, now: float) -> list[Any]:
        """The tickets of this door that ``events`` answer, taken off the FIFO (holding
        :attr:`lock`); a heartbeat is answered; the rest of the read from the first event
        that is not ours goes back to the loop."""
        conn = self._conn
        done: list[Any] = []
        ok = width = 0
        for i, event in enumerate(events):
            if event is OK and pending:
                head: Any = pending[0][0]
                if getattr(head, "_door", None) is self:
                    pending.popleft()
                    conn._waiting_since = now
                    if head.state == _DONE:  # the loop failed it already (no reply in time):
                        continue  # settled then; the late reply only takes its place here
                    head._on_sent_done = None  # settled here, not by the loop
                    ok += head.count
                    width += head.width
                    done.append(head)
                    if head.__class__ is DoorBatch:  # coalescing: what waits may go now
                        self._on_way -= 1
                    continue
            elif event is HEARTBEAT:
                conn.heartbeats_received += 1
                self._write_nop_locked()
                continue
            self._hand_back(events[i:])
            break
        self.ok += ok
        self.done_threads += width
        return done

    def _hand_back(self, events: list[Any]) -> None:
        """Reading goes back to the loop (holding the baton), with what was read for it."""
        self.reading = False
        self._want_loop = False
        try:
            self._loop.call_soon_threadsafe(self._resume, events)
        except RuntimeError:  # the loop is closed
            pass

    def _pass_baton(self, me: Any) -> None:
        """The next pending reply's thread reads next (if threads still read)."""
        if not self.reading:
            return
        pending = self._conn._pending
        if not pending:
            return
        head: Any = pending[0][0]
        if head is me or getattr(head, "_door", None) is not self or head.state == _DONE:
            return
        waker = head._waker
        if waker is None and head.__class__ is DoorBatch:  # one of its nowait's result()?
            waker = next((t._waker for t in head.tickets if t._waker is not None), None)
        if waker is not None:
            waker.wake()
        elif self.read_lock.acquire(blocking=False):  # no one waits for it: the loop reads
            try:
                if self.reading:
                    self._hand_back([])
            finally:
                self.read_lock.release()
            if self._closing:
                self._close_after()

    def _close_after(self) -> None:
        """The connection closed (:attr:`_closing`) while this thread held the baton, which it
        has let go: whoever holds the baton last closes the socket (the door's :meth:`close`,
        or a holder after it lets go), so that it is never closed under a reading thread and
        never left open. Why after letting go, and again under the baton: a close that comes
        between a holder's last look at the flag and its release would leave it to no one."""
        if self.read_lock.acquire(blocking=False):  # else its holder does this when it lets go
            try:
                self.reading = False
                self._close_socket()
            finally:
                self.read_lock.release()

    def left(self, ticket: Any) -> None:
        """A thread stopped waiting for ``ticket`` unanswered (its ``result()`` timed out): if
        its reply is next, the baton would pass to no one, so reading goes back to the loop."""
        pending = self._conn._pending
        if not self.reading or not pending or pending[0][0] is not ticket:
            return
        if self.read_lock.acquire(blocking=False):  # else its holder passes it on
            try:
                if self.reading:
                    self._hand_back([])
            finally:
                self.read_lock.release()
            if self._closing:
                self._close_after()

    def after_read(self) -> None:
        """The end of one of the loop's reads (Connection.buffer_updated)."""
        self._switch = False
        conn = self._conn
        if self.reading or conn.state is not _CONNECTED or self._sock is None:
            return
        if self._loop_until and self._loop_waits(conn._pending):
            return
        self._transport.pause_reading()
        self.reading = True
        self._last_read = time.monotonic()
        if self._idle is None:
            self._idle = self._loop.call_later(_IDLE, self._idle_check)

    def _loop_waits(self, pending: collections.deque[Any]) -> bool:
        """Loop: whether the hold after its own command still stands: its time not passed and
        a reply not a thread's still pending (the loop reads that one). Why not the time alone:
        a script's first publish, sent by the loop while the door opened, held reading on the
        loop for a whole second, every publish of it at the loop path's cost (two wake-ups)."""
        until = self._loop_until
        if self._loop.time() >= until:
            self._loop_until = 0.0
            return False
        if until == _INF:  # a thread's write failed: threads read no more here
            return True
        for i, entry in enumerate(pending):
            if i == _SCAN or getattr(entry[0], "_door", None) is not self:
                return True  # the loop's own reply (or too far to look): the hold stands
        self._loop_until = 0.0
        return False

    def _idle_check(self) -> None:
        self._idle = None
        if not self.reading:
            return
        if time.monotonic() - self._last_read >= _IDLE and self._reclaim():
            return
        self._idle = self._loop.call_later(_IDLE, self._idle_check)

    def _reclaim(self) -> bool:
        """Loop: take reading back if no thread holds the baton; False if one does."""
        if not self.read_lock.acquire(blocking=False):
            return False
        try:
            if self.reading:
                self.reading = False
                self._resume([])
        finally:
            self.read_lock.release()
        return True

    def take_back(self) -> None:
        """The loop sent a command of its own: it reads its reply (and keeps reading a while)."""
        self._loop_until = self._loop.time() + _LOOP_HOLD
        if not self.reading:
            return
        if not self._reclaim():
            self._want_loop = True  # the baton holder hands back after its read

    def _resume(self, events: list[Any]) -> None:
        """Reading is the loop's again: first what a thread read for it, then the socket."""
        conn = self._conn
        if conn.state is ConnectionState.CLOSED:
            return
        if events:
            self._loop_until = self._loop.time() + _LOOP_HOLD
            conn._dispatch(events)
        if not self.reading and not _closed(conn):  # (the dispatch may have closed it)
            self._transport.resume_reading()

    def _damaged(self, error: ProtocolError) -> None:
        self._conn.abort(error)


def _closed(conn: Connection) -> bool:
    return conn.state is ConnectionState.CLOSED
