"""Publishes crossing from threads to the loop: a bounded queue of tickets and their outcomes.

:class:`PublishQueue` carries encoded publishes (:class:`PublishTicket`) from threads to the loop.
It is *bounded*: a full queue blocks the publishing threads (the backpressure). Threads wake the
loop only when no drain is already pending, so a burst from many threads costs one wake-up; the
drain hands tickets to the core Writer as long as it accepts them, and each nsqd acknowledgement
completes its ticket: a lock release for ``pub()`` (no ``concurrent.futures.Future`` per
publish), a ``concurrent.futures.Future`` for ``pub_nowait()``. Tickets leave the queue only when
the Writer takes them, so while nsqd is slow the queue fills and threads wait, and memory stays
bounded by ``max_queued_publishes`` plus ``max_pending_publishes``. Every ticket has a deadline.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures._base import FINISHED as _FINISHED
from typing import TYPE_CHECKING

from ..errors import ClosedError, NotSentTimeoutError, NSQTimeoutError
from .future import PublishFuture
from .portal import SLICE
from .wakes import Waker, thread_waker
from .wakes import wake as _wake

if TYPE_CHECKING:
    from .door import ThreadWrites

__all__ = ["PublishQueue", "PublishTicket"]

_QUEUED, _SENT, _DONE, _CANCELLED = 0, 1, 2, 3


class PublishTicket:
    """One encoded publish crossing from a thread to the loop, and its outcome.

    The publishing thread waits on its :class:`~.wakes.Waker` (woken by the loop once the ticket
    is complete) or, for ``pub_nowait``, on ``future``. ``error`` is the very exception object
    the core produced.
    """

    __slots__ = (
        "_door",
        "_on_sent_done",
        "_running",
        "_waker",
        "count",
        "data",
        "deadline",
        "error",
        "future",
        "state",
    )

    width = 1  # tickets per write (a coalescing door's DoorBatch has more)

    def __init__(
        self,
        data: bytes,
        count: int,
        deadline: float,
        future: concurrent.futures.Future[None] | None = None,
        waker: Waker | None = None,
    ) -> None:
        self.data = data
        self.count = count
        self.deadline = deadline
        self.future = future
        self.error: BaseException | None = None
        self.state = _QUEUED
        self._running = False  # ``future`` was set running (it can no longer be cancelled)
        self._on_sent_done: Settle | None = None  # the Writer's settlement
        #: the connection door a thread wrote it through (None: it crossed to the loop)
        self._door: ThreadWrites | None = None
        #: the publishing thread's wake-up line (None for ``pub_nowait``: its future is)
        self._waker: Waker | None = (waker or thread_waker()) if future is None else None

    # -- thread side --

    def wait(self, deadline: float) -> None:
        """Block until nsqd answered (raising its error) or ``deadline`` passed."""
        waker = self._waker
        assert waker is not None
        door = self._door
        try:
            while self.state != _DONE:
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    if door is not None and self.state == _QUEUED:  # a coalescing door held it
                        door.write_queued()  # (written once the write on its way is answered)
                    # read the reply in this thread when threads read (see .door), else wait
                    # to be woken (or for a slice to pass): look again either way. (A baton
                    # held is read_for's False, without its call: the holder wakes the next.)
                    if (
                        door is None
                        or not door.reading
                        or door.read_lock.locked()
                        or not door.read_for(self, remaining)
                    ):
                        waker.wait(remaining)
                else:
                    # withdraw first, then look: a ticket the loop claimed meanwhile was sent
                    self.cancel()
                    if self.state == _DONE:  # answered just now: that outcome, not a timeout
                        break
                    if self.state != _CANCELLED:
                        if self._door is not None:  # no timer saw it: let the loop look
                            self._door.overdue()
                        raise NSQTimeoutError(
                            "no acknowledgement from nsqd in time; the message may or may not "
                            "have been published"
                        )
                    raise NotSentTimeoutError(
                        "the publish was never sent (the loop did not take it in time: nsqd is "
                        "slow or unreachable); safe to retry"
                    )
        except BaseException:
            self.cancel()
            raise
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """Withdraw the publish if it has not been handed to nsqd yet."""
        if self.state == _QUEUED:
            self.state = _CANCELLED

    # -- loop side --

    def claim(self) -> bool:
        """Mark the ticket as being sent; False if the caller gave up on it."""
        future = self.future
        if future is not None and not self._running:
            if not future.set_running_or_notify_cancel():  # pub_nowait's future was cancelled
                self.state = _CANCELLED
                return False
            self._running = True
        if self.state != _QUEUED:
            return False
        self.state = _SENT
        return True

    # -- the connection completes a sent ticket directly (ReplyWaiter): no future, no hop --

    def done(self) -> bool:
        return self.state == _DONE

    def set_result(self, _reply: bytes) -> None:
        self._sent_done(None)
        self.complete(None)
        if self._waker is not None and self.future is not None:  # a thread waits in result():
            door = self._door  # reading may pass to it at the end of this read (see .baton)
            if door is not None and not door.reading:
                door._switch = True

    def set_exception(self, error: BaseException) -> None:
        self._sent_done(error)
        self.complete(error)

    def _sent_done(self, error: BaseException | None) -> None:
        settle, self._on_sent_done = self._on_sent_done, None
        if settle is not None:
            settle(self.count, error)

    def complete(self, error: BaseException | None) -> None:
        """Loop side: finish the ticket; ``error`` None means nsqd acknowledged it."""
        if self.state == _DONE:
            return
        self.error = error
        self.state = _DONE
        future = self.future
        if future is None:
            waker = self._waker
            assert waker is not None
            _wake(waker)  # when the loop thread next waits for I/O (see .wakes)
            return
        if not self._running:
            if not future.set_running_or_notify_cancel():
                return  # cancelled by the caller while queued
            self._running = True
        future._ticket = None  # type: ignore[attr-defined]  # (PublishFuture: no cycle left)
        if error is None:
            if future.__class__ is PublishFuture:
                future.acknowledge()
            else:
                future.set_result(None)
        else:
            future.set_exception(error)
        waker = self._waker
        if waker is not None:  # a thread waits in the future's result() (PublishFuture)
            _wake(waker)

    def wait_answer(self, end: float, waker: Waker) -> bool:
        """A thread waits in its ``pub_nowait`` future's ``result()`` until ``end``: it reads
        the reply itself where threads read (:mod:`.baton`), as a blocking publish does, else
        waits on ``waker`` to be woken. While it waits, its waker is this ticket's, so the
        baton passes to it; it takes the waker off when it leaves. True: acknowledged, and its
        future resolved by this thread (so ``result()`` need not look at the future again)."""
        door = self._door
        if door is None:
            return False
        self._waker = waker
        try:
            if door.reading and door.round_trip(self):  # the lone OK for it, read at once
                future = self.future  # resolved by this thread, not being resolved elsewhere?
                # (the state, read without the future's lock: FINISHED is final)
                return future is None or future._state == _FINISHED
            while self.state != _DONE:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                if self.state == _QUEUED:  # a coalescing door held it
                    door.write_queued()
                if not door.reading or not door.read_for(self, remaining):
                    if self.state == _DONE:  # resolved after the waker went on: no wake-up
                        break
                    waker.wait(remaining)
        finally:
            self._waker = None
            if self.state != _DONE:  # gave up first: the baton must not pass to no one
                door.left(self)
        return False


# (ticket, data, count, timeout) -> sent? (the core Writer's _publish_to)
Publish = Callable[["PublishTicket", bytes, int, float], bool]
# (count, error or None): the core Writer's settlement of a sent ticket (its _publish_done)
Settle = Callable[[int, BaseException | None], None]
WaitReady = Callable[[float], Awaitable[None]]


class PublishQueue:
    """Bounded thread -> loop queue of :class:`PublishTicket`. Create it on the loop thread.

    ``publish(ticket, data, count, timeout)`` sends at once and returns True (the connection then
    completes the ticket itself), or returns False when the Writer cannot take the publish now
    (not connected, or ``max_pending_publishes`` reached); the queue then awaits
    ``wait_ready(timeout)`` and tries again. ``done(count, error)`` is the Writer's settlement
    of each sent ticket once complete.
    """

    def __init__(
        self,
        maxsize: int,
        publish: Publish,
        wait_ready: WaitReady,
        done: Settle,
        unreachable: Callable[[], BaseException | None] = lambda: None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._unreachable = unreachable  # why a timed-out publish was never sent, if no nsqd
        self._maxsize = maxsize
        self._publish = publish
        self._wait_ready = wait_ready
        self._done = done
        self._items: collections.deque[PublishTicket] = collections.deque()
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._scheduled = False  # a drain is scheduled, running, or waiting for the Writer
        self._waiting = 0  # threads blocked because the queue is full
        self.full_waits = 0  # publishes that found the queue full and waited (ever)
        #: publishes that failed before the Writer took them (queue timeouts, no connection,
        #: withdrawn, refused by the Writer, closed): counted here since the Writer never saw
        #: them; loop thread only. ``_put_failed``: the same for threads, under ``_lock``
        self.failed = 0
        self._put_failed = 0
        self._closed = False
        #: what :meth:`abort` failed the queue with: tickets put back after it fail with it
        self._aborted: BaseException | None = None
        self._slow: asyncio.Task[None] | None = None
        self._emptied: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def failures(self) -> int:
        """Publishes that failed here, before the Writer took them (its ``failed`` counts the
        rest); loop thread."""
        return self.failed + self._put_failed

    def withdrawn_waiting(self) -> int:
        """Tickets still in the queue that their threads withdrew (timed out, interrupted,
        cancelled): failed for their callers already, and counted in :attr:`failures` only
        once a drain reaches them, which waits while no nsqd is up. For ``stats()``, so that
        a publish that raised is counted when it raised. Loop thread."""
        with self._lock:
            return sum(1 for ticket in self._items if ticket.state == _CANCELLED)

    # -- thread side --

    def put(self, ticket: PublishTicket) -> None:
        """Enqueue, blocking while the queue is full (backpressure) until the ticket's deadline."""
        waited = False
        with self._lock:  # the Condition's own lock: waiting on it below is legal
            while True:
                if self._closed:
                    raise ClosedError("this SyncWriter was closed; create a new one")
                if len(self._items) < self._maxsize:
                    break
                remaining = ticket.deadline - time.monotonic()
                if remaining <= 0:
                    self._put_failed += 1
                    raise self._unreachable() or NotSentTimeoutError(
                        "the publish queue stayed full until the timeout (nsqd is slow or down); "
                        "never sent, safe to retry"
                    )
                if not waited:  # counted once per publish that had to wait (full queue)
                    waited = True
                    self.full_waits += 1
                self._waiting += 1
                try:
                    self._not_full.wait(min(SLICE, remaining))
                finally:
                    self._waiting -= 1
            self._items.append(ticket)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is gone
            ticket.cancel()
            raise ClosedError("this SyncWriter's loop has stopped") from None

    def put_back(self, tickets: list[PublishTicket]) -> None:
        """Take tickets a connection door could not write (any thread; never blocks: they were
        admitted already). They go first, in order."""
        if not tickets:
            return
        for ticket in tickets:
            ticket._door = None  # the loop sends it, and its reply is the loop's to match
        with self._lock:
            aborted = self._aborted
            if aborted is None:
                self._items.extendleft(reversed(tickets))
                if self._scheduled:
                    return
                self._scheduled = True
            else:  # the queue was failed already: no drain would ever take them
                self._put_failed += len(tickets)
        if aborted is not None:
            for ticket in tickets:
                ticket.complete(aborted)
            return
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is gone
            for ticket in tickets:
                ticket.complete(ClosedError("this SyncWriter's loop has stopped"))

    # -- loop side --

    def _drain(self) -> None:
        """Hand queued tickets to the Writer while it takes them (one wake-up, many tickets)."""
        items = self._items
        publish = self._publish
        done = self._done
        while items:
            ticket = items[0]
            if not ticket.claim():  # withdrawn: the caller raised (timeout, interrupt, cancel)
                items.popleft()
                self.failed += 1
                continue
            remaining = ticket.deadline - time.monotonic()
            if remaining <= 0:
                items.popleft()
                self.failed += 1
                ticket.complete(
                    self._unreachable()
                    or NotSentTimeoutError(
                        "the publish waited in the queue until its timeout (nsqd is slow or "
                        "unreachable); never sent, safe to retry"
                    )
                )
                continue
            ticket._on_sent_done = done
            try:
                sent = publish(ticket, ticket.data, ticket.count, remaining)
            except Exception as exc:  # the caller gets exactly what the core raised
                ticket._on_sent_done = None
                items.popleft()
                self.failed += 1
                ticket.complete(exc)
                continue
            if not sent:  # the Writer is full or not connected: wait for it, then go on
                ticket._on_sent_done = None
                ticket.state = _QUEUED  # not sent: still withdrawable
                self._slow = self._loop.create_task(
                    self._wait_then_drain(ticket, remaining), name="nsq-sync-publish-wait"
                )
                self._wake_putters()
                return  # _scheduled stays True: threads need not wake the loop meanwhile
            items.popleft()
        with self._lock:
            if self._waiting:
                self._not_full.notify(self._waiting)
            if items:  # a thread appended after the loop above saw the queue empty
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

    async def _wait_then_drain(self, ticket: PublishTicket, timeout: float) -> None:
        try:
            await self._wait_ready(timeout)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            items = self._items
            if items and items[0] is ticket:
                items.popleft()
                self._wake_putters()
            if ticket.state != _DONE:
                self.failed += 1
            ticket.complete(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._slow = None
        self._drain()

    async def close(self, timeout: float | None) -> None:
        """Refuse new publishes, hand what is queued to the Writer (bounded), fail the rest."""
        with self._not_full:
            self._closed = True
            self._not_full.notify_all()
        if self._items and (timeout is None or timeout > 0):
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
        if slow is not None:
            slow.cancel()
        self.failed += len(items)
        for ticket in items:
            ticket.complete(exc)
