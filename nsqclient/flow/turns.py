"""Who reads a connection shared with publishing threads: the loop or one thread, decided here.

A Writer connection of the blocking facade is read by whoever can complete what comes back.
The loop reads while its own replies are due (an asyncio publish, SUB, anything a coroutine
awaits) and whenever no publishing thread reads; while threads publish, one waiting thread at
a time reads (the *turn*), so a blocking publish costs the one wake-up its reply causes. This
module decides whose turn it is. It never reads, locks, sleeps or looks at a clock: the caller
(:mod:`nsqclient.aio.sharing` on the loop side, :mod:`nsqclient.sync.reading` on the threads')
holds the connection's guard around every call, passes ``now``, and carries out the actions
returned, in the order of this table:

===============  =====================================  =========================================
state            who reads                              left by
===============  =====================================  =========================================
``LOOP``         the loop (its transport's reading on)  ``read_ended`` (a thread waits: OPEN)
``OPEN``         nobody; the next waiting thread may    ``take`` (HELD), ``loop_command`` and
                 take the turn (transport paused)       ``idle`` (LOOP), ``unwatched`` and
                                                        ``write_failed`` (HANDING_BACK), ``close``
``HELD``         one publishing thread                  ``release``, ``hand_back`` (OPEN,
                                                        HANDING_BACK, or CLOSED if closing)
``HANDING_BACK`` nobody: the loop's resume is on its    ``resumed`` (LOOP), ``close`` (CLOSED)
                 way (a thread cannot resume the
                 transport itself)
``CLOSED``       nobody, ever again                     (final)
===============  =====================================  =========================================

Events: from the loop, ``settled_for_thread`` (it completed a reply a thread waits for: the
threads are publishing), ``read_ended`` (the end of one of its reads), ``loop_command`` (it
sent a command only it may complete), ``idle`` (its idle timer), ``resumed`` (a thread's
hand-back reached it) and ``close``; from a thread, ``take``, ``read``, ``release`` (with what
heads the reply FIFO then: see :class:`Head`), ``hand_back`` (a frame it may not complete, the
stream's end, damage), ``unwatched`` (it stopped waiting for the head reply) and
``write_failed``.

Actions (bits of the returned int): ``PAUSE`` (loop: pause the transport's reading),
``RESUME`` (resume it: at once when the event came from the loop, through the loop's
call-soon from a thread), ``ARM_IDLE`` (loop: look again in :data:`IDLE` seconds), ``WAKE``
(wake the thread whose reply heads the FIFO: it reads next) and ``CLOSE_SOCKET`` (close the
threads' socket: nobody holds the turn).

Invariants, after every event (tests/flow/test_flow_turns.py checks each, over every order):

1. At most one reader: the transport reads only in ``LOOP``, a thread only in ``HELD``.
2. In ``HANDING_BACK`` exactly one resume is on its way to the loop; in no other state is one.
3. After a failed write, threads never get the turn again (``OPEN`` is never entered).
4. ``CLOSE_SOCKET`` is returned exactly once, when the state becomes ``CLOSED``, and never while
   a thread holds the turn (the holder gets it when it lets go): the socket is never closed under
   a reading thread, and never left open.
5. While threads may read and none does (``OPEN``), the idle timer is armed: within
   :data:`IDLE` of the last thread read the loop reads again, so heartbeats are always answered.
6. After ``loop_command`` the threads get no turn while its reply may be pending: ``OPEN`` is
   entered only once the hold has passed or none of the loop's own replies is pending.
7. No reply is stranded: whenever the turn becomes the threads' (``read_ended``, ``release``)
   with another thread's reply at the head, that thread is woken; a ``release`` with a reply
   nobody waits for (the loop's, an unwatched future's) hands reading back to the loop.
"""

from __future__ import annotations

import enum

__all__ = [
    "ARM_IDLE",
    "CLOSE_SOCKET",
    "HOLD",
    "IDLE",
    "PAUSE",
    "RESUME",
    "WAKE",
    "Head",
    "ReadTurns",
    "Turn",
]

#: seconds without a thread reading after which the loop reads again (well under nsqd's
#: heartbeat interval, so a heartbeat is answered within this)
IDLE = 0.25
#: seconds the loop keeps reading after a command of its own, unless its replies came first
HOLD = 1.0

# actions: bits of the int every event returns (ints, not an enum.Flag: this is per publish)
PAUSE = 1
RESUME = 2
ARM_IDLE = 4
WAKE = 8
CLOSE_SOCKET = 16


class Turn(enum.Enum):
    """Whose turn it is to read the shared connection (see the module's table)."""

    LOOP = "loop"
    OPEN = "open"
    HELD = "held"
    HANDING_BACK = "handing back"
    CLOSED = "closed"


class Head(enum.Enum):
    """What heads the reply FIFO when a thread lets go of the turn."""

    NONE = "none"  # nothing pending
    MINE = "mine"  # the releasing thread's own reply, not come yet
    WAITED = "waited"  # another thread's, and that thread waits for it
    UNWATCHED = "unwatched"  # the loop's own, or a future's nobody waits on: the loop reads it


