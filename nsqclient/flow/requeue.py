"""Requeue arithmetic: the delay of an automatic REQ, and when a message has been tried enough.

Both follow go-nsq v1.1 exactly. Delays are in milliseconds, the unit of the REQ command and of
:class:`nsqclient.config.Config`.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError

__all__ = ["requeue_delay_ms", "should_give_up"]


def requeue_delay_ms(
    attempts: int, default_requeue_delay_ms: float, max_requeue_delay_ms: float
) -> int:
    """The delay for a computed requeue: ``default * attempts``, capped at ``max``, in whole ms.

    With the defaults (90 s, 15 min) attempt 1 waits 90 s, attempt 2 180 s, ... attempt 10 and
    later 15 min. Fractions of a millisecond are dropped, as go-nsq drops them when it writes REQ.
    """
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise InvalidArgumentError(f"attempts must be an int >= 0, got {attempts!r}")
    if default_requeue_delay_ms < 0 or max_requeue_delay_ms < 0:
        raise InvalidArgumentError(
            "requeue delays must be >= 0 ms, got "
            f"default={default_requeue_delay_ms!r} max={max_requeue_delay_ms!r}"
        )
    return int(min(default_requeue_delay_ms * attempts, max_requeue_delay_ms))


def should_give_up(attempts: int, max_attempts: int) -> bool:
    """True when a message has passed ``max_attempts`` deliveries (``0`` means never give up).

    nsqd counts the first delivery as attempt 1, so with ``max_attempts=5`` attempts 1-5 are
    handled and attempt 6 is given up on.
    """
    return max_attempts > 0 and attempts > max_attempts
