"""pynsq's and gnsq's names on a delivered message, as a stateless mixin of
:class:`nsqclient.Message`, and the answered flag that reads both ways.

A handler moved from pynsq must keep working: an error raised by a call form nsqclient did not
accept is caught by the Reader as a handler failure, so the message is retried with backoff and
finally given up (a migrated ``msg.requeue(time_ms=0, backoff=False)`` would quietly dead-letter
what it meant to requeue). So these accept pynsq's and gnsq's call forms as they are.

Imports nothing of the client but its errors: :mod:`nsqclient.message` (at the bottom of the
house) builds on it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final, Protocol

__all__ = ["ANSWERED", "UNANSWERED", "PynsqMessageNames", "ResponseState"]


class ResponseState(int):
    """Whether a message was answered (FIN or REQ; TOUCH does not count).

    Reads as a bool (``if msg.has_responded:``, nsqclient's form) and is callable
    (``msg.has_responded()``, pynsq's and gnsq's form). An ``int`` subclass, as ``bool`` is,
    so testing it costs what testing a bool did (its truth is int's, in C); compare it with
    ``if``/``not`` or ``==``, not ``is True``. The two values are :data:`ANSWERED` and
    :data:`UNANSWERED`.
    """

    __slots__ = ()

    def __call__(self) -> bool:
        """pynsq's and gnsq's ``message.has_responded()``."""
        return self != 0

    def __repr__(self) -> str:
        return "True" if self else "False"

    __str__ = __repr__


ANSWERED: Final = ResponseState(1)
UNANSWERED: Final = ResponseState(0)


class _Answers(Protocol):
    auto_response: bool

    def fin(self) -> Awaitable[None]: ...

    def req(self, delay_ms: int | None = None, *, backoff: bool = True) -> Awaitable[None]: ...

    def disable_auto_response(self) -> None: ...


class PynsqMessageNames:
    """``finish`` / ``requeue`` / ``enable_async`` / ``is_async``: pynsq's and gnsq's names for
    ``fin`` / ``req`` / ``disable_auto_response`` / ``not auto_response`` (no slots, no state:
    a message pays nothing for them). ``has_responded()`` is :class:`ResponseState`."""

    __slots__ = ()

    def finish(self: _Answers) -> Awaitable[None]:
        """pynsq's ``finish()``: :meth:`nsqclient.Message.fin`."""
        return self.fin()

    def requeue(
        self: _Answers,
        time_ms: int | None = None,
        backoff: bool = True,
        *,
        delay: float | None = None,
        delay_ms: int | None = None,
    ) -> Awaitable[None]:
        """pynsq's and gnsq's ``requeue()``: :meth:`nsqclient.Message.req` with their call forms.

        pynsq's ``requeue(time_ms=0, backoff=False)``, gnsq's ``requeue(0, False)`` and
        nsqclient's ``requeue(delay_ms=0, backoff=False)`` all work. The delay is given once:
        ``time_ms`` (milliseconds: pynsq's keyword, gnsq's first argument), ``delay`` (seconds:
        pynsq's older keyword) or ``delay_ms`` (milliseconds: nsqclient's name). None or a
        negative value (pynsq's ``-1``) means the default delay (``default_requeue_delay`` times
        the attempts, capped by ``max_requeue_delay``), as in pynsq; ``delay=0`` requeues at
        once. ``backoff=False`` is a neutral requeue, as in pynsq. Anything else raises
        InvalidArgumentError naming these forms, before anything is sent.
        """
        given = [
            (name, value)
            for name, value in (("time_ms", time_ms), ("delay", delay), ("delay_ms", delay_ms))
            if value is not None
        ]
        if not given:
            return self.req(None, backoff=backoff)
        name, value = given[0]
        kinds = (int, float) if name == "delay" else (int,)
        if len(given) > 1 or isinstance(value, bool) or not isinstance(value, kinds):
            from ..errors import InvalidArgumentError

            got = ", ".join(f"{n}={v!r}" for n, v in given)
            raise InvalidArgumentError(
                "requeue() takes one delay: time_ms=<int ms> (or as the first argument), "
                "delay=<seconds> or delay_ms=<int ms>; a negative one means the default delay "
                f"(default_requeue_delay x attempts); got {got}"
            )
        if value < 0:
            return self.req(None, backoff=backoff)
        return self.req(round(value * 1000) if name == "delay" else int(value), backoff=backoff)

    def enable_async(self: _Answers) -> None:
        """pynsq's ``enable_async()``: :meth:`nsqclient.Message.disable_auto_response`."""
        self.disable_auto_response()

    def is_async(self: _Answers) -> bool:
        """pynsq's and gnsq's ``is_async()``: True once ``enable_async()`` (or
        ``disable_auto_response()``) was called."""
        return not self.auto_response
