"""Telemetry never breaks a client: every call into OpenTelemetry, from the instrumentation
and from the clients' observers alike, goes through :func:`guarded` (or a ``try`` that calls
:func:`report`), and a failure is logged once at WARNING, then at DEBUG."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["guarded", "report"]

log = logging.getLogger("nsqclient.observability")

P = ParamSpec("P")
T = TypeVar("T")
#: failures so far; only picks the log level (threads racing on it may log a second WARNING)
_failures = 0


def report(what: str) -> None:
    """Log the exception being handled: the first failure at WARNING, the next at DEBUG."""
    global _failures
    _failures += 1
    level = logging.WARNING if _failures == 1 else logging.DEBUG
    log.log(level, "nsqclient instrumentation failed (%s); the client goes on", what, exc_info=True)


def guarded(what: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
    """``fn(*args, **kwargs)``, or None if it raised (logged): telemetry never breaks a client."""
    try:
        return fn(*args, **kwargs)
    except Exception:
        report(what)
        return None
