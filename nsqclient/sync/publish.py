"""The loop's way for publishes from threads: a bounded queue of tickets, drained on the loop.

A publish goes this way when no connection door can take it at once (none is up yet, or every
``max_pending_publishes`` slot is taken, or writes are paused): :class:`PublishQueue` carries
its :class:`~.ticket.Ticket` to the loop, which hands it to the core Writer as soon as the Writer
can take it. It is *bounded*: a full queue blocks the publishing threads (the backpressure), so
memory stays bounded by ``max_queued_publishes`` plus ``max_pending_publishes``. Threads wake
the loop only when no drain is already pending, so a burst from many threads costs one wake-up.

Every ticket keeps its own deadline while it waits: while the Writer cannot take publishes the
queue waits for it only until the earliest deadline queued, and a ticket whose deadline passed
fails then (never sent: ``NoConnectionsError`` while no nsqd is up, else
``NotSentTimeoutError``), whatever is queued ahead of it.

Locking: ``_lock`` (with the ``_not_full`` condition) guards the queue's contents and flags,
every change included: the loop's pops too, because a door's :meth:`PublishQueue.put_back`
(any thread) puts tickets in *front*, so a head looked at without the lock may no longer be the
head when it is popped (a ticket put back in between was popped unseen and never sent: found by
the free-threaded step, tests/sync/test_publish_queue.py). A ticket's state changes only through
its own methods (:mod:`.ticket`).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from ..errors import ClosedError, NotSentTimeoutError, NSQError
from .portal import SLICE
from .ticket import QUEUED, Ticket, claim_all

__all__ = ["Loopway", "PublishQueue"]

_INF = float("inf")
_monotonic = time.monotonic


class Loopway(NamedTuple):
    """What the queue needs of the core Writer (on the loop)."""

    #: a connection (or the HTTP fallback) can take a publish now, and the Writer is open
    ready: Callable[[], bool]
    #: take a slot for the ticket (False: none free)
    take: Callable[[Ticket], bool]
    #: give a ticket's slot back (it could not be sent after all)
    give: Callable[[Ticket], None]
    #: send a claimed ticket (its slot held): (ticket, data, count, timeout)
    send: Callable[[Ticket, bytes, int, float], bool]
    #: wait until a publish could be sent at once, or raise at the timeout
    wait_ready: Callable[[float], Awaitable[None]]
    #: the NoConnectionsError for a publish that timed out unsent while no nsqd is up
    unreachable: Callable[[], BaseException | None]


class PublishQueue:
    """Bounded thread -> loop queue of tickets (see the module docstring). Made on the loop."""

    def __init__(self, maxsize: int, way: Loopway) -> None:
        self._loop = asyncio.get_running_loop()
        self._maxsize = maxsize
        self._way = way
        self._items: collections.deque[Ticket] = collections.deque()
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._scheduled = False  # a drain is scheduled, running, or waiting for the Writer
        self._waiting = 0  # threads blocked because the queue is full
        self.full_waits = 0  # publishes that found the queue full and waited (ever)
        self._closed = False
        #: what :meth:`abort` failed the queue with: tickets put back after it fail with it
        self._aborted: BaseException | None = None
        #: while the Writer cannot take publishes: the deadline the queue waits until, and how
        #: a thread queueing an earlier one wakes it (loop-owned but for ``_until``: locked)
        self._slow: asyncio.Task[None] | None = None
        self._until: float | None = None  # (None: not waiting)
        self._poked: asyncio.Future[None] | None = None
        self._emptied: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def waiting(self) -> int:
        """Publishes waiting in the queue now: those whose caller still waits (a withdrawn or
        cancelled one stays until the drain passes it, counted as failed already)."""
        with self._lock:
            return sum(1 for ticket in self._items if ticket.state is QUEUED)

    # -- thread side --

    def put(self, ticket: Ticket) -> None:
        """Enqueue, blocking while the queue is full (backpressure) until the ticket's deadline
        (then the ticket fails, never sent, and that error is raised)."""
        waited = False
        poke = False
        with self._lock:  # the Condition's own lock: waiting on it below is legal
            while True:
                if self._closed:
                    raise ClosedError("this SyncWriter was closed; create a new one")
                if len(self._items) < self._maxsize:
                    break
                remaining = ticket.deadline - _monotonic()
                if remaining <= 0:
                    error = self._way.unreachable() or NotSentTimeoutError(
                        "the publish queue stayed full until the timeout (nsqd is slow or "
                        "down); never sent, safe to retry"
                    )
                    ticket.settle(error)  # counted as failed
                    raise error
                if not waited:  # counted once per publish that had to wait (full queue)
                    waited = True
                    self.full_waits += 1
                self._waiting += 1
                try:
                    self._not_full.wait(min(SLICE, remaining))
                finally:
                    self._waiting -= 1
            self._items.append(ticket)
            until = self._until
            if until is not None and ticket.deadline < until:  # it waits past this deadline
                self._until = ticket.deadline
                poke = True
            if self._scheduled and not poke:
                return
            schedule = not self._scheduled
            self._scheduled = True
        try:
            if schedule:
                self._loop.call_soon_threadsafe(self._drain)
            if poke:
                self._loop.call_soon_threadsafe(self._wake_slow)
        except RuntimeError:  # the loop is gone
            raise ClosedError("this SyncWriter's loop has stopped") from None

    def put_back(self, tickets: list[Ticket]) -> None:
        """Take tickets a connection door could not write (any thread; never blocks: they were
        admitted already). They go first, in order."""
        if not tickets:
            return
        with self._lock:
            aborted = self._aborted
            if aborted is None:
                self._items.extendleft(reversed(tickets))
                schedule = not self._scheduled
                self._scheduled = True
        if aborted is not None:  # the queue was failed already: no drain would ever take them
            for ticket in tickets:
                if ticket.settle(aborted):
                    ticket.notify()
            return
        try:
            if schedule:
                self._loop.call_soon_threadsafe(self._drain)
            self._loop.call_soon_threadsafe(self._wake_slow)
        except RuntimeError:  # the loop is gone
            for ticket in tickets:
                if ticket.settle(ClosedError("this SyncWriter's loop has stopped")):
                    ticket.notify()

    # -- loop side --

    def _drain(self) -> None:
        """Hand queued tickets to the Writer while it takes them (one wake-up, many tickets)."""
        if self._slow is not None:
            return  # waiting for the Writer: it drains when ready
        lock = self._lock
        way = self._way
        while True:
            with lock:  # (the head, taken under the lock: see the module docstring)
                items = self._items
                if not items:
                    break
                ticket = items.popleft()
            if ticket.state is not QUEUED:  # withdrawn or cancelled: counted then
                continue
            if not (way.ready() and way.take(ticket)):
                with lock:  # first again (ahead of any put back meanwhile: as old as they)
                    self._items.appendleft(ticket)
                self._slow = self._loop.create_task(self._wait_slow(), name="nsq-sync-publish-wait")
                self._wake_putters()
                return  # _scheduled stays True: threads need not wake the loop meanwhile
            ended: list[Ticket] = []
            now = _monotonic()
            if not claim_all([ticket], now, ended):  # withdrawn meanwhile, or its time passed
                if ticket.slot:
                    way.give(ticket)
                for t in ended:
                    t.notify()
                continue
            try:
                sent = way.send(ticket, ticket.data, ticket.count, ticket.deadline - now)
                failure: BaseException | None = None
            except Exception as exc:  # the caller gets exactly what the core raised
                sent, failure = False, exc
            if not sent:  # (ready() said a connection could take it: only a bug gets here)
                if failure is None:
                    failure = way.unreachable() or NotSentTimeoutError(
                        "no connection could take the publish; never sent, safe to retry"
                    )
                if ticket.settle(failure):
                    ticket.notify()
        with lock:
            if self._waiting:
                self._not_full.notify(self._waiting)
            if self._items:  # a thread appended after the loop above saw the queue empty
                self._loop.call_soon(self._drain)
                return
            self._scheduled = False
        emptied = self._emptied
        if emptied is not None and not emptied.done():
            emptied.set_result(None)

    def _wake_putters(self) -> None:
        if self._waiting:
            with self._lock:
                self._not_full.notify(self._waiting)

    def _wake_slow(self) -> None:
        poked = self._poked
        if poked is not None and not poked.done():
            poked.set_result(None)

    async def _wait_slow(self) -> None:
        """While the Writer cannot take publishes: wait for it, until the earliest deadline
        queued at most; at each deadline fail what is due (never sent)."""
        loop = self._loop
        try:
            while True:
                earliest = self._earliest()
                if earliest == _INF:
                    break  # nothing left waiting
                with self._lock:
                    self._until = earliest
                remaining = earliest - _monotonic()
                error: BaseException | None = None
                if remaining > 0:
                    poked: asyncio.Future[None] = loop.create_future()
                    self._poked = poked
                    ready = loop.create_task(self._ready(remaining))
                    await asyncio.wait((ready, poked), return_when=asyncio.FIRST_COMPLETED)
                    if not ready.done():
                        ready.cancel()  # poked: an earlier deadline queued, or tickets put back
                        continue
                    error = ready.result()
                    if error is None:
                        break  # the Writer can take publishes now
                    if isinstance(error, ClosedError):
                        self.abort(error)
                        return
                self._expire(error)
        finally:
            self._slow = None
            with self._lock:
                self._until = None
        self._drain()

    async def _ready(self, timeout: float) -> BaseException | None:
        try:
            await self._way.wait_ready(timeout)
        except (NSQError, TimeoutError) as exc:
            return exc
        return None

    def _earliest(self) -> float:
        earliest = _INF
        with self._lock:  # threads append meanwhile: without the GIL, list() of a deque another
            items = list(self._items)  # thread grows raises "deque mutated during iteration"
        for ticket in items:
            if ticket.state is QUEUED and ticket.deadline < earliest:
                earliest = ticket.deadline
        return earliest

    def _expire(self, cause: BaseException | None) -> None:
        """Fail every queued ticket whose deadline passed (never sent), whatever is ahead."""
        now = _monotonic()
        due: list[Ticket] = []
        with self._lock:
            keep: collections.deque[Ticket] = collections.deque()
            for ticket in self._items:
                if ticket.state is not QUEUED:
                    continue
                (due if ticket.deadline <= now else keep).append(ticket)
            self._items = keep
        error = self._way.unreachable()
        for ticket in due:
            failure = error or NotSentTimeoutError(
                "the publish waited in the queue until its timeout (nsqd is slow or "
                "unreachable); never sent, safe to retry"
            )
            if cause is not None and failure.__cause__ is None:
                failure.__cause__ = cause
            if ticket.settle(failure):
                ticket.notify()
        self._wake_putters()

    async def close(self, timeout: float | None) -> None:
        """Refuse new publishes, hand what is queued to the Writer (bounded), fail the rest."""
        with self._not_full:
            self._closed = True
            self._not_full.notify_all()
        if self._items and (timeout is None or timeout > 0):
            self._wake_slow()  # (what it waits for may have been withdrawn meanwhile)
            self._emptied = self._loop.create_future()
            with self._lock:
                schedule = not self._scheduled
                self._scheduled = True
            if schedule:
                self._loop.call_soon(self._drain)
            try:
                async with asyncio.timeout(timeout):
                    await self._emptied
            except TimeoutError:
                pass
        self.abort(ClosedError("the SyncWriter closed before this publish was sent"))

    def abort(self, exc: BaseException) -> None:
        """Refuse new publishes and fail everything still queued with ``exc``."""
        with self._not_full:
            self._closed = True
            # under the lock, with the items taken: a door's put_back (any thread) either came
            # before and is failed here, or comes after and fails its tickets itself
            self._aborted = exc
            items = list(self._items)
            self._items.clear()
            self._not_full.notify_all()
        slow, self._slow = self._slow, None
        if slow is not None and slow is not asyncio.current_task():
            slow.cancel()
        for ticket in items:
            if ticket.settle(exc):
                ticket.notify()
