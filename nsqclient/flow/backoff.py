"""Consumer backoff: how a message result is classified, and how long each backoff level lasts.

The state machine that uses these lives in :mod:`nsqclient.flow.rdy`; this module only owns the
arithmetic. Durations are in seconds. A strategy is deterministic given its ``random.Random``.

go-nsq's strategies are copied: ``exponential`` waits ``multiplier * 2**level``, ``full_jitter``
waits a uniform draw from ``[0, multiplier * 2**level)``. Each strategy also reports the largest
value it can return for a level (:meth:`BackoffStrategy.upper_bound`); the controller caps the
level with that bound rather than with a random draw, so both strategies share one level cap.
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ConfigError

if TYPE_CHECKING:
    import random

__all__ = ["BackoffStrategy", "ExponentialBackoff", "FullJitterBackoff", "Outcome"]

# 2.0 ** 1024 overflows a float; any level this high is "longer than any cap" anyway.
_OVERFLOW_LEVEL = 1000


def new_rng() -> random.Random:
    """A jitter source of its own. ``random`` loads here, with the first client, not at import
    (issue 51: import time)."""
    import random

    return random.Random()


class Outcome(enum.Enum):
    """What one message result says about the health of processing."""

    SUCCESS = "success"  # FIN: walk the backoff level down
    FAILURE = "failure"  # REQ with backoff: walk the backoff level up
    NEUTRAL = "neutral"  # REQ without backoff: no signal at all


@runtime_checkable
class BackoffStrategy(Protocol):
    """How long backoff level ``level`` (>= 1) lasts, in seconds."""

    def duration(self, level: int) -> float:
        """The wait for one backoff window at ``level``; may be random."""
        ...

    def upper_bound(self, level: int) -> float:
        """The largest value :meth:`duration` can return for ``level`` (used to cap the level)."""
        ...


def _scaled(multiplier: float, level: int) -> float:
    if level < 0:
        raise ValueError(f"backoff level must be >= 0, got {level}")
    if level >= _OVERFLOW_LEVEL:
        return math.inf if multiplier > 0 else 0.0
    return multiplier * 2.0**level


def _check_multiplier(multiplier: float) -> float:
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float):
        raise ConfigError(f"backoff multiplier must be a number of seconds, got {multiplier!r}")
    if not 0 <= multiplier < math.inf:
        raise ConfigError(f"backoff multiplier must be finite and >= 0, got {multiplier!r}")
    return float(multiplier)


class ExponentialBackoff:
    """``multiplier * 2**level`` seconds (go-nsq ``ExponentialStrategy``)."""

    __slots__ = ("multiplier",)

    def __init__(self, multiplier: float) -> None:
        self.multiplier = _check_multiplier(multiplier)

    def duration(self, level: int) -> float:
        return _scaled(self.multiplier, level)

    def upper_bound(self, level: int) -> float:
        return _scaled(self.multiplier, level)

    def __repr__(self) -> str:
        return f"ExponentialBackoff(multiplier={self.multiplier!r})"


class FullJitterBackoff:
    """Uniform in ``[0, multiplier * 2**level)`` seconds (go-nsq ``FullJitterStrategy``)."""

    __slots__ = ("_rng", "multiplier")

    def __init__(self, multiplier: float, *, rng: random.Random | None = None) -> None:
        self.multiplier = _check_multiplier(multiplier)
        self._rng = rng if rng is not None else new_rng()

    def duration(self, level: int) -> float:
        bound = _scaled(self.multiplier, level)
        if bound == 0.0:
            return 0.0
        if bound == math.inf:
            return math.inf
        d = self._rng.random() * bound
        # random() < 1, but the product can round up to ``bound``; keep the interval half-open.
        return d if d < bound else math.nextafter(bound, 0.0)

    def upper_bound(self, level: int) -> float:
        return _scaled(self.multiplier, level)

    def __repr__(self) -> str:
        return f"FullJitterBackoff(multiplier={self.multiplier!r})"
