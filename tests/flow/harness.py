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
    **overrides: float,
) -> RdyController:
    options = {**DEFAULTS, **overrides}
    return RdyController(
        max_in_flight,
        backoff=backoff if backoff is not None else ExponentialBackoff(1.0),
        rng=random.Random(seed),
        **options,
    )


class Harness:
    def __init__(self, ctl: RdyController, now: float = 1000.0) -> None:
        self.ctl = ctl
        self.now = now
        self.wire: dict[Hashable, int] = {}
        self.max_rdy: dict[Hashable, int] = {}
        self.ever_served: set[Hashable] = set()
        self.sent: list[RdyChange] = []
        self.dry: set[Hashable] = set()  # conns whose nsqd has nothing to send

    def copy(self) -> Harness:
        """An independent copy (controller and its rng included) to explore a future on."""
        twin = Harness(copy.deepcopy(self.ctl), self.now)
        twin.wire = dict(self.wire)
        twin.max_rdy = dict(self.max_rdy)
        twin.dry = set(self.dry)
        return twin

    @classmethod
    def new(cls, max_in_flight: int, **kwargs: object) -> Harness:
        return cls(make_controller(max_in_flight, **kwargs))  # type: ignore[arg-type]

    # -- driving --

    def add(self, conn: Hashable, max_rdy: int = 2500) -> Sequence[RdyChange]:
        changes = self.ctl.add_connection(conn, max_rdy, self.now)
        self.wire[conn] = 0
        self.max_rdy[conn] = max_rdy
        return self._apply(changes)

    def remove(self, conn: Hashable) -> Sequence[RdyChange]:
        changes = self.ctl.remove_connection(conn, self.now)
        self.wire.pop(conn, None)
        self.max_rdy.pop(conn, None)
        self.dry.discard(conn)
        assert all(c.conn != conn for c in changes), "a change was sent to the removed conn"
        return self._apply(changes)

    def received(self, conn: Hashable, count: int = 1) -> None:
        self.ctl.messages_received(conn, count, self.now)

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
            if mif > 0 and self.eligible() > 0:
                assert total == 1, "in backoff, outside a window, nobody holds the test RDY 1"
            else:
                assert total == 0
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
    max_steps = (h.ctl.backoff_level + 2) * (len(h.wire) + 3) * 2
    for _ in range(max_steps):
        if not h.ctl.in_backoff:
            return
        wet = [c for c in h.holders() if c not in h.dry]
        if wet and not h.ctl.backoff_timeout_active:
            h.received(wet[0])
            h.result(Outcome.SUCCESS)
        else:
            h.to_deadline()
    raise AssertionError(f"backoff did not end within {max_steps} steps: {h.ctl!r}")
