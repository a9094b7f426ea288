"""The lifecycle both facades share: attach to the loop thread on first use (again after a fork),
claim the one close, detach, close at interpreter exit, and keep a close within its timeout.

A facade is built in the caller's thread and starts nothing: its core object (Reader or Writer)
is made on the shared loop thread the first time it is used, and made afresh when the process
forked since (``portal.fork_generation`` moved on), because the parent's loop and sockets are not
the child's. Exactly one caller closes; a facade that was never used in this process closes
without touching the loop. Subclasses supply ``_bind`` (make the core objects on the loop),
``_forget_parent`` (drop state inherited through a fork), ``_open`` (what ``with`` does first)
and ``graceful_close``/``close``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import ClassVar, Self

from ..aio.connection import CLOSE_FLOOR
from ..errors import ClosedError, NSQTimeoutError
from . import portal
from .portal import Lifetime, LoopThread, register_open, unregister_open

__all__ = ["CLOSE_SLACK", "FacadeLifecycle"]

log = logging.getLogger("nsqclient.sync")

#: how long past its own limit a facade's close waits for the loop side, which ends by that
#: limit itself (its last steps, CLS and the socket's close, get at least ``CLOSE_FLOOR``): the
#: close then keeps within its timeout plus the stated margin (docs/configuration.md) even if
#: the loop side overran
CLOSE_SLACK = CLOSE_FLOOR + 0.15


class FacadeLifecycle:
    """Base of SyncReader and SyncWriter: attach, fork handling, claim-close, detach."""

    _kind: ClassVar[str]  # "SyncReader" / "SyncWriter", for messages
    _portal: LoopThread
    _life: Lifetime[None]

    def _init_lifecycle(self) -> None:
        portal.loop_factory()  # a bad $NSQCLIENT_LOOP fails here, in the caller, at once
        self._closed = False
        self._close_claim = threading.Lock()
        self._generation = -1  # != portal.fork_generation: attach on first use

    # -- hooks ----------------------------------------------------------------------------

    def _bind(self, loop_thread: LoopThread) -> None:
        """Make the core objects on ``loop_thread`` (raise to abandon the attach)."""
        raise NotImplementedError

    def _forget_parent(self) -> None:
        """Rebuilding in a forked child: drop what the parent's object held."""

    def _open(self) -> None:
        raise NotImplementedError

    def graceful_close(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------

    def _attach(self) -> None:
        generation = portal.fork_generation
        loop_thread = LoopThread.acquire()
        try:
            self._bind(loop_thread)
        except BaseException:
            loop_thread.release()
            raise
        self._portal = loop_thread
        self._life = Lifetime(loop_thread)
        if self._generation != -1:  # rebuilding in a forked child: the parent's claim is moot
            self._close_claim = threading.Lock()
            self._forget_parent()
        register_open(self)
        self._generation = generation  # last: other threads now see a complete object

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"this {self._kind} was closed; create a new one")
        if self._generation != portal.fork_generation:
            with portal.fork_lock():  # forked: the parent's loop and sockets are not ours
                if self._generation != portal.fork_generation:
                    self._attach()

    def _claim_close(self, what: str) -> bool:
        """Mark closed; True only for the one caller that must close live resources: the first
        one, in the process that attached (never-used and inherited objects have none)."""
        if self._closed:
            return False
        if self._generation == portal.fork_generation:
            self._portal.check_not_in_loop(what)  # refused before anything changes
        if not self._close_claim.acquire(blocking=False):
            return False
        self._closed = True
        self._on_claimed()
        return self._generation == portal.fork_generation  # else: the parent's, untouched

    def _on_claimed(self) -> None:
        """Runs once, in the closing caller, as soon as the object counts as closed."""

    def _exit_within(
        self,
        close: Callable[[], Awaitable[None]],
        limit: float,
        abort: Callable[[], object],
    ) -> None:
        """Run ``close`` (ending by ``limit`` seconds) on the loop and wait for it at most
        :data:`CLOSE_SLACK` longer; past that, ``abort()`` on the loop (closing at once, not
        waited for) and return, so the caller's timeout holds whatever the loop side does."""
        try:
            self._life.exit(close, limit + CLOSE_SLACK)
        except NSQTimeoutError:
            log.warning(
                "%s: the close did not end within its %.2fs; closing its connections at once",
                self._kind,
                limit,
            )
            self._portal.call_soon(abort)

    def _detach(self) -> None:
        unregister_open(self)
        self._portal.release()

    def _close_at_exit(self, timeout: float) -> None:
        if not self._closed:
            self.graceful_close(timeout)

    def __enter__(self) -> Self:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.graceful_close()

    def close(self) -> None:
        raise NotImplementedError

    @property
    def is_closed(self) -> bool:
        """True once a close began (close, graceful_close, the with block's end, a signal);
        using the object then raises ClosedError."""
        return self._closed
