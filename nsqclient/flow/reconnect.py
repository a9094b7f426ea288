"""How long to wait before the next attempt to reconnect to one nsqd: capped, jittered exponential.

go-nsq retries a dropped nsqd every ``lookupd_poll_interval`` (fixed); the NSQ docs recommend
exponential backoff instead, which this implements. One :class:`ReconnectBackoff` per address; the
caller asks :meth:`~ReconnectBackoff.next_delay` before each attempt and calls
:meth:`~ReconnectBackoff.reset` once a connection is fully up. Seconds throughout.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from ..errors import (
    ConfigError,
    ConnectError,
    ConnectionClosedError,
    NSQTimeoutError,
    TLSError,
    WrongPortError,
)

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["ReconnectBackoff", "worth_retrying"]


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
        self._rng = rng if rng is not None else random.Random()
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
