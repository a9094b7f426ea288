"""The replies a connection awaits, oldest first, and the one matcher of replies to their waiters.

nsqd answers a connection's reply-producing commands (SUB, PUB, MPUB, DPUB, CLS) in the order it
got them, so a connection keeps one FIFO of what it sent and each ``OK`` (or error frame) answers
its head. :class:`ReplyQueue` is that FIFO, and every reader of the connection matches through
it: the loop (:class:`~nsqclient.aio.connection.Connection`) and, on a connection shared with
publishing threads, the thread whose turn it is to read (:mod:`nsqclient.sync.reading`). It
never completes a waiter itself: it hands back what a read answered, and the caller completes
those once it let go of the connection's guard (a completion can run user code: a future's done
callbacks, a woken thread).

Each entry says whether any thread may complete its waiter (``shared``): the sync facade's
tickets may be completed by the thread that read their reply, an ``asyncio.Future`` only on its
loop. A reading thread stops at the first reply it may not complete and hands the rest of its
read back to the loop.

Locking: on a shared connection every call is made holding the connection's guard
(:mod:`nsqclient.aio.sharing`); otherwise only the loop calls.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Final, Protocol, cast

from ..protocol.frames import HEARTBEAT, OK, Event

__all__ = ["Entry", "Pending", "ReplyQueue", "ReplyWaiter", "SharedWaiter"]

_INF: Final = float("inf")


class ReplyWaiter(Protocol):
    """What waits for a reply: an ``asyncio.Future[bytes]``, or anything with these three
    methods (the sync facade's tickets, which then need no future and no callback hop)."""

    def done(self) -> bool: ...

    def set_result(self, result: bytes, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class SharedWaiter(ReplyWaiter, Protocol):
    """A waiter any thread may complete (pushed with ``shared=True``)."""

    def watched(self) -> bool:
        """Whether a thread waits for this reply now (it reads the socket when it may)."""
        ...

    def wake_reader(self) -> None:
        """Wake the thread waiting for this reply: reading is the threads' turn now."""
        ...


#: A reply-producing command waiting for its response: (waiter, deadline, the command's bytes,
#: whether any thread may complete the waiter). A tuple, not an object: one is made per
#: publish. The bytes are the caller's own object (no copy), kept so that a command nsqd never
#: executed can be sent again on another connection.
Entry = tuple[ReplyWaiter, float, bytes, bool]
#: A command to send again (nsqd never ran it): (waiter, deadline, the command's bytes)
Pending = tuple[ReplyWaiter, float, bytes]


class ReplyQueue:
    """The FIFO of one connection's pending replies (see the module docstring)."""

    __slots__ = ("_q", "loop_own", "next_deadline", "waiting_since")

    def __init__(self) -> None:
        self._q: collections.deque[Entry] = collections.deque()
        #: the earliest deadline among pending entries (may be stale-early, never late)
        self.next_deadline = _INF
        #: since when the oldest entry has waited: its send, or the previous reply
        self.waiting_since = 0.0
        #: entries only the loop may complete (what a reading thread must hand back)
        self.loop_own = 0

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._q)

    def push(
        self, waiter: ReplyWaiter, deadline: float, data: bytes, shared: bool, now: float
    ) -> bool:
        """Append what was just queued for writing; True if ``deadline`` is the new earliest."""
        q = self._q
        if not q:
            self.waiting_since = now
        q.append((waiter, deadline, data, shared))
        if not shared:
            self.loop_own += 1
        if deadline < self.next_deadline:
            self.next_deadline = deadline
            return True
        return False

    def extend(self, entries: list[Entry], now: float) -> None:
        """Append several entries (what a thread wrote in one send)."""
        if not entries:
            return
        q = self._q
        if not q:
            self.waiting_since = now
        q.extend(entries)
        earliest = self.next_deadline
        for entry in entries:
            if not entry[3]:
                self.loop_own += 1
            if entry[1] < earliest:
                earliest = entry[1]
        self.next_deadline = earliest

    def head(self) -> Entry | None:
        """The oldest entry, or None."""
        q = self._q
        return q[0] if q else None

    def pop(self, now: float) -> Entry | None:
        """Take the oldest entry off (its reply came); None if nothing is pending."""
        q = self._q
        if not q:
            return None
        entry = q.popleft()
        if not entry[3]:
            self.loop_own -= 1
        self.waiting_since = now
        return entry

    def pop_oks(self, n: int, now: float) -> list[ReplyWaiter]:
        """``n`` OKs in a row came (the loop's read): their waiters, oldest first (fewer if
        fewer were pending: the caller sees a damaged stream)."""
        q = self._q
        out: list[ReplyWaiter] = []
        for _ in range(min(n, len(q))):
            entry = q.popleft()
            if not entry[3]:
                self.loop_own -= 1
            out.append(entry[0])
        self.waiting_since = now
        return out

    def pop_oks_shared(self, n: int, now: float, done: list[ReplyWaiter]) -> bool:
        """:meth:`pop_oks` on a shared connection (the loop's read): the waiters not completed
        yet go to ``done``; True if a thread waited for one of them (flow.turns:
        ``settled_for_thread``)."""
        q = self._q
        watched = False
        for _ in range(min(n, len(q))):
            waiter, _deadline, _data, shared = q.popleft()
            if not shared:
                self.loop_own -= 1
            if waiter.done():
                continue
            if shared and cast("SharedWaiter", waiter).watched():
                watched = True
            done.append(waiter)
        self.waiting_since = now
        return watched

    def take_for_thread(
        self, events: list[Event], now: float, done: list[ReplyWaiter]
    ) -> tuple[int, int]:
        """Match a reading thread's ``events``: each OK whose head it may complete is taken
        off and its waiter appended to ``done`` (a waiter completed already, by a timeout,
        keeps only its slot); a heartbeat is counted. Returns (heartbeats, where it stopped):
        ``len(events)`` when all were matched, else the index of the first event the thread
        must hand back to the loop (with all after it)."""
        q = self._q
        beats = 0
        matched = False
        for i, event in enumerate(events):
            if event is OK:
                if q and q[0][3]:
                    waiter = q.popleft()[0]
                    matched = True
                    if not waiter.done():
                        done.append(waiter)
                    continue
            elif event is HEARTBEAT:
                beats += 1
                continue
            if matched:
                self.waiting_since = now
            return beats, i
        if matched:
            self.waiting_since = now
        return beats, len(events)

    def take_lone_ok(self, waiter: ReplyWaiter, now: float) -> int:
        """One OK alone came, read by the thread of ``waiter``: if it heads the FIFO, the OK is
        its reply: taken off, and the replies still pending after it (0 or more); -1 if not."""
        q = self._q
        if q and q[0][0] is waiter:
            q.popleft()
            self.waiting_since = now
            return len(q)
        return -1

    def due(self, now: float) -> list[ReplyWaiter]:
        """The waiters, not completed yet, whose deadline passed (they keep their slots: a late
        reply still comes in order); the next deadline is recomputed."""
        out: list[ReplyWaiter] = []
        earliest = _INF
        for waiter, deadline, _data, _shared in self._q:
            if waiter.done():
                continue
            if deadline <= now:
                out.append(waiter)
            elif deadline < earliest:
                earliest = deadline
        self.next_deadline = earliest
        return out

    def take_all(self) -> list[Entry]:
        """Everything pending, taken off (the connection is gone, or nsqd stopped at an error)."""
        out = list(self._q)
        self._q.clear()
        self.loop_own = 0
        return out
