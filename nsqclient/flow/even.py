"""The ``"even"`` RDY policy, go-nsq v1.1's (pure; used by :class:`.rdy.RdyController`).

``per_conn = max_in_flight // num_conns`` (at least 1) on every connection; with more connections
than ``max_in_flight``, RDY 1 slots are redistributed every ``rdy_redistribute_interval``: a slot
held past ``low_rdy_idle_timeout`` without a message, or past ``low_rdy_timeout`` at all, moves on.
The controller keeps the budget's invariants (:mod:`.rdy`); these functions only say what each
connection should hold.

Where it differs from go-nsq v1.1, and why:

* Joins and leaves rebalance at once: existing connections above the new share are lowered before
  the newcomer is raised, and a leaver's RDY is handed to the others immediately (go-nsq waits for
  the next redistribution tick or a 5 s retry timer; the controller's single deadline replaces
  those timers).
* Redistribution hands RDY 1 to the connections that have waited longest without RDY (random among
  equals) instead of uniformly at random, so no connection can starve: with k = max_in_flight and
  idle connections, every connection gets a turn within ceil(n / k) intervals. The backoff "test"
  connection is chosen the same way (:func:`longest_waiting`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .follow import ConnState

__all__ = ["longest_waiting", "per_connection_share", "rebalance", "redistribute"]

#: orders connections by a key, random among equals (the controller's seeded rng)
Ordered = Callable[[list[ConnState], Callable[[ConnState], float]], list[ConnState]]


def per_connection_share(max_in_flight: int, num_conns: int) -> int:
    """go-nsq's ``int(min(max(1, max_in_flight / num_conns), max_in_flight))``, in integers."""
    if max_in_flight <= 0 or num_conns <= 0:
        return max(max_in_flight, 0)
    return max(1, max_in_flight // num_conns)


def longest_waiting(
    conns: list[ConnState], now: float, zeroed: Iterable[ConnState], ordered: Ordered
) -> list[ConnState]:
    """``conns`` ordered by how long they have gone without RDY; ``zeroed`` count as now."""
    just = set(zeroed)
    if not just:
        return ordered(conns, lambda c: c.waiting_since)
    return ordered(conns, lambda c: now if c in just else c.waiting_since)


def rebalance(
    conns: list[ConnState], max_in_flight: int, now: float, ordered: Ordered
) -> dict[ConnState, int]:
    """Outside backoff: every connection's share, within the budget."""
    mif = max_in_flight
    share = per_connection_share(mif, len(conns))
    targets: dict[ConnState, int] = {}
    if share * len(conns) <= mif:
        for c in conns:
            targets[c] = min(share, c.max_rdy)
        return targets
    # fewer slots than connections: share is 1; holders keep theirs, the rest queue
    holders = [c for c in conns if c.rdy > 0]
    if len(holders) > mif:  # the budget shrank: the most recently served keep their slot
        holders = ordered(holders, lambda c: -c.rdy_set_at)[:mif]
    for c in conns:
        targets[c] = 0
    for c in holders:
        targets[c] = 1
    free = mif - len(holders)
    if free > 0:
        waiting = [c for c in conns if targets[c] == 0 and c.max_rdy > 0]
        for c in longest_waiting(waiting, now, (), ordered)[:free]:
            targets[c] = 1
    return targets


def redistribute(
    conns: list[ConnState],
    budget: int,
    now: float,
    *,
    idle_timeout: float,
    low_rdy_timeout: float,
    ordered: Ordered,
) -> dict[ConnState, int]:
    """Take RDY from idle or long-served connections; give RDY 1 to those waiting longest."""
    targets: dict[ConnState, int] = {}
    used = 0
    zeroed: list[ConnState] = []
    for c in conns:
        if c.rdy > 0:
            if now - c.last_msg > idle_timeout or now - c.rdy_set_at > low_rdy_timeout:
                targets[c] = 0
                zeroed.append(c)
            else:
                used += c.rdy
    available = budget - used
    if available > 0:
        waiting = [c for c in conns if c.max_rdy > 0 and (c.rdy == 0 or targets.get(c) == 0)]
        for c in longest_waiting(waiting, now, zeroed, ordered)[:available]:
            targets[c] = 1
    return targets
