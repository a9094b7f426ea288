"""What a Writer does after nsqd refuses a publish: resend what nsqd never ran, learn its limits.

nsqd closes the connection after a fatal error frame; the publishes pipelined behind the refused
one were never executed, so sending them again cannot duplicate. :class:`Backlog` sends them
through the Writer's one dispatch (another connection or the HTTP fallback), or keeps them
until a connection comes back or their own deadline passes (then they fail with
:class:`~nsqclient.errors.NoConnectionsError`, saying that retrying is safe). One timer, armed
for the earliest deadline, fails expired ones.

:func:`learn_limit` reads nsqd's size limit out of E_BAD_MESSAGE / E_BAD_BODY so larger bodies
are refused locally from then on instead of costing a connection each.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
from collections.abc import Callable, Iterable

from ..errors import ClosedError, NoConnectionsError, ServerError
from .connection import Pending, ReplyWaiter

__all__ = ["Backlog", "Dispatch", "learn_limit"]

#: the Writer's dispatch: send (waiter, data, count, timeout) on a connection or over HTTP;
#: False if neither is available now. The slot and the accounting stay the original publish's.
Dispatch = Callable[[ReplyWaiter, bytes, int, float], bool]

log = logging.getLogger("nsqclient.writer")

#: "PUB message too big 2048 > 1024", "MPUB body too big ...": what nsqd's limit is
_TOO_BIG = re.compile(r"too big \d+ > (\d+)")


class Backlog:
    """Publishes nsqd never executed, on their way to another connection.

    ``send`` is the Writer's dispatch (:data:`Dispatch`): the same connection choice and HTTP
    fallback as every first send, no second admission (each item still holds the slot it was
    admitted with, and its waiter settles it). ``closed()`` says the Writer refuses publishes
    now (each kept one then fails with ClosedError).
    """

    def __init__(self, *, send: Dispatch, closed: Callable[[], bool]) -> None:
        self._send = send
        self._closed = closed
        self._items: collections.deque[Pending] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self.resent = 0  # publishes sent again after nsqd refused one pipelined ahead of them

    def __bool__(self) -> bool:
        return bool(self._items)

    def resend(self, loop: asyncio.AbstractEventLoop, commands: Iterable[Pending] = ()) -> None:
        """Send ``commands`` and any kept from before, or keep them for the next connection."""
        now = loop.time()
        items = [*self._items, *commands]
        self._items.clear()
        for item in items:
            waiter, deadline, data = item
            if waiter.done():
                continue
            if deadline <= now:
                waiter.set_exception(_not_sent())
                continue
            if self._closed():
                waiter.set_exception(
                    ClosedError("the Writer was closed before this publish could be sent")
                )
                continue
            if not self._send(waiter, data, _publish_count(data), deadline - now):
                self._items.append(item)
                continue
            self.resent += 1
        self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._items:
            first = min(deadline for _w, deadline, _d in self._items)
            if first != float("inf"):
                self._timer = loop.call_at(first, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self._items:
            self.resend(loop)  # fails the expired, keeps the rest


def learn_limit(error: ServerError, max_msg_size: int, max_body_size: int) -> tuple[int, int]:
    """The limits (message, MPUB body) after nsqd's ``error``: lowered when it names a smaller
    one (logged once per change), else unchanged."""
    found = _TOO_BIG.search(error.text)
    if found is None or error.code not in ("E_BAD_MESSAGE", "E_BAD_BODY"):
        return max_msg_size, max_body_size
    limit = int(found.group(1))
    if error.code == "E_BAD_BODY" and "MPUB" in error.text:
        if limit < max_body_size:
            max_body_size = limit
            log.warning(
                "nsqd %s accepts MPUB bodies of at most %d bytes (its --max-body-size); "
                "larger batches are now refused before sending",
                error.address,
                limit,
            )
    elif error.code == "E_BAD_MESSAGE" and limit < max_msg_size:
        max_msg_size = limit
        log.warning(
            "nsqd %s accepts messages of at most %d bytes (its --max-msg-size); larger "
            "bodies are now refused before sending",
            error.address,
            limit,
        )
    return max_msg_size, max_body_size


def _publish_count(data: bytes) -> int:
    """How many messages an encoded publish carries (MPUB's count field; else one)."""
    if data.startswith(b"MPUB "):
        start = data.index(b"\n") + 5
        return int.from_bytes(data[start : start + 4], "big")
    return 1


def _not_sent() -> NoConnectionsError:
    return NoConnectionsError(
        "this publish was never executed by nsqd (it was queued behind one nsqd refused) and "
        "no connection came back before its timeout; it was not published, so retrying is safe"
    )
