"""Decisions with no I/O: RDY distribution, consumer backoff, reconnect delays. Clock injected."""

from __future__ import annotations

from .backoff import BackoffStrategy, ExponentialBackoff, FullJitterBackoff, Outcome
from .rdy import MAX_BACKOFF_LEVEL, RdyChange, RdyController, per_connection_share
from .reconnect import (
    ReconnectBackoff,
    ReconnectSchedule,
    lookupd_retry_backoff,
    worth_retrying,
)
from .requeue import requeue_delay_ms, should_give_up

__all__ = [
    "MAX_BACKOFF_LEVEL",
    "BackoffStrategy",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "Outcome",
    "RdyChange",
    "RdyController",
    "ReconnectBackoff",
    "ReconnectSchedule",
    "lookupd_retry_backoff",
    "per_connection_share",
    "requeue_delay_ms",
    "should_give_up",
    "worth_retrying",
]