_LOOP, _OPEN, _HELD, _BACK, _CLOSED = Turn


class ReadTurns:
    """The turn of one shared connection. Not thread-safe by itself: every call is made
    holding the connection's guard (:mod:`nsqclient.aio.sharing`), which is its one lock."""

    __slots__ = ("closing", "failed", "hold_until", "last_read", "reclaim", "state", "want")

    def __init__(self) -> None:
        self.state = _LOOP
        #: the loop completed a reply a thread waits for: pass the turn at the end of this read
        self.want = False
        #: the loop reads its own replies until this time (or until none of them is pending)
        self.hold_until = 0.0
        #: the loop asked for reading back while a thread held the turn
        self.reclaim = False
        #: a thread's write met a broken socket: threads read no more on this connection
        self.failed = False
        #: the connection is gone: whoever holds the turn last closes the threads' socket
        self.closing = False
        self.last_read = 0.0  # when a thread last read (or the turn opened)

    # -- the loop --

    def settled_for_thread(self) -> None:
        """The loop completed a reply that a waiting thread was reading for."""
        if self.state is _LOOP:
            self.want = True

    def read_ended(self, now: float, own_pending: bool, head: Head) -> int:
        """The end of one of the loop's reads (``own_pending``: a reply only the loop may
        complete is pending; ``head``: what heads the reply FIFO): PAUSE | ARM_IDLE when the
        turn passes to the threads, and WAKE when a thread waits for the next reply (it went
        to sleep while the loop read: nobody else would tell it the turn is free)."""
        if self.state is not _LOOP or not self.want:
            self.want = False
            return 0
        self.want = False
        if self.failed or self.closing or (own_pending and now < self.hold_until):
            return 0
        self.hold_until = 0.0
        self.state = _OPEN
        self.last_read = now
        return PAUSE | ARM_IDLE | WAKE if head is Head.WAITED else PAUSE | ARM_IDLE

    def loop_command(self, now: float) -> int:
        """The loop sent a command of its own: it reads (RESUME, at once) and holds reading
        until its replies came or :data:`HOLD` passed."""
        state = self.state
        if state is _CLOSED:
            return 0
        self.hold_until = now + HOLD
        self.want = False
        if state is _OPEN:
            self.state = _LOOP
            return RESUME
        if state is _HELD:
            self.reclaim = True  # the holder hands back when it looks next
        return 0

    def idle(self, now: float) -> int:
        """The loop's idle timer: RESUME (at once) when no thread read for :data:`IDLE`,
        else ARM_IDLE while threads may read."""
        state = self.state
        if state is _OPEN:
            if now - self.last_read >= IDLE:
                self.state = _LOOP
                return RESUME
            return ARM_IDLE
        if state is _HELD:
            return ARM_IDLE
        return 0

    def resumed(self) -> None:
        """A thread's hand-back reached the loop: it reads again."""
        if self.state is _BACK:
            self.state = _LOOP

    def close(self) -> int:
        """The connection is gone: CLOSE_SOCKET now, or by the holder when it lets go."""
        self.closing = True
        state = self.state
        if state is _HELD or state is _CLOSED:
            return 0
        self.state = _CLOSED
        return CLOSE_SOCKET

    # -- a publishing thread --

    def take(self) -> bool:
        """A waiting thread takes the turn: True if it now reads."""
        if self.state is _OPEN:
            self.state = _HELD
            return True
        return False

    def read(self, now: float) -> None:
        """The holder read (for the idle check)."""
        self.last_read = now

    def hand_back(self) -> int:
        """The holder gives reading to the loop (RESUME, through the loop), or CLOSE_SOCKET
        when the connection closed meanwhile."""
        self.reclaim = False
        if self.closing:
            self.state = _CLOSED
            return CLOSE_SOCKET
        self.state = _BACK
        return RESUME

    def release(self, head: Head) -> int:
        """The holder lets go, ``head`` heading the reply FIFO: OPEN (WAKE when another
        thread's reply is next), a hand-back (RESUME) when the loop asked or nobody waits for
        the next reply, CLOSE_SOCKET when the connection closed meanwhile."""
        if self.closing or self.reclaim or self.failed or head is Head.UNWATCHED:
            return self.hand_back()
        self.state = _OPEN
        return WAKE if head is Head.WAITED else 0

    def unwatched(self) -> int:
        """A thread stopped waiting for the reply at the head and no one holds the turn:
        the loop must read it (RESUME, through the loop)."""
        if self.state is _OPEN:
            self.state = _BACK
            return RESUME
        return 0

    def write_failed(self) -> int:
        """A thread's write met a broken socket: the loop reads what nsqd sent before the
        end, and threads read no more here."""
        self.failed = True
        state = self.state
        if state is _OPEN:
            self.state = _BACK
            return RESUME
        if state is _HELD:
            self.reclaim = True
        return 0

    def __repr__(self) -> str:
        return f"<ReadTurns {self.state.value}{' failed' if self.failed else ''}>"
