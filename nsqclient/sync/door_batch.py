"""Publish coalescing at a thread door (``coalesce=True``): the PUBs threads queue while one is
on its way leave as one MPUB, written by the thread that holds the door.

Why here and not on the loop: the loop's coalescer (:mod:`nsqclient.aio.coalesce`) needs each
publish to cross to the loop thread and back, two wake-ups per publish, which cost more than
the MPUB saves. At a door (:mod:`.door`) the rule is the loop coalescer's own, applied where
threads write: a PUB while nothing of the door's is on its way goes at once, alone, as the PUB
it is; the publishes queued while it (or the last batch) is unanswered wait, and whoever
completes that one (a reading thread, or the loop) writes all of them at once, each topic's
PUBs as one MPUB (at most 64 KiB and ``max_body_size`` each, their deadlines within the
coalescer's tolerance of each other). So one thread publishing in a loop sends plain PUBs, and
sixteen send one PUB, then MPUBs of up to fifteen, one round trip apart.

Every publisher keeps its own outcome: an OK completes each; nsqd's refusal of a batch
(E_BAD_BODY, E_BAD_MESSAGE, E_MPUB_FAILED: nothing stored) sends each message again alone
through the Writer's resend path, so only the offending one fails with its own PUB's error;
anything else (a cut, no reply in time) fails each with its own copy of the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..aio.coalesce import copy_error, join_mpub, refused_whole, split_pub
from .ticket import Ticket
from .wakes import Waker, wake

__all__ = ["DoorBatch", "Resend", "group"]

_FULL = 1 << 16  # an MPUB body that goes alone at this size (as the loop coalescer's)
_INF = float("inf")

#: the Writer's resend path for what nsqd never ran: (waiter, deadline, data) each
Resend = Callable[[list[tuple[Any, float, bytes]]], None]


class DoorBatch:
    """One write of a coalescing door in the connection's reply FIFO: a PUB alone, or an MPUB
    of several tickets' PUBs; its reply completes each ticket (a SharedWaiter).

    Ended once (``_over``, changed under the door's guard): by a reading thread that took its
    OK off the FIFO (:meth:`acknowledged`), or by the loop (``set_result``/``set_exception``:
    an OK it read, an error frame, a cut, a timeout). Each ticket's own end is its own
    (:class:`~.ticket.Ticket`: settled once, whoever comes first).
    """

    __slots__ = ("_door", "_over", "count", "data", "deadline", "tickets")

    def __init__(self, door: Any, tickets: list[Ticket], data: bytes) -> None:
        self._door = door
        self.tickets = tickets
        self.count = sum(t.count for t in tickets)  # messages
        self.data = data
        self.deadline = min(t.deadline for t in tickets)
        self._over = False

    # -- SharedWaiter --

    def done(self) -> bool:
        return self._over

    def watched(self) -> bool:
        return any(t.waker is not None for t in self.tickets)

    def wake_reader(self) -> None:
        waker = self.next_waker()
        if waker is not None:
            wake(waker)

    def next_waker(self) -> Waker | None:
        """Whose thread reads for it when the turn passes (a waiting publisher's, if any)."""
        return next((t.waker for t in self.tickets if t.waker is not None), None)

    # -- a reading thread, holding the guard --

    def acknowledged_tickets(self) -> list[Ticket]:
        """Its OK, read by a publishing thread: its tickets, to be settled acknowledged (by
        :func:`.ticket.settle_acknowledged`); none if it ended already."""
        if self._over:
            return []
        self._over = True
        self._door.answered_locked()
        return self.tickets

    # -- the loop, outside the guard --

    def set_result(self, _reply: bytes, /) -> None:
        self._end(None)

    def set_exception(self, error: BaseException, /) -> None:
        if len(self.tickets) > 1 and refused_whole(error):
            self._split()
        else:
            self._end(error)

    def _over_now(self, split: bool = False) -> bool:
        door = self._door
        with door.guard:
            if self._over:
                return False
            self._over = True
            door.answered_locked()
            if split:
                door.split += 1
        return True

    def _end(self, error: BaseException | None) -> None:
        if not self._over_now():
            return
        for i, ticket in enumerate(self.tickets):
            if ticket.settle(error if error is None or not i else copy_error(error)):
                ticket.notify()
        self._door.write_waiting()

    def _split(self) -> None:
        """nsqd refused the MPUB, so stored none of it: each message goes again alone, as the
        Writer's own (its resend path: another connection, or this one's successor), the ones
        over nsqd's message size last. Each keeps its slot and settles itself."""
        if not self._over_now(split=True):
            return
        door = self._door
        limit = door.max_msg_size()
        good: list[tuple[Any, float, bytes]] = []
        bad: list[tuple[Any, float, bytes]] = []
        for ticket in self.tickets:
            ticket.door = None  # the loop matches its reply now
            body = split_pub(ticket.data)[1]
            (good if len(body) <= limit else bad).append((ticket, ticket.deadline, ticket.data))
        door.resend(good + bad)
        door.write_waiting()


class _Open:
    """A batch being gathered in :func:`group`, and its place among the writes."""

    __slots__ = ("at", "bodies", "prefix", "size", "tickets")

    def __init__(self, ticket: Ticket, prefix: bytes, body: memoryview, at: int) -> None:
        self.prefix = prefix
        self.tickets = [ticket]
        self.bodies: list[Any] = [body]
        self.size = 8 + len(body)  # the MPUB body: the count, then each size and body
        self.at = at


def group(door: Any, tickets: list[Ticket], half: float, max_body: int) -> list[DoorBatch]:
    """``tickets`` (claimed, in order) as the door's writes, in order of each write's first
    ticket: each topic's PUBs joined into MPUBs (deadlines within ``half`` of the batch's first,
    at most ``max_body`` and 64 KiB of MPUB body each); anything else (DPUB, MPUB) alone.
    Counts what it joined in ``door.batches`` and ``door.messages``."""
    out: list[DoorBatch | _Open] = []
    gathering: dict[bytes, _Open] = {}
    for ticket in tickets:
        data = ticket.data
        if not data.startswith(b"PUB "):
            out.append(DoorBatch(door, [ticket], data))
            continue
        prefix, body = split_pub(data)
        batch = gathering.get(prefix)
        if batch is not None:
            size = batch.size + 4 + len(body)
            if (
                size <= max_body
                and batch.size < _FULL
                and abs(ticket.deadline - batch.tickets[0].deadline) <= half
            ):
                batch.tickets.append(ticket)
                batch.bodies.append(body)
                batch.size = size
                continue
        gathering[prefix] = batch = _Open(ticket, prefix, body, len(out))
        out.append(batch)
    for i, item in enumerate(out):
        if isinstance(item, _Open):
            out[i] = _closed(door, item)
    return out  # type: ignore[return-value]  # every _Open closed above


def _closed(door: Any, batch: _Open) -> DoorBatch:
    tickets = batch.tickets
    if len(tickets) == 1:
        return DoorBatch(door, tickets, tickets[0].data)
    door.batches += 1
    door.messages += len(tickets)
    return DoorBatch(door, tickets, join_mpub(batch.prefix, batch.bodies, batch.size))
