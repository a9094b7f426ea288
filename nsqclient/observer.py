"""The observer interface: what the clients report, declared at the bottom of the house.

The clients (the asyncio Writer and Reader, the SyncWriter) hold an observer in one
attribute, None unless one was attached, and call it at the points below; an adapter (the
OpenTelemetry one in :mod:`nsqclient.observability`) implements :class:`Observer`. Imports
nothing of ``aio`` or ``sync``, so those import it without a loop. Off costs one attribute
check per event.

:func:`install` sets the factory that clients created from then on ask for their observer (each
client gets its own, e.g. for per-client label caches); ``observe(client)`` returns None to leave
one alone. Observer methods must not raise (the clients do not guard them) and must not block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Observer", "ObserverFactory", "install", "installed", "observer_for"]


class Observer:
    """The events a client reports; every method here does nothing (subclass what you need).

    Publishing: ``publish_started`` when a publish call begins (before its body is checked),
    returning a token that the same publish's ``publish_settled`` gets back once nsqd
    acknowledged it (``error`` None) or it failed; a batch (``mpub``) is one publish of
    ``count`` messages. Delivery: ``wrap_handler`` (handler style: the Reader's handler, the
    SyncReader's ``run``) returns the callable to run instead; ``delivered`` and ``settled``
    bracket a message consumed by iteration (``async for``, sync ``get``/iteration) or any FIN/REQ;
    ``connection_lost`` comes before the in-flight messages of ``conn`` are forgotten.

    The SyncReader's ``run`` reports through its core Reader's observer (its handler calls are
    the handler style); its iteration is the core Reader's delivery and settles.
    """

    __slots__ = ()

    @property
    def watch_settles(self) -> bool:
        """The Reader must report every FIN to :meth:`settled` (e.g. a span per iterated
        message); read when the Reader decides whether its connections report FINs."""
        return False

    def publish_started(self, verb: str, topic: str, count: int) -> Any:
        return None

    def publish_settled(self, token: Any, error: BaseException | None) -> None:
        return None

    def wrap_handler(self, handler: Callable[[Any], Any], is_async: bool) -> Callable[[Any], Any]:
        return handler

    def handler_mode(self, on: bool) -> None:
        """The client's delivery style changed: handler (True) or iteration (False)."""
        return None

    def delivered(self, messages: list[Any]) -> None:
        return None

    def settled(self, msg: Any, fin: bool, backoff: bool) -> None:
        return None

    def connection_lost(self, conn: Any) -> None:
        return None


class ObserverFactory(Protocol):
    """What :func:`install` takes: gives each new client its observer, or None."""

    def observe(self, client: object) -> Observer | None: ...


_factory: ObserverFactory | None = None


def install(factory: ObserverFactory | None) -> None:
    """Clients created from now on ask ``factory`` for their observer (None: no observer)."""
    global _factory
    _factory = factory


def installed() -> ObserverFactory | None:
    """The factory :func:`install` set, if any."""
    return _factory


def observer_for(client: object) -> Observer | None:
    """The observer a new ``client`` gets: the installed factory's, or None (read once, at
    creation, never per message)."""
    factory = _factory
    return None if factory is None else factory.observe(client)
