"""The in-flight ledger: every message nsqd delivered to a Reader and nobody has answered yet.

Each connection keeps its own ``dict`` (id -> Message), filled by the read path and emptied by
FIN/REQ; the tracker holds those same dicts, so recording costs one dict store per message and
no extra call. Graceful close, ``stats()`` and auto-touch read it; ``wait_empty`` lets a closing
Reader wait for handlers to answer what they hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..message import Message

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["MessageTracker"]


class MessageTracker:
    """Messages in flight per connection. Lives on the Reader's event loop; no locks."""

    def __init__(self, on_waiters_changed: Callable[[], None] | None = None) -> None:
        self._ledgers: dict[Connection, dict[bytes, Message]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._on_waiters_changed = on_waiters_changed
        # messages that were in flight on a connection when it died (read through ``lost``)
        self._lost = 0

    def attach(self, conn: Connection) -> None:
        """Track ``conn``'s in-flight ledger (the very dict the connection fills: no copy)."""
        self._ledgers[conn] = conn.in_flight

    def detach(self, conn: Connection) -> list[Message]:
        """Forget a closed connection; return what it still had in flight (now unanswerable)."""
        ledger = self._ledgers.pop(conn, None)
        if not ledger:
            self.notify()
            return []
        orphans = list(ledger.values())
        ledger.clear()
        self._lost += len(orphans)
        self.notify()
        return orphans

    @property
    def lost(self) -> int:
        """Messages that were in flight on a connection when it died: nsqd redelivers them after
        its msg_timeout, and answers to them are no longer possible (``lost_on_disconnect``)."""
        return self._lost

    def __len__(self) -> int:
        return sum(map(len, self._ledgers.values()))

    def __iter__(self) -> Iterator[Message]:
        for ledger in list(self._ledgers.values()):
            yield from list(ledger.values())

    def __contains__(self, msg: object) -> bool:
        return isinstance(msg, Message) and any(
            ledger.get(msg.id) is msg for ledger in self._ledgers.values()
        )

    def items(self) -> list[tuple[Connection, Message]]:
        """Every (connection, message) pair in flight, as a snapshot."""
        return [(conn, msg) for conn, ledger in self._ledgers.items() for msg in ledger.values()]

    def messages(self) -> list[Message]:
        """Every message in flight, as a snapshot list."""
        return list(self)

    def per_connection(self) -> dict[str, int]:
        """How many messages each nsqd address has in flight (a new dict)."""
        return {conn.address: len(ledger) for conn, ledger in self._ledgers.items()}

    @property
    def has_waiters(self) -> bool:
        """True while some :meth:`wait_empty` call is waiting (a close waits for handlers)."""
        return bool(self._waiters)

    def notify(self) -> None:
        """Wake ``wait_empty`` callers if nothing is in flight any more."""
        if self._waiters and not len(self):
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_empty(self, timeout: float | None) -> bool:
        """Wait until every message is answered; False if ``timeout`` seconds passed first."""
        if not len(self):
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if self._on_waiters_changed is not None:
            self._on_waiters_changed()
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            return False
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
            if self._on_waiters_changed is not None:
                self._on_waiters_changed()
        return True
