"""When to dial an nsqd (or query nsqlookupd) again: jittered exponential backoff, sooner on demand.

go-nsq retries a dropped nsqd every ``lookupd_poll_interval`` (fixed); the NSQ docs recommend
exponential backoff instead, which :class:`ReconnectBackoff` implements: one per address, asked
:meth:`~ReconnectBackoff.next_delay` before each attempt and :meth:`~ReconnectBackoff.reset` once a
connection is fully up.

A backoff alone makes a publish wait for the next scheduled attempt, however long the outage made
it (go-nsq's Producer dials when a publish finds no connection). :class:`ReconnectSchedule` adds
that: while someone *wants* a connection, the next dial is due at once, then at most once per
``demand_interval`` (never a dial per publish); the backoff resumes when nobody waits.
:func:`lookupd_retry_backoff` is the short backoff after a failed lookupd query. Seconds
throughout; ``now`` is always the caller's clock.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import (
    ConfigError,
    ConnectError,
    ConnectionClosedError,
    NSQTimeoutError,
    TLSError,
    WrongPortError,
)
from .backoff import new_rng

if TYPE_CHECKING:
    import random

    from ..config import Config

__all__ = ["ReconnectBackoff", "ReconnectSchedule", "lookupd_retry_backoff", "worth_retrying"]


def worth_retrying(exc: BaseException) -> bool:
    """Could connecting again later succeed with the same configuration?

    Yes for an nsqd that is not up yet, unreachable, slow or closing on us (docker-compose
    starts a service before its nsqd); no for an answer that says the configuration is wrong
    (an HTTP port, a TLS mismatch, an AUTH or IDENTIFY refusal): that fails at start, loudly.
    """
    if isinstance(exc, TLSError | WrongPortError):
        return False
    return isinstance(exc, ConnectError | NSQTimeoutError | ConnectionClosedError | OSError)


# initial * 2**62 exceeds any sane cap; stop doubling there so the arithmetic never overflows.
_MAX_EXPONENT = 62


class ReconnectBackoff:
    """Delays ``initial * 2**n`` capped at ``maximum``, each shortened by up to ``jitter`` of it.

    Attempt ``n`` (counting from 0) waits a uniform draw from ``[base * (1 - jitter), base]`` where
    ``base = min(maximum, initial * 2**n)``: never more than ``maximum``, and spread out so that
    many clients dropped by one nsqd restart do not reconnect in lockstep. ``jitter=0`` makes the
    sequence exact; ``jitter=1`` is "full jitter".
    """

    __slots__ = ("_attempts", "_rng", "initial", "jitter", "maximum")

    def __init__(
        self,
        initial: float,
        maximum: float,
        *,
        jitter: float = 0.3,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < initial < math.inf:
            raise ConfigError(f"initial reconnect delay must be > 0 s, got {initial!r}")
        if not initial <= maximum < math.inf:
            raise ConfigError(
                f"maximum reconnect delay must be finite and >= initial ({initial!r}), "
                f"got {maximum!r}"
            )
        if not 0 <= jitter <= 1:
            raise ConfigError(f"reconnect jitter must be within 0..1, got {jitter!r}")
        self.initial = float(initial)
        self.maximum = float(maximum)
        self.jitter = float(jitter)
        self._rng = rng if rng is not None else new_rng()
        self._attempts = 0

    @classmethod
    def from_config(
        cls, config: Config, *, jitter: float = 0.3, rng: random.Random | None = None
    ) -> ReconnectBackoff:
        """From ``reconnect_delay`` and ``max_reconnect_delay`` (milliseconds in the Config)."""
        return cls(
            config.sec.reconnect_delay,
            config.sec.max_reconnect_delay,
            jitter=jitter,
            rng=rng,
        )

    @property
    def attempts(self) -> int:
        """How many delays were handed out since the last :meth:`reset`."""
        return self._attempts

    def base_delay(self, attempt: int) -> float:
        """The un-jittered delay for attempt ``attempt`` (0-based)."""
        return min(self.maximum, self.initial * 2.0 ** min(attempt, _MAX_EXPONENT))

    def next_delay(self) -> float:
        """The wait before the next attempt, in seconds; counts one attempt."""
        base = self.base_delay(self._attempts)
        self._attempts += 1
        if self.jitter == 0.0:
            return base
        return base * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        """Start again from ``initial`` (call once a connection succeeded)."""
        self._attempts = 0

    def __repr__(self) -> str:
        return (
            f"ReconnectBackoff(initial={self.initial!r}, maximum={self.maximum!r}, "
            f"jitter={self.jitter!r}, attempts={self._attempts})"
        )


class ReconnectSchedule:
    """When the next dial to one nsqd that is down is due: the backoff's, or sooner on demand.

    The caller reports each dial it starts (:meth:`dialing`) and each that failed (:meth:`failed`,
    which draws the next backoff delay), and asks :meth:`wait` how long to sleep, saying whether
    someone waits for a connection now (``wanted``). Wanted, the dial is due ``demand_interval``
    after the previous one started (at once if none did that recently): however many publishes
    wait, one nsqd sees at most one dial per ``demand_interval``, and dials never overlap
    (the caller runs one at a time). Not wanted, the backoff's delay after the last failure.
    """

    __slots__ = ("_background_at", "_backoff", "_last_dial", "demand_interval")

    def __init__(
        self, backoff: ReconnectBackoff, demand_interval: float, *, now: float, at_once: bool
    ) -> None:
        if not 0 <= demand_interval < math.inf:
            raise ConfigError(f"demand interval must be >= 0 s, got {demand_interval!r}")
        self._backoff = backoff
        self.demand_interval = float(demand_interval)
        self._last_dial: float | None = None
        # ``at_once``: the first attempt is due now (a new node); else after one backoff delay
        self._background_at = now if at_once else now + backoff.next_delay()

    @classmethod
    def from_config(
        cls, config: Config, *, now: float, at_once: bool, rng: random.Random | None = None
    ) -> ReconnectSchedule:
        """The backoff from ``reconnect_delay``/``max_reconnect_delay``; dials on demand at most
        once per ``reconnect_delay`` (the rate the backoff itself starts at)."""
        return cls(
            ReconnectBackoff.from_config(config, rng=rng),
            config.sec.reconnect_delay,
            now=now,
            at_once=at_once,
        )

    @property
    def attempts(self) -> int:
        """Backoff delays drawn so far (the first one, then one per failed dial)."""
        return self._backoff.attempts

    def wait(self, now: float, wanted: bool) -> float:
        """Seconds until the next dial is due (0: dial now)."""
        due = self._background_at
        if wanted:
            soonest = now if self._last_dial is None else self._last_dial + self.demand_interval
            due = min(due, soonest)
        return max(0.0, due - now)

    def dialing(self, now: float) -> None:
        """A dial starts now."""
        self._last_dial = now

    def failed(self, now: float) -> float:
        """The dial failed: returns the backoff delay drawn for the next background attempt."""
        delay = self._backoff.next_delay()
        self._background_at = now + delay
        return delay


#: the first retry of a failed lookupd query, and the longest (both capped by half the interval)
LOOKUPD_RETRY_INITIAL = 1.0
LOOKUPD_RETRY_MAXIMUM = 10.0


def lookupd_retry_backoff(
    poll_interval: float, *, rng: random.Random | None = None
) -> ReconnectBackoff:
    """The delays before retrying a failed lookupd query: from 1 s, doubling, capped at 10 s
    (and at half of ``poll_interval``): a lookupd that comes up after its clients (everything
    started at once) is asked again within seconds, not a whole poll interval later; after a
    success the caller polls at ``poll_interval`` again (and resets this)."""
    maximum = min(LOOKUPD_RETRY_MAXIMUM, poll_interval / 2)
    return ReconnectBackoff(min(LOOKUPD_RETRY_INITIAL, maximum), maximum, rng=rng)
