"""A fake clock and a model of the wire around one RdyController, checking invariants on every call.

Every call's changes are applied to ``wire`` one at a time, as a Reader would send them, and the
budget invariant is checked after each one, so a bad ordering inside one call is caught too.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Hashable, Sequence

from nsqclient.flow import (
    ExponentialBackoff,
    Outcome,
    RdyChange,
    RdyController,
    per_connection_share,
)
from nsqclient.flow.backoff import BackoffStrategy

DEFAULTS = {
    "max_backoff_duration": 120.0,
    "low_rdy_idle_timeout": 10.0,
    "low_rdy_timeout": 30.0,
    "redistribute_interval": 5.0,
}


def make_controller(
    max_in_flight: int,
    *,
    seed: int = 0,
    backoff: BackoffStrategy | None = None,
    strategy: str = "even",
    **overrides: float,
) -> RdyController:
    options = {**DEFAULTS, **overrides}
    return RdyController(
        max_in_flight,
        backoff=backoff if backoff is not None else ExponentialBackoff(1.0),
        rng=random.Random(seed),
        strategy=strategy,
        **options,
    )


OBT = 0.025  # the output_buffer_timeout and round trip the harness's connections report
RTT = 0.001
SILENCE = OBT + 2 * RTT


class Count:
    """A connection's in-flight count as the controller reads it (copied along with it)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        return self.n


