"""The Message a consumer receives, and the small interface it answers through.

One ``Message`` is allocated per delivery, by the frame decoder itself, so the class is lean:
``__slots__``, no per-message futures. ``fin()``, ``req()`` and ``touch()`` never block: they hand
the response to the owning connection's *responder* and return an already-finished awaitable, so
both ``msg.fin()`` (blocking code, handlers) and ``await msg.fin()`` (asyncnsq style) work and
cost the same. Responses are idempotent: the first FIN or REQ wins, later ones send nothing.

The library's other modules reach a message only through its public attributes and the small
responder interface below (:class:`Responder`, :func:`responder_of`, :func:`reroute`): the
answered state and the auto-response flag are plain public slots (read them; ``fin()``, ``req()``
and ``disable_auto_response()`` set them), so reading them costs what a private field did.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol

from .compat.pynsq import ANSWERED, UNANSWERED, PynsqMessageNames, ResponseState

__all__ = ["Message", "Responder", "reroute", "responder_of"]


class Responder(Protocol):
    """What a Message needs from whoever delivered it (a connection, or the sync bridge)."""

    @property
    def address(self) -> str: ...

    @property
    def connection_id(self) -> int: ...

    def message_fin(self, msg: Message) -> None: ...

    def message_req(self, msg: Message, delay_ms: int | None, backoff: bool) -> None: ...

    def message_touch(self, msg: Message) -> None: ...


class _Done:
    """An awaitable that is already complete: ``await msg.fin()`` costs no task or future."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return _EXHAUSTED  # type: ignore[return-value]  # an exhausted iterator: await -> None

    def __repr__(self) -> str:
        return "<done>"


_EXHAUSTED = iter(())  # stays exhausted, so one object serves every await
_DONE = _Done()


class Message(PynsqMessageNames):
    """One delivery of a message from nsqd.

    ``id`` is the 16-byte hex id nsqd assigned (as bytes, the way FIN/REQ/TOUCH take it), ``body``
    the payload, ``timestamp`` nanoseconds since the epoch when it was first published, and
    ``attempts`` how many times nsqd has delivered it on this channel, this delivery included.

    Answer each message once with :meth:`fin` or :meth:`req` (the first answer wins, later ones
    do nothing); :meth:`touch` as often as needed before that. None of them blocks or waits for
    nsqd. A message from :class:`nsqclient.sync.SyncReader` may be answered from any thread; one
    from :class:`nsqclient.aio.Reader` on that Reader's event loop only. pynsq's and gnsq's
    ``finish`` / ``requeue`` (with their call forms, e.g. ``requeue(time_ms=0, backoff=False)``)
    / ``enable_async`` / ``is_async`` come from :mod:`nsqclient.compat`'s mixin, and
    ``has_responded`` may be called as they do (``msg.has_responded()``).
    """

    __slots__ = (
        "_responder",
        "attempts",
        "auto_response",
        "body",
        "has_responded",
        "id",
        "timestamp",
    )

    #: True once FIN or REQ was called (TOUCH does not count). Read it (``if msg.has_responded``,
    #: or call it as pynsq and gnsq do: ``msg.has_responded()``); ``fin()``/``req()`` set it.
    has_responded: ResponseState
    #: False once ``disable_auto_response()`` was called: the handler's return is then ignored.
    auto_response: bool

    def __init__(
        self,
        timestamp: int,
        attempts: int,
        id: bytes,
        body: bytes,
        responder: Responder | None = None,
    ) -> None:
        self.timestamp = timestamp
        self.attempts = attempts
        self.id = id
        self.body = body
        self._responder = responder
        self.has_responded = UNANSWERED
        self.auto_response = True

    # -- responses --

    def fin(self) -> _Done:
        """Tell nsqd the message is done. Does nothing if it was already answered."""
        if not self.has_responded:
            self.has_responded = ANSWERED
            responder = self._responder
            if responder is not None:
                responder.message_fin(self)
        return _DONE

    def req(self, delay_ms: int | None = None, *, backoff: bool = True) -> _Done:
        """Ask nsqd to deliver the message again after ``delay_ms`` milliseconds.

        The default delay grows with attempts (``default_requeue_delay`` up to
        ``max_requeue_delay``); InvalidArgumentError unless an int >= 0. ``backoff=True`` also
        tells the Reader this was a failure, slowing consumption (go-nsq's ``Requeue``);
        ``backoff=False`` is a neutral requeue (``RequeueWithoutBackoff``).
        """
        if delay_ms is not None and (
            isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0
        ):
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"delay_ms must be a non-negative int, got {delay_ms!r}")
        if not self.has_responded:
            self.has_responded = ANSWERED
            responder = self._responder
            if responder is not None:
                responder.message_req(self, delay_ms, backoff)
        return _DONE

    def touch(self) -> _Done:
        """Reset nsqd's timeout for this message (up to its ``max_msg_timeout``)."""
        if not self.has_responded:
            responder = self._responder
            if responder is not None:
                responder.message_touch(self)
        return _DONE

    # -- state --

    def disable_auto_response(self) -> None:
        """Take responsibility for answering: the handler's return will not FIN or REQ it."""
        self.auto_response = False

    @property
    def nsqd_address(self) -> str | None:
        """``host:port`` of the nsqd that delivered this message."""
        responder = self._responder
        return None if responder is None else responder.address

    @property
    def connection_id(self) -> int | None:
        """The id of the connection that delivered this message: the ``connection_id`` of its
        entry in the Reader's ``stats()["connections"]``. Two connections to one address (two
        through one proxy, or one after a reconnect) have different ids; a redelivery after a
        reconnect comes with the new one. None for a message made by hand."""
        responder = self._responder
        return None if responder is None else responder.connection_id

    def __repr__(self) -> str:
        state = "answered" if self.has_responded else "in flight"
        return (
            f"<Message id={self.id.decode('ascii', 'replace')} attempts={self.attempts}"
            f" bytes={len(self.body)} {state}>"
        )


def responder_of(msg: Message) -> Responder | None:
    """Whoever answers for ``msg`` (its connection, or the thread bridge's stand-in for it)."""
    return msg._responder


def reroute(
    messages: list[Message],
    old: Responder | None,
    new: Responder,
    other: Callable[[Responder | None], Responder],
) -> None:
    """Answer ``messages`` through ``new`` instead of ``old`` (a message with another responder
    gets ``other(its responder)``): the thread bridge routes answers from threads to the loop.
    One call per batch, the loop inside: nothing is added per message."""
    for msg in messages:
        current = msg._responder
        msg._responder = new if current is old else other(current)
