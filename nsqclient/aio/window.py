"""A Writer's publish window (``max_pending_publishes``) and its publish counts, in one place.

Every publish, whoever sends it (a coroutine, a publishing thread of the blocking facade, the
loop draining the facade's queue), takes a slot here before it is sent and gives it back when
it is settled, and is counted here exactly once, when it is settled: ``published`` (messages
acknowledged) or ``failed`` (publish calls that raised). So the counts never go down and each
publish is counted as what its caller saw.

Locking: a Writer used only by asyncio code has ``lock`` None and only its loop calls. Once
shared with publishing threads (:meth:`nsqclient.aio.Writer.share_with_threads`), ``lock`` is
the lock the facade injected (a :class:`Guard`) and every read-modify-write of these fields
happens under it, from the loop and from threads alike (the ``*_locked`` methods are called
holding it). Nothing is taken while it is held: it is the innermost lock of the blocking facade.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol

__all__ = ["Guard", "SlotHolder", "Window"]


class Guard(Protocol):
    """A lock the blocking facade injects (a ``threading.Lock``): the asyncio core takes it
    where threads share its state, and imports nothing of threads itself."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> bool: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...


class SlotHolder(Protocol):
    """A publish that may hold a slot (the sync facade's ticket): marked under the lock, so
    that its settlement gives the slot back exactly once."""

    slot: bool


class Window:
    """``limit`` slots, ``used`` of them taken; ``published``/``failed`` counted on settlement."""

    __slots__ = ("failed", "limit", "lock", "notify", "published", "used", "wanted")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.published = 0  # messages acknowledged
        self.failed = 0  # publish calls that raised
        self.lock: Guard | None = None
        #: the loop waits for a slot or for the window to empty: a thread that gives one back
        #: calls :attr:`notify` (set with the lock, by the Writer, on its loop)
        self.wanted = False
        self.notify: Callable[[], None] = _nothing

    def share(self, lock: Guard, notify: Callable[[], None]) -> None:
        """From now on threads use this window too, under ``lock`` (before they can: on the
        loop)."""
        self.lock = lock
        self.notify = notify

    # -- the loop, or any thread once shared (each takes the lock itself) --

    def take(self, holder: SlotHolder | None = None) -> bool:
        """Take a slot (``holder``: the publish that holds it); False if none is free."""
        lock = self.lock
        if lock is None:
            if self.used >= self.limit:
                return False
            self.used += 1
            if holder is not None:
                holder.slot = True
            return True
        lock.acquire()  # (not `with`: every publish takes a slot, and `with` makes two bound
        try:  # methods per use)
            if self.used >= self.limit:
                return False
            self.used += 1
            if holder is not None:
                holder.slot = True
        finally:
            lock.release()
        return True

    def give(self, holder: SlotHolder | None = None) -> None:
        """Give back a slot taken for a publish that could not be sent after all."""
        lock = self.lock
        if lock is None:
            self._give(holder)
            return
        with lock:
            self._give(holder)

    def _give(self, holder: SlotHolder | None) -> None:
        if holder is None:
            self.used -= 1
        elif holder.slot:
            holder.slot = False
            self.used -= 1

    def settle(self, count: int, error: BaseException | None) -> None:
        """A publish holding a slot ended (``error`` None: ``count`` messages acknowledged)."""
        lock = self.lock
        if lock is None:
            self.used -= 1
            if error is None:
                self.published += count
            else:
                self.failed += 1
            return
        with lock:
            self.used -= 1
            if error is None:
                self.published += count
            else:
                self.failed += 1

    def refused(self) -> None:
        """A publish that never held a slot failed (no slot or connection in time)."""
        lock = self.lock
        if lock is None:
            self.failed += 1
            return
        with lock:
            self.failed += 1

    def set_wanted(self, wanted: bool) -> bool:
        """The loop (un)marks that it waits for slots; returns whether a slot is free now."""
        lock = self.lock
        if lock is None:
            self.wanted = wanted
            return self.used < self.limit
        with lock:
            self.wanted = wanted
            return self.used < self.limit

    # -- holding the lock (the sync facade's tickets, whose state changes in the same section) --

    def finish_locked(self, holder: SlotHolder, count: int, error: BaseException | None) -> bool:
        """``holder`` ended: counted, its slot (if any) given back; True if the loop must be
        told (:attr:`notify`, called by the caller once it let go of the lock)."""
        if error is None:
            self.published += count
        else:
            self.failed += 1
        if holder.slot:
            holder.slot = False
            self.used -= 1
            return self.wanted
        return False

    def give_locked(self, holder: SlotHolder) -> bool:
        """``holder`` gives its slot back unsent (it goes another way); True as for
        :meth:`finish_locked`."""
        if holder.slot:
            holder.slot = False
            self.used -= 1
            return self.wanted
        return False


def _nothing() -> None:
    return None
