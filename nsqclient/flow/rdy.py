"""RDY management and the consumer backoff state machine: who may receive how many messages.

One :class:`RdyController` per Reader decides, from events and the time the caller passes in, which
``RDY n`` commands to send; it never sends, sleeps or reads a clock. The caller:

* reports connections coming and going (:meth:`~RdyController.add_connection`,
  :meth:`~RdyController.remove_connection`), batches of messages arriving
  (:meth:`~RdyController.messages_received`) and each message's result
  (:meth:`~RdyController.message_result`);
* sends every returned :class:`RdyChange`, **in order**, to its connection;
* keeps one timer armed at :meth:`~RdyController.next_deadline` and calls
  :meth:`~RdyController.tick` when it fires (re-reading ``next_deadline`` after every call).

Invariants, after every call and after every prefix of the changes it returned (both policies):

* the sum of RDY is at most ``max_in_flight`` (``min(1, max_in_flight)`` in backoff), and no
  connection's RDY exceeds its ``max_rdy_count``; decreases are listed before increases;
* the sum over connections of ``max(rdy, in_flight + hold)`` is at most ``max_in_flight``
  whenever a change raised it. nsqd sends while its in-flight is below RDY, so on a connection
  nsqd's in-flight is at most ``max(rdy, in-flight)``: the RDY sum alone is not enough when RDY
  moves away from a connection that still has messages in flight. ``in_flight`` is the caller's
  count (received, not answered); ``hold``, after a decrease, counts what nsqd may have sent under
  the old RDY that has not arrived yet (arrivals count it down; the first tick one silence window
  later ends it). So nsqd's in-flight summed over every nsqd stays within ``max_in_flight``, up to
  answers still on their way to nsqd (a retry waits one round trip after a FIN for that reason).
  An increase the budget cannot cover yet is made in part and retried on the next answer or tick.

Policies: ``"adaptive"`` (the Reader's default; the budget follows the messages, see
:mod:`.follow`) and ``"even"``, go-nsq v1.1's (see :mod:`.even`, with where it differs from
go-nsq). The backoff levels and windows are go-nsq's for both. Durations are seconds; ``now`` is
monotonic.

Where backoff differs from go-nsq v1.1, and why:

* A NEUTRAL result (REQ without backoff) is a true no-op. go-nsq re-arms a backoff window at the
  same level for it, which stalls consumers that requeue without backoff as part of normal flow.
* The level cap uses the strategy's upper bound, not a random draw, so full_jitter caps at the same
  level as exponential; the level also never exceeds MAX_BACKOFF_LEVEL (only reachable with a
  multiplier of zero or under a millisecond). max_backoff_duration == 0 disables backoff even
  when the multiplier is zero.
* While paused (max_in_flight 0) in backoff, the expired window does not re-arm every second; the
  test RDY 1 is handed out when max_in_flight is raised again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .backoff import BackoffStrategy, ExponentialBackoff, FullJitterBackoff, Outcome, new_rng
from .even import longest_waiting, per_connection_share, rebalance, redistribute
from .follow import ConnState, plan
from .follow import _zero as _zero_in_flight

if TYPE_CHECKING:
    import random

    from ..config import Config

__all__ = [
    "MAX_BACKOFF_LEVEL",
    "RDY_STRATEGIES",
    "RdyChange",
    "RdyController",
    "per_connection_share",
]


MAX_BACKOFF_LEVEL = 32
_RETRY_DELAY = 1.0  # go-nsq: no connection could take the test RDY 1, try again after 1 s
_FAILURE = Outcome.FAILURE
_SUCCESS = Outcome.SUCCESS
RDY_STRATEGIES = ("adaptive", "even")
_MIN_SILENCE = 0.001  # seconds: a silence window shorter than this is scheduling noise


@dataclass(frozen=True, slots=True)
class RdyChange:
    """Send ``RDY count`` on connection ``conn`` (the caller's own key)."""

    conn: Hashable
    count: int


_NO_CHANGES: tuple[RdyChange, ...] = ()


def _coalesce(out: list[RdyChange], before: dict[Hashable, int]) -> tuple[RdyChange, ...]:
    """Several decisions in one call: one change per connection, decreases first (each
    decision kept the budget, so their final state does too, and so does every prefix)."""
    final: dict[Hashable, int] = {}
    for ch in out:
        final[ch.conn] = ch.count
    downs = [RdyChange(k, n) for k, n in final.items() if n < before[k]]
    ups = [RdyChange(k, n) for k, n in final.items() if n > before[k]]
    return (*downs, *ups)


def _check_seconds(name: str, value: float, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    ok = value > 0 if positive else value >= 0
    if not ok or value == math.inf:
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name} must be finite and {bound}, got {value!r}")
    return float(value)


def _check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0, got {value!r}")
    return value


class RdyController:
    """The RDY budget and backoff state of one Reader; see the module docstring for the contract.

    Every method taking ``now`` returns a tuple of :class:`RdyChange` (often the shared empty
    tuple), to be sent in order. ``message_result(Outcome.SUCCESS, now)`` outside backoff is O(1)
    and allocates nothing. After :meth:`close` the controller only tracks membership.
    """

    __slots__ = (
        "_adapt_at",
        "_adaptive",
        "_backoff",
        "_backoff_at",
        "_closed",
        "_conns",
        "_found",
        "_found_until",
        "_idle_timeout",
        "_level",
        "_low_rdy_timeout",
        "_max_backoff",
        "_max_in_flight",
        "_redistribute_at",
        "_redistribute_interval",
        "_retry_at",
        "_rng",
        "_rtt",
        "_total",
    )

    def __init__(
        self,
        max_in_flight: int,
        *,
        backoff: BackoffStrategy,
        max_backoff_duration: float,
        low_rdy_idle_timeout: float,
        low_rdy_timeout: float,
        redistribute_interval: float,
        rng: random.Random | None = None,
        strategy: str = "even",
    ) -> None:
        if not isinstance(backoff, BackoffStrategy):
            raise ConfigError(f"backoff must be a BackoffStrategy, got {backoff!r}")
        self._max_in_flight = _check_count("max_in_flight", max_in_flight)
        self._backoff = backoff
        self._max_backoff = _check_seconds("max_backoff_duration", max_backoff_duration)
        self._idle_timeout = _check_seconds("low_rdy_idle_timeout", low_rdy_idle_timeout)
        self._low_rdy_timeout = _check_seconds("low_rdy_timeout", low_rdy_timeout)
        self._redistribute_interval = _check_seconds(
            "redistribute_interval", redistribute_interval, positive=True
        )
        if strategy not in RDY_STRATEGIES:
            raise ConfigError(f"rdy_strategy must be 'adaptive' or 'even', got {strategy!r}")
        self._adaptive = strategy == "adaptive"
        self._adapt_at: float | None = None  # adaptive: when to look at the connections again
        self._retry_at: float | None = None  # an increase waited for in-flight to drain
        self._rtt = 0.0  # the longest round trip of any connection
        #: adaptive: cold connections found delivering in a row (each doubles the probes, see
        #: follow.plan's ``found``), and until when the run counts (two windows after the last)
        self._found = 0
        self._found_until = -float("inf")
        self._rng = rng if rng is not None else new_rng()
        self._conns: dict[Hashable, ConnState] = {}
        self._total = 0
        self._level = 0
        self._backoff_at: float | None = None  # set <=> a backoff window (timeout) is active
        self._redistribute_at: float | None = None
        self._closed = False

    @classmethod
    def from_config(cls, config: Config, rng: random.Random | None = None) -> RdyController:
        """Build from a :class:`~nsqclient.config.Config` (its milliseconds become seconds here)."""
        rng = rng if rng is not None else new_rng()
        multiplier = config.sec.backoff_multiplier
        strategy: BackoffStrategy
        if config.backoff_strategy == "full_jitter":
            strategy = FullJitterBackoff(multiplier, rng=rng)
        else:
            strategy = ExponentialBackoff(multiplier)
        return cls(
            config.max_in_flight,
            backoff=strategy,
            max_backoff_duration=config.sec.max_backoff_duration,
            low_rdy_idle_timeout=config.sec.low_rdy_idle_timeout,
            low_rdy_timeout=config.sec.low_rdy_timeout,
            redistribute_interval=config.sec.rdy_redistribute_interval,
            rng=rng,
            strategy=config.rdy_strategy,
        )

    # -- read-only state --

    def rdy(self, conn: Hashable) -> int:
        """The RDY count last decided for ``conn`` (KeyError if unknown)."""
        return self._conns[conn].rdy

    @property
    def total_rdy(self) -> int:
        return self._total

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    @property
    def backoff_level(self) -> int:
        return self._level

    @property
    def in_backoff(self) -> bool:
        return self._level > 0

    @property
    def backoff_timeout_active(self) -> bool:
        """True during a backoff window: every RDY is 0 and results are ignored."""
        return self._backoff_at is not None

    @property
    def strategy(self) -> str:
        return "adaptive" if self._adaptive else "even"

    @property
    def connections(self) -> list[Hashable]:
        return list(self._conns)

    @property
    def closed(self) -> bool:
        return self._closed

    def next_deadline(self) -> float | None:
        """When :meth:`tick` should next be called (absolute, seconds), or None for never."""
        at: float | None = None
        for t in (self._backoff_at, self._redistribute_at, self._adapt_at, self._retry_at):
            if t is not None and (at is None or t < at):
                at = t
        return at

    # -- events --

    def add_connection(
        self,
        conn: Hashable,
        max_rdy_count: int,
        now: float,
        *,
        in_flight: Callable[[], int] | None = None,
        output_buffer_timeout: float = 0.25,
        rtt: float = 0.0,
    ) -> tuple[RdyChange, ...]:
        """A connection finished SUB; ``max_rdy_count`` is from its IDENTIFY reply.

        ``in_flight`` counts the messages received on it and not yet answered (without it the
        controller keeps only the RDY sum, not in-flight + RDY, within the budget);
        ``output_buffer_timeout`` (negotiated, seconds; 0 when nsqd writes unbuffered) and
        ``rtt`` (observed round trip, seconds) make its silence window.
        """
        if conn in self._conns:
            raise ValueError(f"connection {conn!r} is already registered")
        _check_count("max_rdy_count", max_rdy_count)
        obt = _check_seconds("output_buffer_timeout", output_buffer_timeout)
        rtt = _check_seconds("rtt", rtt)
        self._rtt = max(self._rtt, rtt)
        self._conns[conn] = ConnState(
            conn, max_rdy_count, now, in_flight, max(_MIN_SILENCE, obt), rtt
        )
        return self._connections_changed(now)

    def remove_connection(self, conn: Hashable, now: float) -> tuple[RdyChange, ...]:
        """A connection is gone; its RDY returns to the pool. Unknown connections are ignored.

        No change is ever returned for ``conn`` itself.
        """
        c = self._conns.pop(conn, None)
        if c is None:
            return _NO_CHANGES
        self._total -= c.rdy
        return self._connections_changed(now)

    def _connections_changed(self, now: float) -> tuple[RdyChange, ...]:
        """A connection came or went: share the budget again (or, in backoff, make sure one
        connection holds the test RDY 1)."""
        if self._closed:
            return _NO_CHANGES
        out: list[RdyChange] = []
        if self._level == 0:
            self._rebalance(now, out)
        else:
            self._ensure_test_holder(now, out)
        self._sync_redistribution(now)
        return tuple(out)

    def messages_received(self, conn: Hashable, count: int, now: float) -> tuple[RdyChange, ...]:
        """A batch of ``count`` messages arrived on ``conn`` (call once per batch, not per message).

        Only the time matters to the policy (idle detection); unknown connections are ignored.
        With the adaptive policy a connection that starts delivering gets its share at once
        (the returned changes); otherwise, and on the common path, nothing is returned.
        """
        c = self._conns.get(conn)
        if c is None:
            return _NO_CHANGES
        c.last_msg = now
        if c.probe_at is not None:
            c.observed(now - c.probe_at)
        if c.hold:
            c.hold = max(0, c.hold - count)
        if c.hot:
            return _NO_CHANGES
        c.hot = True
        if not self._adaptive or self._level or self._closed:
            return _NO_CHANGES
        # a cold connection had messages: others may too, so probe more of them at once
        self._found = self._found + 1 if now <= self._found_until else 1
        self._found_until = now + 2.0 * c.silence
        out: list[RdyChange] = []
        self._decide(now, out)
        return tuple(out) if out else _NO_CHANGES

    def message_result(self, outcome: Outcome, now: float) -> tuple[RdyChange, ...]:
        """One message was answered: SUCCESS (FIN), FAILURE (REQ with backoff), NEUTRAL (REQ)."""
        if self._retry_at is not None and outcome is not _FAILURE:
            # an increase waits for this: retry once nsqd has seen the answer too
            at = now + self._rtt
            if at < self._retry_at:
                self._retry_at = at
        if self._level or outcome is _FAILURE:
            return self._signal(outcome, now)
        return _NO_CHANGES

    @property
    def awaiting_answers(self) -> bool:
        """True while an RDY increase waits for messages in flight to be answered: report
        every result then (:meth:`message_result`), so it is made as soon as one is."""
        return self._retry_at is not None

    def set_max_in_flight(self, n: int, now: float) -> tuple[RdyChange, ...]:
        """Change the budget; ``0`` pauses (RDY 0 everywhere), raising it again resumes.

        In backoff the new budget waits for backoff to end, except that ``0`` also withdraws the
        test RDY 1 and raising from ``0`` hands it out again.
        """
        self._max_in_flight = _check_count("max_in_flight", n)
        if self._closed:
            return _NO_CHANGES
        out: list[RdyChange] = []
        if self._level == 0:
            self._rebalance(now, out)
        elif n == 0:
            self._zero_all(now, out)
        else:
            self._ensure_test_holder(now, out)
        self._sync_redistribution(now)
        return tuple(out)

    def tick(self, now: float) -> tuple[RdyChange, ...]:
        """Fire whatever is due at ``now``: the end of a backoff window, a redistribution round.

        Silence (a drained connection, the end of a hold) is judged here only, so call it once
        the connections' pending input has been read (after a poll of the sockets), not from
        a timer that may run late straight after a stall."""
        if self._closed:
            return _NO_CHANGES
        before = {c.key: c.rdy for c in self._conns.values()}
        for c in self._conns.values():  # a window after a decrease, what was sent has arrived
            if c.hold and now >= c.hold_until:
                c.hold = 0
        out: list[RdyChange] = []
        if self._backoff_at is not None and now >= self._backoff_at:
            self._backoff_at = None
            self._ensure_test_holder(now, out)
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            if self._level == 0:
                self._rebalance(now, out)
            else:
                self._ensure_test_holder(now, out)
        if self._adapt_at is not None and now >= self._adapt_at and self._level == 0:
            self._decide(now, out, settled=True)
        self._sync_redistribution(now)
        if self._redistribute_at is not None and now >= self._redistribute_at:
            self._redistribute(now, out)
            self._redistribute_at = now + self._redistribute_interval
        return _coalesce(out, before) if out else _NO_CHANGES

    def close(self) -> tuple[RdyChange, ...]:
        """RDY 0 to every connection holding RDY, then stop deciding (graceful close)."""
        out: list[RdyChange] = []
        if not self._closed:
            self._zero_all(0.0, out)
            self._closed = True
            self._backoff_at = None
            self._redistribute_at = None
            self._adapt_at = None
            self._retry_at = None
        return tuple(out)

    # -- backoff --

    def _signal(self, outcome: Outcome, now: float) -> tuple[RdyChange, ...]:
        if self._closed or self._backoff_at is not None or self._max_backoff <= 0:
            return _NO_CHANGES  # one result per backoff window; backoff disabled
        level = self._level
        if outcome is _SUCCESS:
            if level == 0:
                return _NO_CHANGES
            level -= 1
        elif outcome is _FAILURE:
            nxt = level + 1
            if nxt <= MAX_BACKOFF_LEVEL and self._backoff.upper_bound(nxt) <= self._max_backoff:
                level = nxt
            elif level == 0:
                return _NO_CHANGES  # even level 1 would be longer than allowed: never back off
        else:
            return _NO_CHANGES  # NEUTRAL
        self._level = level
        out: list[RdyChange] = []
        if level == 0:
            self._rebalance(now, out)  # leave backoff: everyone back to its share
        else:
            duration = self._backoff.duration(level)
            if not duration >= 0.0:  # negative or NaN from a custom strategy
                duration = 0.0
            self._zero_all(now, out)
            self._backoff_at = now + min(duration, self._max_backoff)
        self._sync_redistribution(now)
        return tuple(out)

    def _ensure_test_holder(self, now: float, out: list[RdyChange]) -> None:
        """In backoff outside a window, make sure one connection holds the test RDY 1."""
        if self._backoff_at is not None or self._total > 0 or self._max_in_flight == 0:
            return
        eligible = [c for c in self._conns.values() if c.max_rdy > 0]
        if not eligible:
            self._backoff_at = now + _RETRY_DELAY  # keep a deadline so backoff can always end
            return
        if self._free(now) < 1:  # all of the budget in flight: RDY 1 costs nothing where one is
            eligible = [c for c in eligible if c.reserved(now) >= 1]
            if not eligible:
                self._retry_later(now)
                return
        self._set(longest_waiting(eligible, now, (), self._ordered)[0], 1, now, out)

    # -- distribution --

    def _decide(self, now: float, out: list[RdyChange], settled: bool = False) -> None:
        """The adaptive policy outside backoff (:mod:`.follow`): targets, then the next look."""
        conns = list(self._conns.values())
        targets, at = plan(
            conns,
            self._max_in_flight,
            now,
            self._ordered,
            settled,
            self._found if now <= self._found_until else 0,
        )
        self._apply(targets, now, out)
        self._adapt_at = at

    def _rebalance(self, now: float, out: list[RdyChange]) -> None:
        """Outside backoff: every connection to its share, within the budget."""
        if self._adaptive:
            self._decide(now, out)
            return
        conns = list(self._conns.values())
        if conns:
            self._apply(rebalance(conns, self._max_in_flight, now, self._ordered), now, out)

    def _redistribute(self, now: float, out: list[RdyChange]) -> None:
        """The even policy's round: RDY 1 slots move from idle or long-served connections."""
        budget = self._max_in_flight if self._level == 0 else min(1, self._max_in_flight)
        targets = redistribute(
            list(self._conns.values()),
            budget,
            now,
            idle_timeout=self._idle_timeout,
            low_rdy_timeout=self._low_rdy_timeout,
            ordered=self._ordered,
        )
        self._apply(targets, now, out)

    def _ordered(
        self, conns: list[ConnState], key: Callable[[ConnState], float]
    ) -> list[ConnState]:
        rnd = self._rng.random
        return sorted(conns, key=lambda c: (key(c), rnd()))

    def _sync_redistribution(self, now: float) -> None:
        n = len(self._conns)
        mif = self._max_in_flight
        if self._level:
            self._adapt_at = None
        if self._adaptive and self._level == 0:
            self._redistribute_at = None
            return
        needed = self._backoff_at is None and mif > 0 and (n > mif if self._level == 0 else n > 1)
        if not needed:
            self._redistribute_at = None
        elif self._redistribute_at is None:
            self._redistribute_at = now + self._redistribute_interval

    # -- applying decisions --

    def _apply(self, targets: dict[ConnState, int], now: float, out: list[RdyChange]) -> None:
        for c, n in targets.items():  # decreases first, so no prefix exceeds the budget
            if n < c.rdy:
                self._set(c, n, now, out)
        free: int | None = None
        ups = [(c, n) for c, n in targets.items() if n > c.rdy]
        if len(ups) > 1:  # what the budget cannot cover yet goes to who waited longest
            ups.sort(key=lambda cn: cn[0].waiting_since if cn[0].rdy == 0 else cn[0].raised_at)
        for c, n in ups:
            if n > c.rdy:
                if free is None:
                    free = self._free(now)
                before = c.reserved(now)
                allowed = min(n, free + before)  # what is in flight stays counted
                if allowed < n:
                    self._retry_later(now)
                if allowed > c.rdy:
                    self._set(c, allowed, now, out)
                    free -= c.reserved(now) - before

    def _free(self, now: float) -> int:
        """The budget left once every connection's RDY or in-flight (whichever is more) is
        counted: what may still be handed out without nsqd's in-flight exceeding the budget."""
        return self._max_in_flight - sum(c.reserved(now) for c in self._conns.values())

    def _retry_later(self, now: float) -> None:
        """An increase waits for messages in flight to be answered or for a hold to end: look
        again when the first hold ends, else in one silence window (the shortest); answers
        bring it forward (:meth:`message_result`)."""
        ends = [c.hold_until for c in self._conns.values() if c.hold and c.hold_until > now]
        if ends:
            at = min(ends)
        else:
            windows = [c.silence for c in self._conns.values()]
            at = now + (min(windows) if windows else _MIN_SILENCE)
        if self._retry_at is None or at < self._retry_at:
            self._retry_at = at

    def _zero_all(self, now: float, out: list[RdyChange]) -> None:
        for c in self._conns.values():
            if c.rdy > 0:
                self._set(c, 0, now, out)

    def _set(self, c: ConnState, n: int, now: float, out: list[RdyChange]) -> None:
        self._total += n - c.rdy
        if n == 0:
            c.waiting_since = now
        if n > c.rdy:
            c.raised_at = now
            if c.rdy == 0:
                c.probe_at = now  # the first delivery after this measures nsqd's response
        elif c.in_flight is not _zero_in_flight:
            # deliveries sent under the old RDY may be on their way: count them until they
            # arrive or a silence window passes
            c.hold = max(c.hold, c.rdy - c.in_flight())
            c.hold_until = now + c.silence
        c.rdy = n
        c.rdy_set_at = now
        out.append(RdyChange(c.key, n))

    def __repr__(self) -> str:
        return (
            f"<RdyController max_in_flight={self._max_in_flight} conns={len(self._conns)} "
            f"total_rdy={self._total} backoff_level={self._level}"
            f"{' (window)' if self._backoff_at is not None else ''}"
            f"{' closed' if self._closed else ''}>"
        )
