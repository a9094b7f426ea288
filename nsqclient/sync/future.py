"""The future of a ``pub_nowait``: read in the thread that waits on it.

A :class:`PublishFuture` is a ``concurrent.futures.Future`` that knows its
:class:`~.publish.PublishTicket`: ``result()`` and ``exception()`` called in a publishing thread
read nsqd's reply in that thread when it is its turn (:mod:`.reading`), as a blocking ``pub()``
does, instead of waiting for the loop thread to read it and notify the future's Condition. The
Condition itself is made only when something looks at the future from elsewhere.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import PENDING as _PENDING
from concurrent.futures._base import RUNNING as _RUNNING
from typing import TYPE_CHECKING, Any

from . import portal, wakes
from .reading import wait_answer
from .wakes import thread_waker

if TYPE_CHECKING:
    from .portal import LoopThread
    from .ticket import Ticket

__all__ = ["PublishFuture"]

_INF = float("inf")
#: a future's Condition is made once, under one of these (chosen by the future's identity):
#: the same lock for one future always, so "no Condition yet" can be acted on atomically
#: (acknowledge, set_running_or_notify_cancel) against a waiter or a cancel() making it. Striped,
#: not one lock: reading threads acknowledge while the loop claims a queue's worth of futures,
#: and one lock for all of them convoyed on free-threaded CPython with other work on the
#: machine (the loop 1-2 s late, nothing read meanwhile: tests/sync/test_publish_future.py)
_CONDITION_MADE = tuple(threading.Lock() for _ in range(64))


def _made_lock(future: object) -> threading.Lock:
    return _CONDITION_MADE[(id(future) >> 4) & 63]


class PublishFuture(concurrent.futures.Future[None]):
    """The future of a ``pub_nowait``: ``result()`` and ``exception()`` from a publishing
    thread read the reply in that thread where threads read (as a blocking publish does).

    Why: waiting on a plain future left the reply to the loop thread, which read it and woke the
    waiter through the future's Condition: two hand-offs per publish, and the loop a second GIL
    contender per reply (0.30x the floor pinned against 0.61x for ``pub()``, 2026-12-04).
    Anywhere else (the loop thread, a forked child, ``concurrent.futures.wait``) it is a plain
    future, resolved by whoever reads the reply.
    """

    def __init__(self, generation: int, loop_thread: LoopThread) -> None:
        # Future.__init__'s fields but its Condition, made on first use (__getattr__): most
        # futures are resolved by the thread that waits on them, never touching it (a
        # Condition is about 1 µs to make; tests/sync/test_nowait_result.py checks the fields
        # against the running Python's Future)
        self._state = _PENDING
        self._result = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []
        self._ticket: Ticket | None = None  # set with the ticket; cleared once resolved
        self._generation = generation  # the fork generation it belongs to
        self._loop_thread = loop_thread

    def __getattr__(self, name: str) -> Any:
        if name != "_condition":
            raise AttributeError(name)
        with _made_lock(self):  # (one Condition, whichever thread asks first)
            made: threading.Condition | None = self.__dict__.get("_condition")
            if made is None:
                made = self.__dict__["_condition"] = threading.Condition()
        return made

    def acknowledge(self) -> None:
        """``set_result(None)``, without the Condition if nothing ever looked at this future
        (no waiter, no callback, no ``concurrent.futures.wait``: each of those makes it first,
        under the same lock, and then sees the result set here)."""
        if "_condition" not in self.__dict__:
            with _CONDITION_MADE[(id(self) >> 4) & 63]:  # (_made_lock, inlined: per publish)
                if "_condition" not in self.__dict__ and self._state == _RUNNING:
                    self._state = _FINISHED
                    return
        self.set_result(None)

    def set_running_or_notify_cancel(self) -> bool:
        """As a Future's, without making the Condition if nothing ever looked at this future:
        then nothing cancelled it (``cancel()`` makes it first, under the same lock) and nobody
        waits (PENDING to RUNNING notifies nobody anyway). The loop claims a queue of them at
        once, holding the window lock: no Condition, and no lock shared by all futures there."""
        if "_condition" not in self.__dict__:
            with _made_lock(self):
                if "_condition" not in self.__dict__ and self._state == _PENDING:
                    self._state = _RUNNING
                    return True
        return super().set_running_or_notify_cancel()

    def run_fresh(self) -> None:
        """``set_running_or_notify_cancel()`` for a future no other thread holds yet (the
        publishing thread's own, before ``pub_nowait`` returns it): nothing can have cancelled
        or be waiting on it, so its lock and the notification are skipped (about 1 µs of the
        publish's Python)."""
        self._state = _RUNNING

    def _read(self, timeout: float | None) -> float | None:
        """Read for the ticket until it ended or ``timeout`` passed: what is left of
        ``timeout`` (for the future's own wait, which then finds it resolved, or times out)."""
        ticket = self._ticket
        if ticket is None or self._generation != portal.fork_generation:
            return timeout
        waker = getattr(wakes._local, "waker", None)
        if waker is None:  # this thread's first wait (the loop thread never gets one)
            if self._loop_thread.in_loop_thread:
                return timeout
            waker = thread_waker()
        end = _INF if timeout is None else time.monotonic() + timeout
        wait_answer(ticket, end, waker)  # (until resolved, or end)
        if timeout is None:
            return None
        return max(0.0, end - time.monotonic())

    def result(self, timeout: float | None = None) -> None:
        if self._ticket is not None:
            timeout = self._read(timeout)
        if self._state == _FINISHED and self._exception is None:  # final: no lock needed
            return None
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._ticket is not None:
            timeout = self._read(timeout)
        if self._state == _FINISHED:  # final (its exception set before): no lock needed
            return self._exception
        return super().exception(timeout)

    def cancel(self) -> bool:
        """Cancel while it waits in a queue (never sent; counted as failed); False once it is
        being sent, as for any running future."""
        if not super().cancel():
            return False
        ticket = self._ticket
        if ticket is not None:
            ticket.cancelled()
        return True
