"""pynsq's and gnsq's names on a delivered message, as a stateless mixin of
:class:`nsqclient.Message`.

Imports nothing of the client: :mod:`nsqclient.message` (at the bottom of the house) builds on it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

__all__ = ["PynsqMessageNames"]


class _Answers(Protocol):
    def fin(self) -> Awaitable[None]: ...

    def req(self, delay_ms: int | None = None, *, backoff: bool = True) -> Awaitable[None]: ...

    def disable_auto_response(self) -> None: ...


class PynsqMessageNames:
    """``finish`` / ``requeue`` / ``enable_async``: pynsq's and gnsq's names for ``fin`` /
    ``req`` / ``disable_auto_response`` (no slots, no state: a message pays nothing for them)."""

    __slots__ = ()

    def finish(self: _Answers) -> Awaitable[None]:
        """pynsq's ``finish()``: :meth:`nsqclient.Message.fin`."""
        return self.fin()

    def requeue(
        self: _Answers, delay_ms: int | None = None, *, backoff: bool = True
    ) -> Awaitable[None]:
        """pynsq's ``requeue()``: :meth:`nsqclient.Message.req` (the delay is ``delay_ms``)."""
        return self.req(delay_ms, backoff=backoff)

    def enable_async(self: _Answers) -> None:
        """pynsq's ``enable_async()``: :meth:`nsqclient.Message.disable_auto_response`."""
        self.disable_auto_response()