class Harness:
    def __init__(self, ctl: RdyController, now: float = 1000.0, *, track: bool = False) -> None:
        self.ctl = ctl
        self.now = now
        #: model nsqd's in-flight per connection and give it to the controller; the budget then
        #: covers max(RDY, in-flight) per connection, not only the RDY sum
        self.track = track
        self.counts: dict[Hashable, Count] = {}
        self.max_nsqd_in_flight = 0
        self.wire: dict[Hashable, int] = {}
        self.max_rdy: dict[Hashable, int] = {}
        self.ever_served: set[Hashable] = set()
        self.sent: list[RdyChange] = []
        self.dry: set[Hashable] = set()  # conns whose nsqd has nothing to send

    def copy(self) -> Harness:
        """An independent copy (controller and its rng included) to explore a future on."""
        ctl, counts = copy.deepcopy((self.ctl, self.counts))  # one memo: the copy reads its own
        twin = Harness(ctl, self.now, track=self.track)
        twin.counts = counts
        twin.wire = dict(self.wire)
        twin.max_rdy = dict(self.max_rdy)
        twin.dry = set(self.dry)
        return twin

    @classmethod
    def new(cls, max_in_flight: int, *, track: bool = False, **kwargs: object) -> Harness:
        return cls(make_controller(max_in_flight, **kwargs), track=track)  # type: ignore[arg-type]

    # -- driving --

    def add(self, conn: Hashable, max_rdy: int = 2500, rtt: float = RTT) -> Sequence[RdyChange]:
        if self.track:
            self.counts[conn] = Count()
            changes = self.ctl.add_connection(
                conn,
                max_rdy,
                self.now,
                in_flight=self.counts[conn],
                output_buffer_timeout=OBT,
                rtt=rtt,
            )
        else:
            changes = self.ctl.add_connection(conn, max_rdy, self.now)
        self.wire[conn] = 0
        self.max_rdy[conn] = max_rdy
        return self._apply(changes)

    def remove(self, conn: Hashable) -> Sequence[RdyChange]:
        changes = self.ctl.remove_connection(conn, self.now)
        self.wire.pop(conn, None)
        self.max_rdy.pop(conn, None)
        self.dry.discard(conn)
        self.counts.pop(conn, None)
        assert all(c.conn != conn for c in changes), "a change was sent to the removed conn"
        return self._apply(changes)

    def received(self, conn: Hashable, count: int = 1) -> Sequence[RdyChange]:
        return self._apply(self.ctl.messages_received(conn, count, self.now))

    def spare(self, conn: Hashable) -> int:
        """How many messages nsqd would send now (it sends while in-flight < RDY)."""
        return max(0, self.wire[conn] - self.inflight.get(conn, 0))

    def deliver(self, conn: Hashable, count: int = 1) -> Sequence[RdyChange]:
        """nsqd sends ``count`` (at most what RDY allows) on ``conn``."""
        count = min(count, self.spare(conn))
        if count <= 0:
            return ()
        self.counts[conn].n += count
        self._check_in_flight()
        return self.received(conn, count)

    def answer(self, conn: Hashable, outcome: Outcome = Outcome.SUCCESS) -> Sequence[RdyChange]:
        assert self.counts[conn].n > 0
        self.counts[conn].n -= 1
        return self.result(outcome)

    @property
    def inflight(self) -> dict[Hashable, int]:
        return {c: k.n for c, k in self.counts.items()}

    def _check_in_flight(self) -> None:
        total = sum(self.inflight.values())
        self.max_nsqd_in_flight = max(self.max_nsqd_in_flight, total)

    def reserved(self) -> int:
        inflight = self.inflight
        return sum(max(n, inflight.get(c, 0)) for c, n in self.wire.items())

    def result(self, outcome: Outcome) -> Sequence[RdyChange]:
        return self._apply(self.ctl.message_result(outcome, self.now))

    def set_max(self, n: int) -> Sequence[RdyChange]:
        return self._apply(self.ctl.set_max_in_flight(n, self.now))

    def tick(self) -> Sequence[RdyChange]:
        return self._apply(self.ctl.tick(self.now))

    def advance(self, dt: float) -> Sequence[RdyChange]:
        """Move the clock by ``dt`` and tick (a tick before a deadline must be harmless)."""
        self.now += dt
        return self.tick()

    def to_deadline(self) -> Sequence[RdyChange]:
        """Jump to the next deadline (which must exist) and tick there."""
        deadline = self.ctl.next_deadline()
        assert deadline is not None, "expected a deadline"
        assert deadline >= self.now - 1e-9, "deadline in the past was never fired"
        self.now = max(self.now, deadline)
        return self.tick()

    def close(self) -> Sequence[RdyChange]:
        changes = self.ctl.close()
        assert all(c.count == 0 for c in changes)
        return self._apply(changes)

    # -- views --

    def holders(self) -> set[Hashable]:
        return {c for c, n in self.wire.items() if n > 0}

    def eligible(self) -> int:
        return sum(1 for m in self.max_rdy.values() if m > 0)

    # -- checking --

    def _budget(self) -> int:
        ctl = self.ctl
        if ctl.closed:
            return 0
        if ctl.in_backoff:
            return min(1, ctl.max_in_flight)
        return ctl.max_in_flight

    def _apply(self, changes: Sequence[RdyChange]) -> Sequence[RdyChange]:
        budget_after = self._budget()
        seen_increase = False
        reserved = self.reserved()
        for ch in changes:
            assert isinstance(ch, RdyChange)
            assert ch.conn in self.wire, f"change for unknown conn {ch.conn!r}"
            old = self.wire[ch.conn]
            assert ch.count != old, f"redundant change {ch}"
            assert 0 <= ch.count <= self.max_rdy[ch.conn], f"{ch} exceeds max_rdy"
            if ch.count > old:
                seen_increase = True
            else:
                assert not seen_increase, f"decrease {ch} listed after an increase"
            self.wire[ch.conn] = ch.count
            if ch.count > old:
                # only increases can break the budget; decreases may still be working down
                # from the old budget (entering backoff, lowering max_in_flight)
                assert sum(self.wire.values()) <= budget_after, (
                    f"transient RDY sum {sum(self.wire.values())} > {budget_after} after {ch}"
                )
                if self.track:  # nsqd sends while in-flight < RDY: in-flight + spare RDY
                    now_reserved = self.reserved()  # (an increase below in-flight adds nothing)
                    assert now_reserved <= max(self.ctl.max_in_flight, reserved), (
                        f"RDY/in-flight {now_reserved} > {self.ctl.max_in_flight} after {ch}"
                    )
            reserved = self.reserved()
            if ch.count > 0:
                self.ever_served.add(ch.conn)
        self.sent.extend(changes)
        self.check()
        return changes

    def check(self) -> None:
        ctl = self.ctl
        total = sum(self.wire.values())
        assert sorted(map(repr, ctl.connections)) == sorted(map(repr, self.wire))
        for conn, n in self.wire.items():
            assert ctl.rdy(conn) == n, f"controller thinks {conn!r} has {ctl.rdy(conn)}, wire {n}"
            assert n <= self.max_rdy[conn]
        assert ctl.total_rdy == total
        assert total <= self._budget()
        deadline = ctl.next_deadline()
        if deadline is not None:
            assert math.isfinite(deadline)
        if ctl.closed:
            assert total == 0 and deadline is None
            return
        mif, n = ctl.max_in_flight, len(self.wire)
        if ctl.backoff_timeout_active:
            assert ctl.in_backoff and total == 0
            assert deadline is not None
        elif ctl.in_backoff:
            # liveness: backoff can only end through a result, so someone must be able to get one
            if self.track and total == 0:  # the test RDY 1 may wait for in-flight to drain
                assert mif == 0 or self.eligible() == 0 or deadline is not None
            elif mif > 0 and self.eligible() > 0:
                assert total == 1, "in backoff, outside a window, nobody holds the test RDY 1"
            else:
                assert total == 0
        elif self.track or ctl.strategy == "adaptive":
            # increases may wait for in-flight to drain; the adaptive split follows deliveries
            if mif > 0 and self.eligible() > 0 and total == 0:
                assert deadline is not None, "RDY 0 everywhere and nothing scheduled"
        else:
            share = per_connection_share(mif, n)
            if share * n <= mif:
                for conn, rdy in self.wire.items():
                    assert rdy == min(share, self.max_rdy[conn]), "conn not at its share"
            else:
                # fewer slots than conns: every slot that can be used is used
                assert all(r <= 1 for r in self.wire.values())
                assert total == min(mif, self.eligible()), "idle budget while conns wait"
                assert deadline is not None, "no redistribution scheduled while conns wait"


def drive_out_of_backoff(h: Harness) -> None:
    """From any state, deliver successes whenever a connection that has messages holds RDY.

    Connections in ``h.dry`` never deliver, so a test RDY 1 parked on one of them must be moved
    by redistribution; backoff must still end within a bounded number of steps.
    """
    if h.ctl.closed:
        return
    if h.ctl.max_in_flight == 0:
        h.set_max(1)
    if not any(m > 0 and c not in h.dry for c, m in h.max_rdy.items()):
        h.add(("liveness", len(h.sent), h.now), 1)
    max_steps = (h.ctl.backoff_level + 2) * (len(h.wire) + 3 + sum(h.inflight.values())) * 2
    for _ in range(max_steps):
        if not h.ctl.in_backoff:
            return
        held = [c for c, n in h.inflight.items() if n > 0]
        wet = [c for c in h.holders() if c not in h.dry and (not h.track or h.spare(c))]
        if held and not h.ctl.backoff_timeout_active:
            h.answer(held[0])
        elif wet and not h.ctl.backoff_timeout_active:
            if h.track:
                h.deliver(wet[0])
                h.answer(wet[0])
            else:
                h.received(wet[0])
                h.result(Outcome.SUCCESS)
        else:
            h.to_deadline()
    raise AssertionError(f"backoff did not end within {max_steps} steps: {h.ctl!r}")
