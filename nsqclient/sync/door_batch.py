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

from typing import TYPE_CHECKING, Any

from ..aio.coalesce import copy_error, join_mpub, refused_whole, split_pub

if TYPE_CHECKING:
    from .door import ThreadWrites
    from .publish import PublishTicket

__all__ = ["DoorBatch", "group"]

_DONE = 2  # PublishTicket's state (sync.publish)
_FULL = 1 << 16  # an MPUB body that goes alone at this size (as the loop coalescer's)
_INF = float("inf")


class DoorBatch:
    """One write of a coalescing door in the connection's pending FIFO: a PUB alone, or an MPUB
    of several tickets' PUBs; its reply completes each ticket (a ReplyWaiter for the loop)."""

    __slots__ = (
        "_door",
        "_on_sent_done",
        "_waker",
        "count",
        "data",
        "deadline",
        "state",
        "tickets",
        "width",
    )

    def __init__(self, door: ThreadWrites, tickets: list[PublishTicket], data: bytes) -> None:
        self._door = door
        self.tickets = tickets
        self.width = len(tickets)  # tickets, for the door's counts
        self.count = sum(t.count for t in tickets)  # messages
        self.data = data
        self.deadline = min(t.deadline for t in tickets)
        self.state = 0
        self._on_sent_done = None  # (a ticket's field: a batch settles its tickets itself)
        #: whose thread reads for it when the baton passes (a blocking publisher's, if any)
        self._waker = next((t._waker for t in tickets if t._waker is not None), None)

    # -- a reading thread completes it (the door's lock held while it matched the OK) --

    def complete_ok(self, me: Any, later: list[Any], blocked: list[Any]) -> None:
        """Acknowledged, read by a publishing thread (``me``): its blocking publishes done and
        their threads' wakers put in ``blocked`` (the reader wakes them all in one pass), its
        futures put in ``later`` (resolved once the reader let go of the baton)."""
        self.state = _DONE
        for ticket in self.tickets:
            if ticket.future is not None:  # (me too: a PublishFuture's result() reading)
                later.append(ticket)
            elif ticket.state != _DONE:  # a blocking publish (PublishTicket.complete)
                ticket.error = None
                ticket.state = _DONE
                if ticket is not me:  # the reading thread's own: no wake-up
                    blocked.append(ticket._waker)

    # -- ReplyWaiter: the loop completes it (an OK it read, an error frame, a cut, a timeout) --

    def done(self) -> bool:
        return self.state == _DONE

    def set_result(self, _reply: bytes, /) -> None:
        self._finish(None)

    def set_exception(self, error: BaseException, /) -> None:
        if self.width > 1 and refused_whole(error):
            self._split()
        else:
            self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        self.state = _DONE
        door = self._door
        door.answered(self.width)
        settle = door._settle_writer
        blocking = False
        for i, ticket in enumerate(self.tickets):
            settle(ticket.count, error)
            blocking = blocking or ticket._waker is not None
            ticket.complete(error if error is None or not i else copy_error(error))
        if error is None and blocking and not door.reading:
            door._switch = True  # threads may read from the end of this read (see .baton)
        door.after_answer()

    def _split(self) -> None:
        """nsqd refused the MPUB, so stored none of it: each message goes again alone, as the
        Writer's own (its resend path: another connection, or this one's successor), the ones
        over nsqd's message size last."""
        self.state = _DONE
        door = self._door
        writer = door._writer
        door.answered(self.width)
        door.split += 1
        co = writer._coalesce
        limit = _INF if co is None else co.max_msg_size
        good: list[Any] = []
        bad: list[Any] = []
        for ticket in self.tickets:
            ticket._door = None  # the loop matches its reply now
            ticket._on_sent_done = writer._publish_done
            writer._outstanding += 1  # the Writer's slot now, given back when it settles
            body = split_pub(ticket.data)[1]
            (good if len(body) <= limit else bad).append((ticket, ticket.deadline, ticket.data))
        writer._resend(good + bad)
        door.after_answer()


class _Open:
    """A batch being gathered in :func:`group`, and its place among the writes."""

    __slots__ = ("at", "bodies", "prefix", "size", "tickets")

    def __init__(self, ticket: PublishTicket, prefix: bytes, body: memoryview, at: int) -> None:
        self.prefix = prefix
        self.tickets = [ticket]
        self.bodies: list[Any] = [body]
        self.size = 8 + len(body)  # the MPUB body: the count, then each size and body
        self.at = at


def group(
    door: ThreadWrites, tickets: list[PublishTicket], half: float, max_body: int
) -> list[DoorBatch]:
    """``tickets`` (claimed, in order) as the door's writes, in order of each write's first
    ticket: each topic's PUBs joined into MPUBs (deadlines within ``half`` of the batch's first,
    at most ``max_body`` and 64 KiB of MPUB body each); anything else (DPUB, MPUB) alone."""
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


def _closed(door: ThreadWrites, batch: _Open) -> DoorBatch:
    tickets = batch.tickets
    if len(tickets) == 1:
        return DoorBatch(door, tickets, tickets[0].data)
    door.batches += 1
    door.messages += len(tickets)
    return DoorBatch(door, tickets, join_mpub(batch.prefix, batch.bodies, batch.size))
