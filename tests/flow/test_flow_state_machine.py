"""Random sequences of joins, leaves, results, budget changes and ticks with advancing time,
for both RDY strategies, with and without the in-flight counts a Reader passes.

The Harness checks after every single RDY change that the budget is respected, and after every
call that the controller is consistent, work-conserving and never stuck in backoff; at the end of
every run (and at random points, on a copy) successes must bring it out of backoff.
"""

from __future__ import annotations

import random

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nsqclient.flow import ExponentialBackoff, FullJitterBackoff, Outcome

from .support import Harness, drive_out_of_backoff, make_controller

MAX_RDY = st.sampled_from([2500, 2500, 2500, 3, 1, 0])


class RdyMachine(RuleBasedStateMachine):
    h: Harness

    def __init__(self) -> None:
        super().__init__()
        self.next_id = 0

    @initialize(
        mif=st.integers(0, 12),
        seed=st.integers(0, 2**32),
        jitter=st.booleans(),
        multiplier=st.sampled_from([1.0, 0.5, 0.0]),
        max_backoff=st.sampled_from([120.0, 10.0, 0.0]),
        strategy=st.sampled_from(["even", "adaptive"]),
        track=st.booleans(),
    )
    def setup(
        self,
        mif: int,
        seed: int,
        jitter: bool,
        multiplier: float,
        max_backoff: float,
        strategy: str,
        track: bool,
    ) -> None:
        rng = random.Random(seed)
        backoff = (
            FullJitterBackoff(multiplier, rng=rng) if jitter else ExponentialBackoff(multiplier)
        )
        ctl = make_controller(
            mif,
            seed=seed,
            backoff=backoff,
            max_backoff_duration=max_backoff,
            strategy=strategy,
        )
        self.h = Harness(ctl, track=track)

    @rule(max_rdy=MAX_RDY, dry=st.booleans())
    def add(self, max_rdy: int, dry: bool) -> None:
        self.next_id += 1
        conn = f"c{self.next_id}"
        self.h.add(conn, max_rdy)
        if dry:
            self.h.dry.add(conn)

    @precondition(lambda self: self.h.wire)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        self.h.remove(data.draw(st.sampled_from(sorted(self.h.wire, key=repr))))

    @precondition(lambda self: not self.h.track and set(self.h.wire) - self.h.dry)
    @rule(data=st.data(), prefer_holder=st.booleans())
    def received(self, data: st.DataObject, prefer_holder: bool) -> None:
        wet = set(self.h.wire) - self.h.dry
        pool = sorted(wet & self.h.holders() if prefer_holder else set(), key=repr)
        pool = pool or sorted(wet, key=repr)
        self.h.received(data.draw(st.sampled_from(pool)), data.draw(st.integers(1, 50)))

    @precondition(lambda self: self.h.track and any(self.h.spare(c) for c in self.h.wire))
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        """nsqd sends what RDY allows (never on a dry connection)."""
        pool = sorted((c for c in self.h.wire if self.h.spare(c) and c not in self.h.dry), key=repr)
        if pool:
            self.h.deliver(data.draw(st.sampled_from(pool)), data.draw(st.integers(1, 50)))

    @precondition(lambda self: self.h.track and any(self.h.inflight.values()))
    @rule(data=st.data(), outcome=st.sampled_from(Outcome))
    def answer(self, data: st.DataObject, outcome: Outcome) -> None:
        held = sorted((c for c, n in self.h.inflight.items() if n), key=repr)
        self.h.answer(data.draw(st.sampled_from(held)), outcome)

    @precondition(lambda self: not self.h.track)
    @rule(outcome=st.sampled_from(Outcome))
    def result(self, outcome: Outcome) -> None:
        self.h.result(outcome)

    @rule(dt=st.sampled_from([0.001, 0.01, 0.03, 0.1]))
    def short_silence(self, dt: float) -> None:
        """Silences around the adaptive policy's windows (the output buffer timeout)."""
        self.h.advance(dt)

    @rule(n=st.integers(0, 12))
    def set_max(self, n: int) -> None:
        self.h.set_max(n)

    @rule(dt=st.floats(0.0, 40.0))
    def advance(self, dt: float) -> None:
        self.h.advance(dt)

    @precondition(lambda self: self.h.ctl.next_deadline() is not None)
    @rule()
    def to_deadline(self) -> None:
        self.h.to_deadline()

    @rule(roll=st.integers(0, 9))
    def close(self, roll: int) -> None:
        if roll == 0:  # rarely, so most runs stay open to the end
            self.h.close()

    @rule()
    def liveness_on_a_copy(self) -> None:
        drive_out_of_backoff(self.h.copy())

    @invariant()
    def consistent(self) -> None:
        if hasattr(self, "h"):
            self.h.check()

    def teardown(self) -> None:
        if hasattr(self, "h"):
            drive_out_of_backoff(self.h)
            assert not self.h.ctl.in_backoff or self.h.ctl.closed


RdyMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
TestRdyMachine = RdyMachine.TestCase
