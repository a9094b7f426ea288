"""Publishing threads reading their own replies, and waiting for them.

While threads publish on a shared connection, one waiting thread at a time reads it (the turn:
who reads is decided by :mod:`nsqclient.flow.turns`, and carried out here on the threads' side
and in :mod:`nsqclient.aio.sharing` on the loop's). The holder polls the socket and reads;
each OK that answers a reply any thread may complete (the facade's tickets and coalesced
batches) ends it right there, through the one matcher (:meth:`ReplyQueue.take_for_thread
<nsqclient.aio.replies.ReplyQueue.take_for_thread>`), a heartbeat is answered with a NOP
written in order with the threads' writes; anything else (an error frame, a reply to a
command of the loop's, the end of the stream, a damaged frame) goes back to the loop with the
rest of that read. The holder wakes every thread its read answered in one pass
(:func:`.wakes.wake_each`), resolves the futures it answered only once it let go of the turn
(their done callbacks may publish and block), and when it lets go the turn passes to the
thread whose reply is next, or back to the loop.

:func:`wait` is a blocking publish's whole wait: read where it may, else sleep on the thread's
:class:`~.wakes.Waker`, until its ticket ends or its deadline passes (then the ticket is
withdrawn: never sent, or maybe sent). :func:`wait_answer` is the same for a thread waiting in
a ``pub_nowait`` future's ``result()``, bounded by that call's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures._base import CANCELLED as _CANCELLED
from concurrent.futures._base import CANCELLED_AND_NOTIFIED as _CANCELLED_AND_NOTIFIED
from concurrent.futures._base import FINISHED as _FINISHED
from typing import TYPE_CHECKING, Any, Final

from ..errors import NSQError, NSQTimeoutError, ProtocolError
from ..flow.turns import CLOSE_SOCKET, RESUME, WAKE, Head, Turn
from ..protocol.frames import OK, OK_FRAME, Event
from .ticket import DONE, QUEUED, Ticket, resolve, settle_acknowledged
from .wakes import Waker, wake_each

if TYPE_CHECKING:
    from .door import Door

__all__ = ["leave", "read_for", "release", "wait", "wait_answer"]

_monotonic = time.monotonic
_OPEN: Final = Turn.OPEN
_NONE: Final = Head.NONE
_SLICE: Final = 0.1  # the longest single poll (a waiting thread looks at its deadline in between)
_ONE_OK: Final[list[Event]] = [OK]
#: a future's states once resolved (read without its lock: they are final)
_RESOLVED: Final = frozenset({_FINISHED, _CANCELLED, _CANCELLED_AND_NOTIFIED})


def read_for(door: Door, me: Ticket, remaining: float, took: bool = False) -> bool:
    """Read replies in the calling thread until ``me`` ended, a slice of ``remaining`` passed,
    or reading had to go back to the loop; False (nothing done) when the turn was not free.
    ``took``: the thread holds the turn already (it took it with its write)."""
    shared = door.shared
    guard = door.guard
    turns = shared.turns
    if not took:
        # a look without the guard first (from many threads, the turn is usually held): a
        # stale look only makes this thread sleep on its waker, which the holder or the loop
        # wakes when the turn is free for its reply (flow.turns, invariant 7)
        if turns.state is not _OPEN:
            return False
        with guard:
            took = turns.take()
        if not took:
            return False
    replies = shared.replies
    view = door.view
    buffer = door.buffer
    decoder = shared.decoder
    plain = shared.plain  # (TLS, compression: every read is decoded first)
    wait = remaining if remaining < _SLICE else _SLICE
    end = 0.0
    held = True  # this thread holds the turn (until it lets go, below)
    actions = 0
    handed: list[Event] | None = None
    wake: Waker | None = None
    later: list[Ticket] = []  # futures answered: resolved once the turn is let go
    beats_due = 0  # heartbeats read, answered once the guard is let go (the wire comes first)
    try:
        while held:
            n = shared.read(view, wait)
            if n <= 0:  # nothing within the slice (0), or the stream ended or broke (-1)
                with guard:
                    if n < 0:
                        actions = turns.hand_back()
                    else:
                        actions, wake = _release_locked(door, me)
                    held = False
                break
            if n == 10 and plain and buffer.startswith(OK_FRAME) and not decoder.buffered:
                lone = True  # one OK alone: no decoding
            else:
                try:
                    events = shared.decode(view[:n].tobytes())
                except ProtocolError as exc:
                    with guard:
                        actions = turns.hand_back()
                        held = False
                    shared.damaged(exc)
                    break
                # (TLS, compression: the bytes are never an OK frame's; decoded, they may be)
                lone = not plain and len(events) == 1 and events[0] is OK
            if lone:
                # when the OK is this thread's own, a script's whole round trip ends here
                now = turns.last_read  # (read's own clock)
                guard.acquire()  # (not `with`: a script's every publish; see Window.take)
                try:
                    left = replies.take_lone_ok(me, now)
                    mine = left >= 0
                    if mine:
                        door.read += 1
                        if left:
                            actions, wake = _release_locked(door, me)
                        else:  # nothing else pending (a script's publish): the turn stays
                            actions = turns.release(_NONE)  # open
                        held = False
                finally:
                    guard.release()
                if mine:
                    if me.settle(None) and me.future is not None:
                        later.append(me)  # (resolved once the turn is let go, below)
                    break
                events = _ONE_OK
            now = turns.last_read  # (read's own clock)
            done: list[Any] = []
            acked: list[Ticket] = []
            with guard:
                beats, stop = replies.take_for_thread(events, now, done)
                if beats:
                    shared.heartbeats_locked(beats)
                    beats_due += beats
                if done:  # Tickets and DoorBatches: SharedWaiters of this facade
                    acked = settle_acknowledged(done)
                    door.read += len(acked)
                if stop < len(events):
                    handed = events[stop:]
                    actions = turns.hand_back()
                    held = False
                elif me.state is DONE or turns.reclaim or turns.closing:
                    actions, wake = _release_locked(door, me)
                    held = False
            if beats_due:
                with door.wired:
                    shared.answer_heartbeats_wired(beats_due)
                beats_due = 0
            if acked:
                _notify(acked, me, later)
            if held:
                if not end:
                    end = now + wait
                wait = end - _monotonic()
                if wait <= 0:  # the slice passed: the caller looks at its deadline
                    with guard:
                        actions, wake = _release_locked(door, me)
                        held = False
    except BaseException:  # (interrupted, or a bug): the turn goes back, never stranded
        if held:
            with guard:
                actions = turns.hand_back()
            shared.act(actions)
        raise
    if actions & (RESUME | CLOSE_SOCKET):
        shared.act(actions, handed)
    if wake is not None:
        wake.wake()
    if door.queue:  # queued while this thread held the wire (answering heartbeats)
        door.write_queued()
    for ticket in later:
        if ticket is me:  # its own future: resolved here, no wake-up byte to itself
            resolve(ticket.future, ticket.error)  # type: ignore[arg-type]
        else:
            ticket.notify()
    return True


def release(door: Door, me: Ticket) -> None:
    """Let go of a turn this thread took and did not read with."""
    with door.guard:
        actions, wake = _release_locked(door, me)
    if actions & (RESUME | CLOSE_SOCKET):
        door.shared.act(actions)
    if wake is not None:
        wake.wake()
    door.write_waiting()


def _release_locked(door: Door, me: Ticket) -> tuple[int, Waker | None]:
    """Let go of the turn (holding the guard): what to do, and whom to wake."""
    shared = door.shared
    head = shared.replies.head()
    kind = shared.head_kind(head, me)
    actions = shared.turns.release(kind)
    if actions & WAKE and head is not None:
        waiter: Any = head[0]  # (WAITED: a ticket or batch of this facade)
        return actions, waiter.next_waker()
    return actions, None


def _notify(acked: list[Ticket], me: Ticket, later: list[Ticket]) -> None:
    """The tickets a read answered: blocked threads woken in one pass (``me`` needs no
    wake-up), futures put in ``later``."""
    blocked: list[Waker] = []
    for ticket in acked:
        if ticket.future is not None:
            later.append(ticket)
        elif ticket is not me and ticket.waker is not None:
            blocked.append(ticket.waker)
    if blocked:
        wake_each(blocked)


def leave(door: Door) -> None:
    """A thread stopped waiting unanswered. If nobody holds the turn and the reply at the
    head is still to be delivered with nobody reading for it (a future whose ``result()``
    gave up), the loop reads it now. A withdrawn publish's reply only takes its place: the
    next thread to read, or the loop within :data:`~nsqclient.flow.turns.IDLE`, reads it."""
    shared = door.shared
    actions = 0
    with door.guard:
        turns = shared.turns
        head = shared.replies.head()
        if (
            turns.state is Turn.OPEN
            and head is not None
            and not head[0].done()
            and shared.head_kind(head, None) is Head.UNWATCHED
        ):
            actions = turns.unwatched()
    if actions:
        shared.act(actions)
    door.write_waiting()


def wait(ticket: Ticket, took: bool, not_sent: Callable[[], BaseException]) -> None:
    """Block until ``ticket`` ended (raising its error) or its deadline passed: then it is
    withdrawn, and raises ``not_sent()`` if it was never written (safe to retry), else
    NSQTimeoutError (maybe stored). ``took``: this thread holds the turn (it took it with
    its write). Interrupted (Ctrl-C), the ticket is withdrawn the same way."""
    door = ticket.door
    waker = ticket.waker
    assert waker is not None
    deadline = ticket.deadline
    try:
        while ticket.state is not DONE:
            remaining = deadline - _monotonic()
            if remaining <= 0:
                break
            if door is not None:
                if ticket.state is QUEUED:  # a coalescing door holds it, or the guard was busy
                    door.write_queued()
                if read_for(door, ticket, remaining, took):
                    took = False
                    continue
                took = False
            waker.wait(remaining)
    except BaseException:
        ticket.withdraw(_interrupted())
        if door is not None:
            if took:
                release(door, ticket)
            leave(door)
        raise
    if took and door is not None:  # (it ended, or its time passed, before this thread read)
        release(door, ticket)
    if ticket.state is not DONE:
        error = ticket.withdraw(not_sent())
        if door is not None:
            if isinstance(error, NSQTimeoutError) and error.sent:
                door.shared.overdue()  # no timer saw it: let the loop look now
            leave(door)
    else:
        error = ticket.error
    if error is not None:
        raise error


def wait_answer(ticket: Ticket, end: float, waker: Waker) -> None:
    """A thread waits in a ``pub_nowait`` future's ``result()`` until ``end``: it reads the
    reply itself where it may, as a blocking publish does, else sleeps on ``waker`` (the
    ticket's while it waits, so that the turn passes to it), until the future is resolved:
    whoever ends the ticket resolves the future, then wakes this thread (the order of
    :meth:`Ticket.notify <.ticket.Ticket.notify>`)."""
    door = ticket.door
    future = ticket.future
    assert future is not None
    watching = False  # the waker set on the ticket (only before this thread sleeps: a thread
    # that reads its own reply needs no wake-up)
    try:
        while future._state not in _RESOLVED:
            remaining = end - _monotonic()
            if remaining <= 0:
                break
            if door is not None and ticket.state is not DONE:
                if ticket.state is QUEUED:
                    door.write_queued()
                if read_for(door, ticket, remaining):
                    continue
            if not watching:
                watching = True
                if ticket.watch(waker):  # ended meanwhile: resolved, or about to be
                    continue  # (its notifier sees the waker now, or saw the end first)
            waker.wait(remaining)
    finally:
        if watching and ticket.state is not DONE:
            ticket.watch(None)  # (ended: a wake-up byte left only costs a second look)
        if ticket.state is not DONE and door is not None:
            leave(door)  # the turn must not pass to no one


def _interrupted() -> NSQError:
    from ..errors import NotSentTimeoutError

    return NotSentTimeoutError("the publish was interrupted before it was written; never sent")
