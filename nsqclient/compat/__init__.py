"""Other clients' names, kept together so code written for asyncnsq, pynsq or gnsq runs with few
edits, and the core classes carry one name per thing.

What lives here:

- :func:`create_reader` and :func:`create_writer`, asyncnsq's constructors (in
  :mod:`nsqclient.compat.asyncnsq`). ``create_reader`` returns an :class:`AsyncnsqReader`: a
  :class:`nsqclient.aio.Reader` with asyncnsq's ``subscribe(topic, channel)`` and ``connect()``
  (its two-step start), ``clean_close()`` (= ``graceful_close``) and ``wait_handler_tasks()``.
- :class:`PynsqMessageNames` (in :mod:`nsqclient.compat.pynsq`), the mixin that gives every
  :class:`nsqclient.Message` pynsq's and gnsq's ``finish()`` / ``requeue()`` (= ``fin`` /
  ``req``) and ``enable_async()`` (= ``disable_auto_response``). It is a mixin with no state, so
  it costs a delivered message nothing.

asyncnsq's variadic ``mpub(topic, a, b)`` is not kept: ``mpub(topic, [a, b])`` is the one form
in every face, so a single ``str`` or ``bytes`` can be refused instead of split into messages.

New code uses the core names: ``Reader(topic, channel, ...)`` + ``start()`` (or ``async with``),
``Writer(...)`` + ``connect()``, ``fin``/``req``, ``graceful_close``.

Layering: :mod:`.pynsq` imports nothing (``nsqclient.message`` builds on it, at the bottom);
:mod:`.asyncnsq` builds on :mod:`nsqclient.aio`, so this package loads it on first use of its
names (importing ``nsqclient.compat`` from the message module must not load the Reader).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .pynsq import PynsqMessageNames

__all__ = ["AsyncnsqReader", "PynsqMessageNames", "create_reader", "create_writer"]

if TYPE_CHECKING:
    from .asyncnsq import AsyncnsqReader, create_reader, create_writer

_ASYNCNSQ_NAMES = frozenset({"AsyncnsqReader", "create_reader", "create_writer"})


def __getattr__(name: str) -> Any:
    if name in _ASYNCNSQ_NAMES:
        from . import asyncnsq

        return getattr(asyncnsq, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
