"""Publishing threads' way onto a shared Writer connection: they write their own publishes.

Why: a blocking ``SyncWriter.pub`` that crosses to the loop thread to be written costs two
cross-thread wake-ups per publish (the loop woken to write, the thread woken by the reply), and
in a VM each wake-up is a few microseconds of kernel time plus a turn of the GIL. Written by the
calling thread, and its reply read there too when it is the thread's turn
(:mod:`.reading`), a publish costs the one wake-up its reply causes, as a bare socket's
``recv`` would.

A :class:`Door` is made for each connection the core Writer shares with the threads
(:meth:`nsqclient.aio.Writer.share_with_threads`, :mod:`nsqclient.aio.sharing`). A thread's
publish takes a ``max_pending_publishes`` slot from the Writer's window (exact: the loop's own
admission takes the same lock), then writes holding the connection's guard, so that commands
reach nsqd in the order of the reply FIFO whoever writes them. Threads never wait for the guard
to write (group commit): a thread that finds it taken queues its ticket and leaves; whoever
holds the guard writes everything queued in one ``send`` when it lets go (the loop too, after
each of its sections), and looks again, so a ticket queued meanwhile is never stranded.
The queue is a ``collections.deque``, whose appends and pops are documented thread-safe (atomic
on free-threaded CPython too); everything else here changes holding the guard.

With ``coalesce=True`` every write groups: see :mod:`.door_batch`. Whatever the door cannot take
(the connection closing, writes paused) goes the loop's way (:mod:`.publish`) with its slot
given back; a ticket whose deadline passed before its write is never written (it fails as never
sent, safe to retry).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .door_batch import Resend, group
from .ticket import QUEUED, SENT, Ticket, claim_all, passed_deadline

if TYPE_CHECKING:
    from ..aio.replies import Entry
    from ..aio.sharing import Shared
    from ..aio.window import Window

__all__ = ["Door", "Doors", "Grouping"]

_monotonic = time.monotonic
_INF = float("inf")
_READ_SIZE = 64 * 1024
#: coalescing: writes of a door on their way before the next publishes wait to be joined.
#: One: 16 threads sent MPUBs of 7 on average at the plain door's rate; 2 ran 10% slower and
#: no limit (joining only what queued while the lock was held) 25% slower (2026-12-03)
_ON_WAY = 1

#: tickets a door could not write, handed to the loop's way (the PublishQueue's put_back)
Spill = Callable[[list[Ticket]], None]


class Grouping(NamedTuple):
    """How a coalescing door joins PUBs (the loop coalescer's rule, see :mod:`.door_batch`)."""

    half: float  # deadlines within this of a batch's first one join it
    max_body_size: Callable[[], int]  # nsqd's MPUB body limit, as the Writer knows it now


class Wired:
    """``with door.wired:`` in a thread: the connection's wire, and once it is let go the
    tickets threads queued meanwhile written (they found the wire taken and left them to its
    holder: group commit). Every time a thread holds the wire ends this way (here, or as
    :meth:`Door.publish` and :meth:`Door.write_queued` end), so that no ticket is ever left
    queued with nobody to write it."""

    __slots__ = ("_door", "_wire")

    def __init__(self, door: Door) -> None:
        self._door = door
        self._wire = door.wire

    def __enter__(self) -> None:
        self._wire.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._wire.release()
        door = self._door
        if door.queue:
            door.write_queued()


class Door:
    """The thread door of one shared connection (see the module docstring). Made on the loop.

    Counters: ``sent`` tickets written by threads, and with coalescing ``batches`` (MPUBs of two
    or more) and ``messages`` (the PUBs they joined), changed holding :attr:`wire`; ``read``
    tickets whose reply a thread read and ``split`` (MPUBs nsqd refused, each PUB then sent
    again alone), changed holding :attr:`guard`, as is ``_on_way``.
    """

    def __init__(
        self,
        shared: Shared,
        window: Window,
        doors: Doors,
        grouping: Grouping | None,
    ) -> None:
        self.shared = shared
        self.wire = shared.wire
        self.guard = shared.guard
        self.wired = Wired(self)
        self.window = window
        self._doors = doors
        self.resend: Resend = doors.resend
        self.max_msg_size = doors.max_msg_size
        self._grouping = grouping
        #: tickets waiting for the wire (group commit); its appends and pops are atomic
        self.queue: collections.deque[Ticket] = collections.deque()
        self._on_way = 0  # coalescing writes unanswered (under the guard)
        self._lost = False  # the connection is gone (under the guard)
        self._lost_queue: list[Ticket] = []  # what it held then, spilled once the loop let go
        self.sent = self.read = 0
        self.batches = self.messages = self.split = 0
        #: what the thread whose turn it is reads into (only the turn's holder touches it)
        self.buffer = bytearray(_READ_SIZE)
        self.view = memoryview(self.buffer)

    # -- a publishing thread --

    def publish(self, ticket: Ticket) -> int:
        """A thread's publish: 0 when no slot is free (nothing done: it goes the loop's way);
        1 when written or queued to be; 2 when written and the calling thread now holds the
        turn to read (:mod:`.reading`: its reply is next to come or it reads for others)."""
        if not self.window.take(ticket):
            return 0
        ticket.door = self
        queue = self.queue
        wire = self.wire
        if self._grouping is not None or queue or not wire.acquire(False):
            queue.append(ticket)
            self.write_queued()
            return 1
        took = 0
        ended = False
        try:
            now = _monotonic()
            deadline = ticket.deadline
            if self._lost:
                took = -1
            elif deadline <= now:
                ended = True  # a passed deadline is never written
            else:
                # nobody else has the ticket yet (it is on no queue or FIFO): its own thread
                # sets it SENT, and its future running, without the window lock, before the
                # write makes it visible (a reader may end it at once). If the connection
                # cannot take it after all, it goes the loop's way queued again (its future
                # stays running: no longer cancellable, as one being sent)
                future = ticket.future
                if future is not None:
                    future.run_fresh()
                ticket.state = SENT
                # a blocking publish takes the turn to read its reply next, if it is free
                took = self.shared.write_wired(
                    [(ticket, deadline, ticket.data, True)],
                    ticket.data,
                    now,
                    _INF if future is None else deadline,
                    future is None,
                )
                if took < 0:
                    ticket.state = QUEUED
                else:
                    self.sent += 1
        finally:
            wire.release()
        spilled = took < 0
        if spilled:
            self._spill([ticket])
        elif ended and ticket.settle(passed_deadline()):
            ticket.notify()
        if queue:
            self.write_queued()
        return 2 if took > 0 else 1

    def write_queued(self) -> None:
        """Write what threads queued (group commit), unless another holds the guard: it
        writes ours when it lets go (any thread)."""
        queue = self.queue
        wire = self.wire
        while queue:
            if not wire.acquire(False):
                return
            ended: list[Ticket] = []
            spill: list[Ticket] = []
            try:
                self._write_wired(ended, spill)
            finally:
                wire.release()
            for ticket in ended:
                ticket.notify()
            if spill:
                self._spill(spill)
            if self._grouping is not None and self._on_way >= _ON_WAY:
                return  # coalescing: whoever completes the write on its way writes the rest

    def _write_wired(self, ended: list[Ticket], spill: list[Ticket]) -> None:
        queue = self.queue
        shared = self.shared
        if self._lost or not shared.writable_wired():
            while queue:
                spill.append(queue.popleft())
            return
        grouping = self._grouping
        if grouping is not None:
            with self.guard:
                if self._on_way >= _ON_WAY:
                    return  # written once the write on its way is answered
        tickets = []
        while queue:
            tickets.append(queue.popleft())
        now = _monotonic()
        claimed = claim_all(tickets, now, ended)
        if not claimed:
            return
        writes: list[Any]
        if grouping is None:
            writes = claimed
        else:
            writes = group(self, claimed, grouping.half, grouping.max_body_size())
            with self.guard:
                self._on_way += len(writes)
        unwatched = _INF  # the earliest deadline no waiting thread looks at (pub_nowait's)
        entries: list[Entry] = []
        for write in writes:
            deadline = write.deadline
            if deadline < unwatched and not write.watched():
                unwatched = deadline
            entries.append((write, deadline, write.data, True))
        self.sent += len(claimed)
        data = writes[0].data if len(writes) == 1 else b"".join(w.data for w in writes)
        shared.write_wired(entries, data, now, unwatched)  # (writable: looked at above)

    def _spill(self, tickets: list[Ticket]) -> None:
        """Hand unwritten tickets to the loop's way, their slots given back (outside the
        guard: the loop's queue may fail them at once)."""
        window = self.window
        tell = False
        with window.lock:  # type: ignore[union-attr]
            for ticket in tickets:
                tell = window.give_locked(ticket) or tell
                ticket.door = None
        if tell:
            window.notify()
        self._doors.spill(tickets)

    # -- coalescing (door_batch) --

    def answered_locked(self) -> None:
        """A coalescing write was answered (or failed): the next one may go."""
        if self._on_way:
            self._on_way -= 1

    def write_waiting(self) -> None:
        """Outside the guard (after holding it, or after a coalescing write ended): write
        what threads queued meanwhile."""
        if self.queue:
            self.write_queued()

    # -- aio.sharing.ThreadSide: the loop --

    def after_loop(self) -> None:
        if self._lost_queue:
            spill, self._lost_queue = self._lost_queue, []
            self._spill(spill)
        if self.queue:
            self.write_queued()

    def lost(self) -> None:
        """The connection is gone (the loop, holding wire and guard): nothing more is written here;
        what is queued goes the loop's way once the loop lets go of the guard."""
        self._lost = True
        self._on_way = 0
        queue = self.queue
        while queue:
            self._lost_queue.append(queue.popleft())
        self._doors.closed(self)

    @property
    def queued(self) -> int:
        """Tickets queued for the wire (a withdrawn one among them until the next write drops
        it: the deque is counted, not iterated, which threads appending to it would break on
        free-threaded CPython, as a copy would)."""
        return len(self.queue)


class Doors:
    """The doors of one blocking Writer (:class:`nsqclient.aio.writer.ThreadDoors`): made and
    dropped on the loop, read by any thread. ``open`` is replaced on every change, never changed
    in place, so a thread reads a consistent list without a lock."""

    def __init__(
        self, spill: Spill, max_msg_size: Callable[[], int], grouping: Grouping | None
    ) -> None:
        self.spill = spill
        self.max_msg_size = max_msg_size
        self._grouping = grouping
        self.window: Window | None = None
        self.resend: Resend = _no_resend
        self.open: list[Door] = []
        #: round robin over several nsqd (a racy count: a lost update only repeats a door)
        self._rr = 0
        #: what the doors of lost connections counted (loop thread)
        self._gone = [0, 0, 0, 0, 0]  # sent, read, batches, messages, split

    def new_lock(self) -> threading.Lock:
        return threading.Lock()

    def bind(self, window: Window, resend: Resend) -> None:
        """The Writer's window and resend path (from its seam, before it starts)."""
        self.window = window
        self.resend = resend

    def opened(self, shared: Shared) -> None:
        assert self.window is not None
        door = Door(shared, self.window, self, self._grouping)
        shared.side = door
        self.open = [*self.open, door]

    def closed(self, door: Door) -> None:
        if door in self.open:
            self.open = [d for d in self.open if d is not door]
            gone = self._gone
            for i, n in enumerate(_counts(door)):
                gone[i] += n

    def pick(self) -> Door | None:
        """The door a thread's publish takes (None: none open)."""
        doors = self.open
        if not doors:
            return None
        if len(doors) == 1:
            return doors[0]
        self._rr = rr = (self._rr + 1) % len(doors)
        return doors[rr]

    def totals(self) -> list[int]:
        """Every door's counts, the lost ones' included: sent, read, batches, messages, split
        (loop thread; each door's read holding its guard)."""
        out = list(self._gone)
        for door in self.open:
            with door.wired, door.guard:
                counts = _counts(door)
            for i, n in enumerate(counts):
                out[i] += n
        return out

    def coalesced(self) -> tuple[int, int, int]:
        _sent, _read, batches, messages, split = self.totals()
        return batches, messages, split

    def queued(self) -> int:
        return sum(door.queued for door in self.open)


def _counts(door: Door) -> tuple[int, int, int, int, int]:
    return door.sent, door.read, door.batches, door.messages, door.split


def _no_resend(items: list[tuple[Any, float, bytes]]) -> None:
    raise AssertionError("a door resends only once bound to its Writer")
