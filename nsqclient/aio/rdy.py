"""Carrying a Reader's flow-control decisions out: RDY to the connections, the one timer armed.

:class:`~nsqclient.flow.RdyController` decides (pure, clock-injected); :class:`RdyDriver` sends
the RDY counts it returns, keeps a single loop timer at the controller's next deadline, and on
that timer lets the controller judge the connections' silence. After each batch of changes it
tells its owner (the Reader re-decides whether connections must report every FIN).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from ..flow import RdyChange, RdyController
from .connection import Connection

__all__ = ["RdyDriver"]


class RdyDriver:
    """Applies an :class:`~nsqclient.flow.RdyController`'s changes on one loop."""

    def __init__(self, flow: RdyController, on_applied: Callable[[], None]) -> None:
        self.flow = flow
        #: the owner's loop, once it started (no timer before)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._on_applied = on_applied
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None
        self._stopped = False

    def now(self) -> float:
        loop = self.loop
        return loop.time() if loop is not None else 0.0

    def apply(self, changes: Sequence[RdyChange]) -> None:
        """Send ``changes`` and re-arm the timer at the controller's next deadline."""
        for change in changes:
            conn = change.conn
            assert isinstance(conn, Connection)
            conn.send_rdy(change.count)
        at = self.flow.next_deadline()
        if at != self._at:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            self._at = at
            if at is not None and self.loop is not None:
                self._handle = self.loop.call_at(at, self._on_timer)
        self._on_applied()

    def stop(self) -> None:
        """The owner closed: cancel the timer; a tick already scheduled does nothing."""
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _on_timer(self) -> None:
        self._handle = None
        self._at = None
        assert self.loop is not None
        # the tick judges silence, so first let the loop read what the sockets hold: after a
        # stall this timer may run before the reads; the second hop runs after one poll
        self.loop.call_soon(self.loop.call_soon, self._tick)

    def _tick(self) -> None:
        if not self._stopped:
            self.apply(self.flow.tick(self.now()))
