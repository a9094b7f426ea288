"""Who reads a shared connection (nsqclient.flow.turns), over every order of events.

A hypothesis state machine drives :class:`ReadTurns` as the loop and four publishing threads
would, carrying out each action the way :mod:`nsqclient.aio.sharing` and
:mod:`nsqclient.sync.reading` do (the loop applies its own at once; a thread's RESUME reaches
the loop later, as a call-soon), with a clock that moves on its own. After every step it checks
the module's numbered invariants against what it observed, not against the machine's word.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nsqclient.flow.turns import (
    ARM_IDLE,
    CLOSE_SOCKET,
    HOLD,
    IDLE,
    PAUSE,
    RESUME,
    WAKE,
    Head,
    ReadTurns,
    Turn,
)

pytestmark = pytest.mark.timeout(120)

THREADS = range(4)
HEADS = st.sampled_from(list(Head))


class TurnsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.turns = ReadTurns()
        self.now = 100.0
        self.reading = True  # the transport reads (the loop's turn)
        self.holder: int | None = None  # the thread reading
        self.resumes = 0  # RESUMEs a thread sent the loop, not run yet
        self.closed_sockets = 0
        self.idle_armed = False
        self.failed = False
        self.own_pending = False  # a reply only the loop may complete is pending
        self.hold_until = 0.0  # the loop's hold after its last command, as the model keeps it
        self.woken: list[int] = []

    # -- carrying out actions --

    def _loop_acts(self, actions: int) -> None:
        """The loop applies its own actions at once (aio.sharing._apply_loop)."""
        assert not actions & CLOSE_SOCKET or self.holder is None, "closed under a reader"
        if actions & PAUSE:
            assert self.reading, "paused a transport that was not reading"
            self.reading = False
        if actions & RESUME:
            self.reading = True
        if actions & ARM_IDLE:
            self.idle_armed = True
        if actions & CLOSE_SOCKET:
            self.closed_sockets += 1

    def _thread_acts(self, actions: int) -> None:
        """A thread's actions (sync.reading): RESUME goes to the loop as a call-soon."""
        assert not actions & (PAUSE | ARM_IDLE), "a thread cannot touch the transport"
        if actions & RESUME:
            self.resumes += 1
        if actions & CLOSE_SOCKET:
            self.closed_sockets += 1

    # -- the loop --

    @rule()
    def loop_settles_a_thread_publish(self) -> None:
        self.turns.settled_for_thread()

    @precondition(lambda self: self.reading and self.turns.state is not Turn.CLOSED)
    @rule(head=HEADS)
    def loop_read_ends(self, head: Head) -> None:
        own = self.own_pending
        before = self.turns.state
        actions = self.turns.read_ended(self.now, own, head)
        self._loop_acts(actions)
        if self.turns.state is Turn.OPEN and before is not Turn.OPEN:
            # invariant 6: the threads get the turn only once the loop's own replies came or
            # its hold passed; invariant 3: never after a failed write
            assert not own or self.now >= self.hold_until
            assert not self.failed
            # invariant 7: a thread waiting for the next reply is told
            assert bool(actions & WAKE) == (head is Head.WAITED)

    @precondition(lambda self: self.reading and self.turns.state is not Turn.CLOSED)
    @rule(head=HEADS)
    def loop_completes_a_thread_publish_and_its_read_ends(self, head: Head) -> None:
        """The common way the turn passes (both events of one read)."""
        self.turns.settled_for_thread()
        self.loop_read_ends(head)

    @rule()
    def loop_sends_its_own_command(self) -> None:
        if self.turns.state is not Turn.CLOSED:
            self.hold_until = self.now + HOLD
            self.own_pending = True  # its reply is pending until the loop reads it
        self._loop_acts(self.turns.loop_command(self.now))

    @rule()
    def the_loops_own_replies_came(self) -> None:
        self.own_pending = False

    @precondition(lambda self: self.idle_armed)
    @rule()
    def idle_timer_fires(self) -> None:
        self.idle_armed = False
        before = self.turns.state
        actions = self.turns.idle(self.now)
        self._loop_acts(actions)
        if before is Turn.OPEN and self.turns.state is Turn.LOOP:
            assert actions & RESUME

    @precondition(lambda self: self.resumes > 0)
    @rule()
    def loop_runs_a_resume(self) -> None:
        self.resumes -= 1
        if self.turns.state is Turn.CLOSED:
            return  # aio.sharing._resume: nothing to do on a closed connection
        self.turns.resumed()
        if self.turns.state is Turn.LOOP:
            self.reading = True

    @rule(rare=st.integers(0, 9))
    def connection_closes(self, rare: int) -> None:
        if rare:
            return  # (one in ten: a closed connection ends the interesting part of a run)
        self._loop_acts(self.turns.close())

    # -- the threads --

    @precondition(lambda self: self.holder is None)
    @rule(thread=st.sampled_from(THREADS))
    def thread_takes(self, thread: int) -> None:
        was_open = self.turns.state is Turn.OPEN
        took = self.turns.take()
        assert took == was_open
        if took:
            assert not self.reading, "a thread took the turn while the loop reads"
            self.holder = thread

    @precondition(lambda self: self.holder is not None)
    @rule()
    def holder_reads(self) -> None:
        self.turns.read(self.now)

    @precondition(lambda self: self.holder is not None)
    @rule()
    def holder_hands_back(self) -> None:
        self.holder = None
        self._thread_acts(self.turns.hand_back())

    @precondition(lambda self: self.holder is not None)
    @rule(head=HEADS)
    def holder_releases(self, head: Head) -> None:
        turns = self.turns
        asked = turns.reclaim or turns.failed or turns.closing
        self.holder = None
        actions = turns.release(head)
        self._thread_acts(actions)
        if not asked:  # invariant 7: no reply is stranded
            if head is Head.WAITED:
                assert actions & WAKE and turns.state is Turn.OPEN
            elif head is Head.UNWATCHED:
                assert actions & RESUME
            else:
                assert turns.state is Turn.OPEN and not actions
        else:
            assert actions & (RESUME | CLOSE_SOCKET)

    @precondition(lambda self: self.holder is None)
    @rule()
    def a_thread_stops_waiting_for_the_next_reply(self) -> None:
        """(sync.reading.leave: only when nobody waits for the head reply any more)"""
        was_open = self.turns.state is Turn.OPEN
        actions = self.turns.unwatched()
        self._thread_acts(actions)
        if was_open:  # invariant 7: nobody would read it otherwise
            assert actions & RESUME

    @rule(rare=st.integers(0, 9))
    def a_thread_write_fails(self, rare: int) -> None:
        if rare:
            return  # (one in ten, as closing)
        self.failed = True
        self._thread_acts(self.turns.write_failed())

    @rule(dt=st.sampled_from([0.0, 0.01, IDLE / 2, IDLE, HOLD]))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    # -- the invariants --

    @invariant()
    def at_most_one_reader(self) -> None:  # 1
        state = self.turns.state
        if state is Turn.CLOSED:
            return
        assert self.reading == (state is Turn.LOOP)
        assert (self.holder is not None) == (state is Turn.HELD)

    @invariant()
    def one_resume_on_its_way_when_handing_back(self) -> None:  # 2
        if self.turns.state is Turn.HANDING_BACK:
            assert self.resumes == 1
        elif self.turns.state is not Turn.CLOSED:
            assert self.resumes == 0

    @invariant()
    def no_turn_after_a_failed_write(self) -> None:  # 3
        if self.failed:
            assert self.turns.state is not Turn.OPEN

    @invariant()
    def the_socket_closes_once_and_never_under_a_reader(self) -> None:  # 4
        closed = self.turns.state is Turn.CLOSED
        assert self.closed_sockets == (1 if closed else 0)
        if closed:
            assert self.holder is None

    @invariant()
    def the_idle_check_is_armed_while_threads_may_read(self) -> None:  # 5
        if self.turns.state in (Turn.OPEN, Turn.HELD):
            assert self.idle_armed


