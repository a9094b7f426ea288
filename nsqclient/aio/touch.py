"""Auto-touch: keeping a Reader's unanswered messages alive on nsqd while slow handlers run.

One timer per Reader, due every half of the shortest ``msg_timeout`` among its connections (so
it shrinks as nsqd with shorter timeouts join). Each tick TOUCHes every message the Reader holds
and has not answered, for at most a cap (``auto_touch_max``, default nsqd's ``max_msg_timeout``)
counted from when the tick first saw it; past that the message is left to nsqd's timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from ..message import Message
from .connection import Connection

__all__ = ["AutoTouch"]

#: nsqd's defaults, used until a connection's IDENTIFY reply says otherwise
_DEFAULT_MSG_TIMEOUT_MS = 60_000
_DEFAULT_MAX_MSG_TIMEOUT_MS = 900_000


class AutoTouch:
    """The touch timer of one Reader; the Reader says when to (re)arm and when to stop."""

    __slots__ = (
        "_connections",
        "_handle",
        "_messages",
        "_msg_timeout_ms",
        "_running",
        "_seen",
        "enabled",
        "max_seconds",
    )

    def __init__(
        self,
        *,
        connections: Callable[[], Iterable[Connection]],
        messages: Callable[[], Iterable[Message]],
        running: Callable[[], bool],
        msg_timeout_ms: float,
    ) -> None:
        self._connections = connections
        self._messages = messages
        self._running = running
        self._msg_timeout_ms = msg_timeout_ms  # the configured one (0: nsqd's)
        self._seen: dict[Message, float] = {}  # when each message was first seen by a tick
        self._handle: asyncio.TimerHandle | None = None
        #: whether touching is on, and its cap in seconds (None: nsqd's max_msg_timeout)
        self.enabled = False
        self.max_seconds: float | None = None

    def interval(self) -> float:
        """Seconds between ticks: half the shortest ``msg_timeout`` (at least 50 ms)."""
        timeouts = [
            c.identify_response.msg_timeout
            for c in self._connections()
            if c.identify_response is not None
        ]
        ms = min(timeouts) if timeouts else (self._msg_timeout_ms or _DEFAULT_MSG_TIMEOUT_MS)
        return max(0.05, ms / 2000.0)

    def cap(self) -> float:
        """Seconds a message is touched for, counted from the first tick that saw it."""
        if self.max_seconds is not None:
            return self.max_seconds
        caps = [
            c.identify_response.max_msg_timeout
            for c in self._connections()
            if c.identify_response is not None
        ]
        return (min(caps) if caps else _DEFAULT_MAX_MSG_TIMEOUT_MS) / 1000.0

    def arm(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Keep the timer due within one touch interval (which shrinks as nsqd join)."""
        if loop is None or not self.enabled or not self._running():
            return
        at = loop.time() + self.interval()
        handle = self._handle
        if handle is not None:
            if handle.when() <= at:
                return
            handle.cancel()
        self._handle = loop.call_at(at, self._tick, loop)

    def cancel(self) -> None:
        """Stop the timer (the Reader is closing)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = None
        if not self._running() or not self.enabled:
            return
        now = loop.time()
        cap = self.cap()
        seen = self._seen
        current: dict[Message, float] = {}
        for msg in self._messages():
            first = seen.get(msg, now)
            current[msg] = first
            if not msg.has_responded and now - first < cap:
                msg.touch()
        self._seen = current  # answered messages drop out
        self.arm(loop)
