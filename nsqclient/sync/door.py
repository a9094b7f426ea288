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

if TYPE_CHECKING:
    from ..aio.connection import Connection

__all__ = ["ThreadWrites"]

_CONNECTED = ConnectionState.CONNECTED
_INF = float("inf")


# (tickets not sent: handed back to the loop's path, in order)
Spill = Callable[[list[Any]], None]


class ThreadWrites:
    """The thread door of one plain-TCP Writer connection. Made on the loop thread.

    Tickets are the sync facade's (:class:`nsqclient.sync.publish.PublishTicket`): ``data``,
    ``count``, ``deadline``, ``claim()``, and the connection's ReplyWaiter methods.
    """

    def __init__(
        self, conn: Connection, spill: Spill, settle: Callable[[int, BaseException | None], None]
    ) -> None:
        self._conn = conn
        self._spill = spill
        self._settle_writer = settle
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
        """Tickets written from threads and not yet settled (approximate from a thread)."""
        return self.sent - self.done

    @property
    def queued(self) -> int:
        return len(self._queue)

    def submit(self, ticket: Any) -> None:
        """Queue ``ticket`` and write it (with whatever else is queued) if no one else is."""
        self._queue.append(ticket)
        self.write_queued()

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

    def _write_locked(self) -> None:
        conn = self._conn
        queue = self._queue
        transport = self._transport
        sock = self._sock
        if (
            sock is None
            or conn.state is not _CONNECTED
            or conn._write_paused_at is not None
            or transport.is_closing()
        ):
            spilled = []
            while queue:
                spilled.append(queue.popleft())
            self._spill(spilled)  # never written: the loop's path sends or fails them
            return
        pending = conn._pending
        now = time.monotonic()
        if not pending:
            conn._waiting_since = now
        settle = self._settle
        datas = []
        earliest = conn._next_deadline
        timed = _INF  # the earliest deadline no publishing thread waits for
        while queue:
            ticket = queue.popleft()
            if not ticket.claim():  # withdrawn (timed out, interrupted, cancelled) meanwhile
                self.withdrawn += 1
                continue
            ticket._on_sent_done = settle
            deadline = ticket.deadline
            if deadline < earliest:
                earliest = deadline
            pending.append((ticket, deadline, ticket.data))
            if ticket.future is not None and deadline < timed:
                timed = deadline
            datas.append(ticket.data)
        if not datas:
            return
        self.sent += len(datas)
        conn._next_deadline = earliest
        if timed < conn._wake_at:  # a pub_nowait: no thread watches its deadline, the loop must
            self._loop.call_soon_threadsafe(conn._arm_by, timed)
        data = datas[0] if len(datas) == 1 else b"".join(datas)
        if conn._flush_scheduled or conn._wbuf or conn._wrest is not None or (
            transport.get_write_buffer_size()
        ):
            # the loop has bytes to write first: these go in its flush, behind them
            conn._wbuf.append(data)
            if not conn._flush_scheduled:
                conn._flush_scheduled = True
                self._loop.call_soon_threadsafe(conn._flush)
            return
        try:
            n = sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            # broken: the loop's read sees it too; until then what is pending may or may not
            # have reached nsqd (it fails as such when the loop drops the connection)
            error = ConnectionClosedError(f"write failed: {exc}", address=conn.address)
            self._loop.call_soon_threadsafe(conn.abort, error)
            return
        if n < len(data):  # the socket's buffer is full: the loop writes the rest, first
            conn._wbuf.append(data[n:])
            conn._flush_scheduled = True
            self._loop.call_soon_threadsafe(conn._flush)

    def overdue(self) -> None:
        """A thread's sent publish got no reply by its deadline: let the loop look (thread-safe)."""
        try:
            self._loop.call_soon_threadsafe(self._conn._check)
        except RuntimeError:  # the loop is closed: nothing left to look at
            pass

    # -- the loop --

    def _settle(self, count: int, error: BaseException | None) -> None:
        self.done += 1
        self._settle_writer(count, error)

    def close(self) -> None:
        """The connection is gone (loop thread, under the lock): no thread writes any more."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

