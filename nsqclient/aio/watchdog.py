"""A connection's liveness timer: one timer, armed only for when something can next be due.

The half of :class:`~nsqclient.aio.connection.Connection` that watches it (a mixin). What is
due is decided by :mod:`nsqclient.flow.liveness`, without I/O, so an idle connection wakes about
once per heartbeat interval. It declares the connection dead when no complete frame was decoded
for two heartbeat intervals (bytes alone do not count: a damaged size field leaves a partial
frame that heartbeats keep growing but never complete), when the oldest pending request is past
its deadline and nothing was answered for ``publish_timeout`` (replies come in order: nothing
behind it can be answered either), and when writes stayed paused longer than
``write_timeout``. It also fails pending requests whose deadline passed, so no per-request timer
is ever created; the read path only records a timestamp.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from ..errors import NSQTimeoutError
from ..flow import liveness
from ..protocol.frames import FrameDecoder
from .replies import ReplyQueue, ReplyWaiter
from .state import ConnectionState

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["Watchdog"]

_INF: Final = float("inf")
_CLOSED: Final = ConnectionState.CLOSED


class Watchdog:
    """The liveness half of a Connection (which sets these attributes up)."""

    address: str
    config: Config
    state: ConnectionState
    _loop: asyncio.AbstractEventLoop | None
    _transport: asyncio.Transport | None
    _decoder: FrameDecoder
    _replies: ReplyQueue
    _section: Any
    _wake: asyncio.TimerHandle | None
    _wake_at: float
    _last_read: float
    _dead_after: float
    _heartbeats_off: bool
    _stuck_after: float
    _write_paused_at: float | None
    _paused_buffer_size: int

    if TYPE_CHECKING:  # (the Connection's; declared for the type checker only)

        def abort(self, exc: BaseException | None = None) -> None: ...

        def _complete(self, waiter: ReplyWaiter, error: BaseException | None) -> None: ...

    def _arm(self, when: float) -> None:
        """Make the liveness timer fire by ``when`` (earlier than it is armed for now)."""
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        self._wake_at = when
        if when < _INF:
            self._wake = self._loop.call_at(when, self._check)  # type: ignore[union-attr]

    def _arm_by(self, when: float) -> None:
        """Make the liveness timer fire by ``when`` unless it will already (a publishing
        thread's ``pub_nowait``: see :mod:`.sharing`)."""
        if when < self._wake_at and self.state is not _CLOSED:
            self._arm(when)

    def _check(self) -> None:
        """The liveness timer: act on what :func:`liveness.check` finds due, then re-arm."""
        self._wake = None
        self._wake_at = _INF
        if self.state is _CLOSED:
            return
        with self._section:
            now = self._loop.time()  # type: ignore[union-attr]
            replies = self._replies
            head = replies.head()
            transport = self._transport
            verdict = liveness.check(
                now,
                liveness.Watch(
                    last_read=self._last_read,
                    dead_after=self._dead_after,
                    heartbeats_off=self._heartbeats_off,
                    pending=len(replies),
                    buffered=self._decoder.buffered,
                    oldest_deadline=head[1] if head is not None else _INF,
                    waiting_since=replies.waiting_since,
                    stuck_after=self._stuck_after,
                    next_deadline=replies.next_deadline,
                    write_paused_at=self._write_paused_at,
                    write_timeout=self.config.sec.write_timeout,
                    paused_size=self._paused_buffer_size,
                    buffer_size=transport.get_write_buffer_size() if transport is not None else 0,
                ),
            )
            watch = verdict.watch
            self._last_read = watch.last_read
            replies.next_deadline = watch.next_deadline
            self._write_paused_at = watch.write_paused_at
            self._paused_buffer_size = watch.paused_size
            if verdict.dead is not None:
                text = liveness.describe(verdict.dead, now, watch)
                self.abort(NSQTimeoutError(text, address=self.address))
                return
            if verdict.expire:
                for waiter in replies.due(now):
                    self._complete(
                        waiter,
                        NSQTimeoutError(
                            "no reply from nsqd before the timeout; the command may "
                            "or may not have been applied",
                            address=self.address,
                        ),
                    )
                watch = watch._replace(next_deadline=replies.next_deadline)
            self._arm(liveness.next_wake(now, watch))