TestTurns = TurnsMachine.TestCase
TestTurns.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)


def test_a_script_round_trip_is_two_events() -> None:
    """One thread publishing in a loop: take after its write, release on its OK; nothing for
    the loop to do in between (no RESUME, no WAKE)."""
    turns = ReadTurns()
    turns.settled_for_thread()
    assert turns.read_ended(0.0, False, Head.NONE) == PAUSE | ARM_IDLE
    for _ in range(3):
        assert turns.take()
        turns.read(0.1)
        assert turns.release(Head.NONE) == 0
    assert turns.state is Turn.OPEN


def test_the_loop_takes_reading_back_while_a_thread_reads() -> None:
    """The loop's own command while a thread holds the turn: the holder hands back when it
    lets go, whatever heads the FIFO, and the threads get no turn until the hold passed."""
    turns = ReadTurns()
    turns.settled_for_thread()
    turns.read_ended(0.0, False, Head.NONE)
    assert turns.take()
    assert turns.loop_command(1.0) == 0  # (the holder is told, not interrupted)
    assert turns.release(Head.WAITED) == RESUME
    turns.resumed()
    turns.settled_for_thread()
    assert turns.read_ended(1.5, True, Head.WAITED) == 0  # its reply still pending: it reads
    turns.settled_for_thread()
    assert turns.read_ended(1.5, False, Head.WAITED) == PAUSE | ARM_IDLE | WAKE
