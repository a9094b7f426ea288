"""A core Writer connection's door for publishing threads: encoded publishes written from the
calling thread straight to the socket, while the loop keeps reading the replies.

Why: a blocking ``SyncWriter.pub`` that crosses to the loop thread to be written costs two
cross-thread wake-ups per publish (the loop woken to write, the thread woken by the reply), and
in a VM each wake-up is a few microseconds of kernel time plus a turn of the GIL. Written by the
calling thread, a publish costs one wake-up, the one its reply causes, as a bare socket's
``recv`` would.

How it stays one connection. The connection's commands must reach nsqd in the order of its
pending-reply FIFO, whoever writes them. So every write to a shared connection happens under
:attr:`ThreadWrites.lock`: the loop's (its ``request``/``request_to``/``_flush`` and whatever
changes the FIFO) and the threads'. Threads never block on that lock (group commit): a thread
queues its ticket and tries the lock; whoever holds it writes everything queued in one
``send``, appending each ticket to the FIFO in that order, and looks again after releasing
(so a ticket queued meanwhile is never stranded); the loop does the same when it releases. The
loop alone reads, matches each reply to its ticket and completes it: the aio state stays on
the loop thread. A thread writes only when the loop has nothing unwritten (its buffer, the
transport's, no pause); otherwise the bytes join the loop's next flush, in order. A connection
that is not plain TCP (TLS, snappy, deflate) gets no door: its bytes pass through objects the
loop owns.

Admission is exact: a thread takes one of the Writer's ``max_pending_publishes`` slots under
:attr:`ThreadWrites.admit_lock`, which the loop's own admission takes too, so threads racing for
the last slot cannot overshoot it (a publish that finds no slot waits in the bounded queue).

A thread's write that fails (nsqd closed the connection) does not drop the connection at once:
the loop reads what nsqd sent before the end first, so a refused publish gets its own error
frame instead of a reset's ConnectionClosedError.

Reading, too, passes to the threads while they publish: see :mod:`.baton`. With
``coalesce=True`` the group commit joins each topic's PUBs into MPUBs: see :mod:`.door_batch`.

A thread gives up on its own clock (the ticket's deadline); a publish sent and unanswered by
then asks the loop to run the connection's liveness check, which fails what is overdue and
declares a stuck connection dead, so no timer per publish is needed on either side.
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..aio.connection import ConnectionState
from ..errors import ConnectionClosedError
from ..protocol import commands
from .baton import _IDLE, ReadBaton, _closed
from .door_batch import group

if TYPE_CHECKING:
    from ..aio.connection import Connection

__all__ = ["ThreadWrites"]

_CONNECTED = ConnectionState.CONNECTED
_INF = float("inf")
_monotonic = time.monotonic
_SENT = 1  # PublishTicket's state (sync.publish)
_NOP = commands.nop()
#: coalescing: writes of a door on their way before the next publishes wait to be joined.
#: One: 16 threads sent MPUBs of 7 on average at the plain door's rate; 2 ran 10% slower and
#: no limit (joining only what queued while the lock was held) 25% slower (2026-12-03)
_ON_WAY = 1


# (tickets not sent: handed back to the loop's path, in order)
Spill = Callable[[list[Any]], None]


class ThreadWrites(ReadBaton):
    """The thread door of one plain-TCP Writer connection. Made on the loop thread.

    Tickets are the sync facade's (:class:`nsqclient.sync.publish.PublishTicket`): ``data``,
    ``count``, ``deadline``, ``claim()``, and the connection's ReplyWaiter methods.
    """

    def __init__(self, conn: Connection, spill: Spill, writer: Any) -> None:
        self._conn = conn
        self._spill = spill
        self._writer = writer
        self._settle_writer = writer._door_done
        transport = conn._transport
        assert transport is not None and conn._loop is not None
        self._transport = transport
        self._loop = conn._loop
        #: a duplicate of the socket's descriptor, so that a thread's send can never reach a
        #: descriptor number the loop has closed and the system has given to another file;
        #: closed with the connection (see :meth:`close`)
        self._sock: socket.socket | None = socket.socket(
            fileno=os.dup(transport.get_extra_info("socket").fileno())
        )
        self.lock = threading.RLock()
        self._queue: collections.deque[Any] = collections.deque()
        self._depth = 0  # the loop's nesting of locked sections (loop thread only)
        self.sent = 0  # tickets written by threads (under the lock)
        self.done = 0  # of those, settled (loop thread only)
        self.withdrawn = 0  # queued, then withdrawn by their thread before a holder wrote them
        self._failing = False  # a thread's write failed: no more thread writes; the loop reads
        #: admission (see :meth:`admit`): slots taken by threads, and given back unwritten
        self.admit_lock = threading.Lock()
        self.admitted = 0  # under admit_lock
        self.returned = 0  # under lock (withdrawn before being written, or spilled)
        #: coalescing (``coalesce=True``, see :mod:`.door_batch`): the write on its way (a
        #: DoorBatch) while later publishes wait to be joined, and the counts of what joined
        self._coalescing = writer._coalesce is not None
        self._on_way = 0  # coalescing writes unanswered (under lock)
        self.batches = self.messages = self.split = 0
        if self._coalescing:
            self.publish_own = self._publish_grouped  # type: ignore[method-assign]
        self._init_baton(self._sock)

    # -- the loop's locked sections: ``with door:`` --

    def __enter__(self) -> None:
        self.lock.acquire()
        self._depth += 1

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        self.lock.release()
        if not self._depth and self._queue:  # a thread queued while the loop held the lock
            self.write_queued()

    # -- threads --

    @property
    def outstanding(self) -> int:
        """Tickets admitted here and not yet settled (or handed back unwritten); exact under
        :attr:`admit_lock`, where threads admit theirs (:meth:`admit`)."""
        return self.admitted - self.returned - self.done - self.done_threads

    def admit(self) -> bool:
        """Take one of the Writer's ``max_pending_publishes`` slots for a thread's publish
        (any thread); False when none is free (the publish then waits in the bounded queue).
        Exact: the count and the check are made under :attr:`admit_lock`, as the loop's own
        admission is (``Writer._publish_to``), so racing threads cannot overshoot.
        (:meth:`publish_own` holds a copy, kept equal by tests/sync/test_inlined_copies.py.)"""
        writer = self._writer
        with self.admit_lock:
            if len(writer._doors) == 1:
                outstanding = (
                    writer._outstanding
                    + self.admitted
                    - self.returned
                    - self.done
                    - self.done_threads
                )
            else:  # several nsqd: each door's lock orders its own threads only
                outstanding = writer.outstanding
            if outstanding >= writer._max_pending:
                return False
            self.admitted += 1
        return True

    @property
    def queued(self) -> int:
        return len(self._queue)

    def submit(self, ticket: Any) -> None:
        """Queue ``ticket`` and write it (with whatever else is queued) if no one else is."""
        self._queue.append(ticket)
        self.write_queued()

    def publish_own(self, ticket: Any) -> bool:
        """A calling thread's publish, in one call: a ``max_pending_publishes`` slot (as
        :meth:`admit` takes it; False when none is free, nothing done: the publish then waits
        in the bounded queue), and the write: at once when nothing is queued and the lock is
        free (no one else can have withdrawn it, so no claim), else queued like any other.
        For a blocking publish, or a ``pub_nowait`` whose future no one has yet (set running
        here). One call, not :meth:`admit` then a submit, because this is every thread
        publish's path: from 16 threads over two CPUs the rate goes by the Python each publish
        runs holding the GIL (see "The blocking face" in BENCHMARKS.md).
        """
        writer = self._writer
        with self.admit_lock:
            if len(writer._doors) == 1:
                outstanding = (
                    writer._outstanding
                    + self.admitted
                    - self.returned
                    - self.done
                    - self.done_threads
                )
            else:  # several nsqd: each door's lock orders its own threads only
                outstanding = writer.outstanding
            if outstanding >= writer._max_pending:
                return False
            self.admitted += 1
        ticket._door = self
        future = ticket.future
        if future is not None:  # no one has the future yet: running from here (no claim)
            future.run_fresh()
            ticket._running = True
        queue = self._queue
        lock = self.lock
        if queue or not lock.acquire(blocking=False):
            queue.append(ticket)
            self.write_queued()
            return True
        try:
            conn = self._conn
            sock = self._writable_locked()
            if sock is None:
                self._spill_tickets([ticket])  # never written: the loop's path sends or fails it
                return True
            ticket.state = _SENT
            pending = conn._pending
            if not pending:
                conn._waiting_since = _monotonic()
            deadline = ticket.deadline
            if deadline < conn._next_deadline:
                conn._next_deadline = deadline
            if future is None:
                ticket._on_sent_done = self._settle_blocking
            else:
                ticket._on_sent_done = self._settle
                if deadline < conn._wake_at:  # no thread watches its deadline: the loop must
                    self._loop.call_soon_threadsafe(conn._arm_by, deadline)
            data = ticket.data
            pending.append((ticket, deadline, data))
            self.sent += 1
            failed = self._send_locked(sock, data)
            if failed is not None:
                self._broken(failed)
        finally:
            lock.release()
        if queue:  # queued while this thread held the lock
            self.write_queued()
        return True

    def _publish_grouped(self, ticket: Any) -> bool:
        """:meth:`publish_own` when coalescing: every write groups (see :mod:`.door_batch`),
        and a ``pub_nowait`` future stays cancellable while the write on its way holds it."""
        if not self.admit():
            return False
        ticket._door = self
        self.submit(ticket)
        return True

    def _writable_locked(self) -> socket.socket | None:
        """The socket threads may write to now (holding :attr:`lock`), or None: closed, a write
        failed, not connected, writes paused, or the transport closing."""
        sock = self._sock
        conn = self._conn
        if (
            sock is None
            or self._failing
            or conn.state is not _CONNECTED
            or conn._write_paused_at is not None
            or self._transport.is_closing()
        ):
            return None
        return sock

    def _spill_queued(self) -> None:
        queue = self._queue
        spilled = []
        while queue:
            spilled.append(queue.popleft())
        self._spill_tickets(spilled)

    def _spill_tickets(self, tickets: list[Any]) -> None:
        """Hand admitted, unwritten tickets to the loop's path (holding :attr:`lock`): their
        slots here are given back, the Writer admits them again there."""
        self.returned += len(tickets)
        self._spill(tickets)

    def _broken(self, failed: OSError) -> None:
        """A thread's write failed (holding :attr:`lock`): the loop reads what nsqd sent
        before the end, then drops the connection (see :meth:`_write_failed`)."""
        if self._failing:
            return
        self._failing = True
        conn = self._conn
        error = ConnectionClosedError(f"write failed: {failed}", address=conn.address)
        try:
            self._loop.call_soon_threadsafe(self._write_failed, error)
        except RuntimeError:  # the loop is closed
            pass

    def _write_failed(self, error: ConnectionClosedError) -> None:
        """Loop: a thread's write met a broken socket. nsqd may have said why before it closed
        (an error frame after a refused publish, still unread), so the loop reads first: what
        is pending then fails with that error, or as maybe-sent when the stream ends; if the
        end is not seen within ``_IDLE``, the connection is dropped with ``error``."""
        conn = self._conn
        if _closed(conn):
            return
        self.take_back()
        self._loop_until = _INF  # threads read no more on this connection
        self._loop.call_later(_IDLE, self._drop_if_open, error)

    def _drop_if_open(self, error: ConnectionClosedError) -> None:
        if not _closed(self._conn):
            self._conn.abort(error)

    def write_queued(self) -> None:
        queue = self._queue
        lock = self.lock
        while queue:
            if not lock.acquire(blocking=False):
                return  # the holder writes ours, or looks again after releasing
            try:
                self._write_locked()
            finally:
                lock.release()
            if self._on_way >= _ON_WAY:
                return  # coalescing: whoever completes the write on its way writes the rest

    def _write_locked(self) -> None:
        conn = self._conn
        queue = self._queue
        sock = self._writable_locked()
        if sock is None:
            self._spill_queued()  # never written: the loop's path sends or fails them
            return
        pending = conn._pending
        now = time.monotonic()
        if not pending:
            conn._waiting_since = now
        if self._coalescing:
            if self._on_way < _ON_WAY:
                self._write_grouped_locked(sock)
            return
        settle, settle_blocking = self._settle, self._settle_blocking
        datas: list[bytes] = []
        earliest = conn._next_deadline
        timed = _INF  # the earliest deadline no publishing thread waits for
        while queue:
            ticket = queue.popleft()
            if not ticket.claim():  # withdrawn (timed out, interrupted, cancelled) meanwhile
                self.withdrawn += 1
                self.returned += 1
                continue
            ticket._on_sent_done = settle if ticket.future is not None else settle_blocking
            deadline = ticket.deadline
            if deadline < earliest:
                earliest = deadline
            pending.append((ticket, deadline, ticket.data))
            if ticket.future is not None and deadline < timed:
                timed = deadline
            datas.append(ticket.data)
        self.sent += len(datas)
        self._send_all_locked(sock, datas, earliest, timed)

    def _send_all_locked(
        self, sock: socket.socket, datas: list[bytes], earliest: float, timed: float
    ) -> None:
        """Write the commands just put on the FIFO (holding :attr:`lock`), in one ``send``."""
        if not datas:
            return
        conn = self._conn
        conn._next_deadline = earliest
        if timed < conn._wake_at:  # a pub_nowait: no thread watches its deadline, the loop must
            self._loop.call_soon_threadsafe(conn._arm_by, timed)
        failed = self._send_locked(sock, datas[0] if len(datas) == 1 else b"".join(datas))
        if failed is not None:
            self._broken(failed)

    def _write_grouped_locked(self, sock: socket.socket) -> None:
        """:meth:`_write_locked` when coalescing: everything queued, each topic's PUBs as one
        MPUB (:func:`.door_batch.group`); the last write is held on its way until answered."""
        queue = self._queue
        claimed = []
        while queue:
            ticket = queue.popleft()
            if ticket.claim():
                claimed.append(ticket)
            else:  # withdrawn (timed out, interrupted, cancelled) meanwhile
                self.withdrawn += 1
                self.returned += 1
        if not claimed:
            return
        co = self._writer._coalesce
        writes = group(self, claimed, co._half, co.max_body_size)
        conn = self._conn
        pending = conn._pending
        earliest = conn._next_deadline
        timed = _INF
        for write in writes:
            deadline = write.deadline
            if deadline < earliest:
                earliest = deadline
            if write._waker is None and deadline < timed:  # pub_nowait only: the loop watches
                timed = deadline
            pending.append((write, deadline, write.data))
        self._on_way += len(writes)
        self.sent += len(claimed)
        self._send_all_locked(sock, [w.data for w in writes], earliest, timed)

    def answered(self, width: int) -> None:
        """Loop: a coalescing write of ``width`` tickets was answered (or failed): they are
        settled, and the next write may go."""
        with self.lock:
            self._on_way -= 1
        self.done += width

    def after_answer(self) -> None:
        """Loop: write what waited for the write just answered (unless inside a locked section
        of the loop's, whose end writes it)."""
        if self._queue and not self._depth:
            self.write_queued()

    def _send_locked(self, sock: socket.socket, data: bytes) -> OSError | None:
        """Write ``data`` (holding :attr:`lock`): behind the loop's unwritten bytes if there
        are any (in its next flush), else straight to the socket, the loop writing whatever
        did not fit; the error if the socket is broken."""
        conn = self._conn
        if (
            conn._flush_scheduled
            or conn._wbuf
            or conn._wrest is not None
            or (self._transport.get_write_buffer_size())
        ):
            conn._wbuf.append(data)
            if not conn._flush_scheduled:
                conn._flush_scheduled = True
                self._loop.call_soon_threadsafe(conn._flush)
            return None
        try:
            n = sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            return exc
        if n < len(data):  # the socket's buffer is full: the loop writes the rest, first
            conn._wbuf.append(data[n:])
            conn._flush_scheduled = True
            self._loop.call_soon_threadsafe(conn._flush)
        return None

    def overdue(self) -> None:
        """A thread's sent publish got no reply by its deadline: let the loop look (thread-safe)."""
        try:
            self._loop.call_soon_threadsafe(self._conn._check)
        except RuntimeError:  # the loop is closed: nothing left to look at
            pass

    def _write_nop_locked(self) -> None:
        """Answer a heartbeat a thread read (holding :attr:`lock`): behind the loop's unwritten
        bytes if there are any, else straight to the socket."""
        sock = self._sock
        if sock is None or self._conn.state is not _CONNECTED:
            return
        if self._send_locked(sock, _NOP) is not None:  # broken: the loop writes it, or finds out
            self._conn._wbuf.append(_NOP)
            self._conn._flush_scheduled = True
            self._loop.call_soon_threadsafe(self._conn._flush)

    # -- the loop --

    def _settle(self, count: int, error: BaseException | None) -> None:
        self.done += 1
        self._settle_writer(count, error)

    def _settle_blocking(self, count: int, error: BaseException | None) -> None:
        """The loop completed a blocking publish a thread wrote: threads may read from now."""
        self.done += 1
        self._settle_writer(count, error)
        if error is None and not self.reading:
            self._switch = True

    def close(self) -> None:
        """The connection is gone (loop thread, under the lock): no thread writes any more,
        and none reads (the baton holder closes the socket when it lets go)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._on_way = 0
        if self._queue:  # coalescing: held back, never written; the loop's path takes them
            self._spill_queued()
        self._closing = True  # first: a holder looks at it after it lets go (.baton)
        if self.read_lock.acquire(blocking=False):
            try:
                self.reading = False
                self._close_socket()
            finally:
                self.read_lock.release()

    def _close_socket(self) -> None:
        sock, self._sock = self._sock, None
        # the 64 KiB read buffer goes with the socket (no thread reads without the socket)
        self._rbuf = bytearray()
        self._rview = memoryview(self._rbuf)
        if sock is not None:
            try:
                self._poll.unregister(sock.fileno())
            except (KeyError, ValueError, OSError):
                pass
            sock.close()
