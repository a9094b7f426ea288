"""Instrumented clients: each gets an observer (:class:`nsqclient.observer.Observer`).

The clients call their observer at each publish, delivery, handler call, settle and lost
connection (one attribute check when off); nothing is subclassed or swapped at run time.
With it on:

* Writer / SyncWriter: a PRODUCER span and one duration + sent-messages record per PUB, MPUB (one
  per batch) and DPUB, whichever way it was published (``pub``/``mpub``/``dpub``,
  ``publish_nowait``, the ``*_nowait`` calls, over the HTTP fallback or resent), ended by nsqd's
  acknowledgement or the error.
* Reader handler mode (``set_message_handler``, ``SyncReader.run``): a CONSUMER ``process`` span
  around each handler call, current while it runs (so the handler's own spans are its children),
  and the handler's duration.
* Reader ``async for`` / SyncReader iteration: a CONSUMER ``process`` span per message from
  delivery to its FIN or REQ (not current: no code runs "inside" it).
* Every REQ: a count by reason.

The observers use the instruments through :class:`Instruments` (a protocol: the
:class:`~._instrumentation.Instrumentation` creates them, so this module imports nothing of it).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from opentelemetry import context, trace
from opentelemetry.metrics import Histogram
from opentelemetry.trace import Link, Span, SpanKind, StatusCode, Tracer

from ..observer import Observer
from ._attributes import (
    Key,
    consumer_attributes,
    error_type,
    key_of,
    server_attributes,
    system_attributes,
)
from ._envelope import extract_link
from ._guard import guarded, report

__all__ = ["Instruments", "PublishObserver", "ReaderObserver", "attach", "observe"]


class Counts(Protocol):
    """A count by attribute set (:class:`~._instrumentation.Tally`)."""

    def add(self, amount: float, key: Key) -> None: ...


class Instruments(Protocol):
    """What of the :class:`~._instrumentation.Instrumentation` the observers use: whether
    traces and metrics are on, the tracer, the instruments, and the registries of the
    clients it watches (weakly held) that its observed metrics read."""

    traces: bool
    metrics: bool
    tracer: Tracer
    operation_duration: Histogram
    process_duration: Histogram
    _readers: weakref.WeakSet[Any]
    _writers: weakref.WeakSet[Any]
    _sync_readers: weakref.WeakSet[Any]
    _sync_writers: weakref.WeakSet[Any]

    @property
    def sent_messages(self) -> Counts: ...

    @property
    def requeued(self) -> Counts: ...


def attach(instr: Instruments, client: Any) -> None:
    """Instrument a client that exists already (its observer attribute set here)."""
    obs = observe(instr, client)
    if obs is not None:
        client._obs = obs


def observe(instr: Instruments, client: Any) -> Observer | None:
    """The observer for a new ``client``: a Writer's, SyncWriter's or Reader's; a SyncReader is
    only registered for its metrics (its core Reader reports the events): None. Idempotent."""
    from ..aio.reader import Reader
    from ..aio.writer import Writer
    from ..sync.reader import SyncReader
    from ..sync.writer import SyncWriter

    if getattr(client, "_nsq_instr", None) is not None:
        return None
    publishers: list[tuple[type, Any]] = [
        (Writer, instr._writers),
        (SyncWriter, instr._sync_writers),
    ]
    for kind, registry in publishers:
        if isinstance(client, kind):
            setattr(client, "_nsq_instr", instr)  # noqa: B010 (narrowed to object here)
            registry.add(client)
            return PublishObserver(instr, client)
    if isinstance(client, Reader):
        obj: Any = client
        obj._nsq_instr = instr
        obj._nsq_servers = {}
        instr._readers.add(client)
        return ReaderObserver(instr, client)
    if isinstance(client, SyncReader):  # registered for its metrics; its core reports events
        setattr(client, "_nsq_instr", instr)  # noqa: B010 (narrowed to object here)
        instr._sync_readers.add(client)
        return None
    raise TypeError(f"cannot instrument {client!r}: not an nsqclient Reader or Writer")


# ---------------------------------------------------------------------- publishing


class _Send:
    """One publish in progress: its span (if tracing) and start time."""

    __slots__ = ("count", "instr", "labels", "span", "start")

    def __init__(self, instr: Instruments, labels: _Labels, count: int) -> None:
        self.labels = labels
        self.count = count
        self.instr = instr
        self.span: Span | None = None
        if instr.traces:
            span_attrs = labels.attrs
            if labels.verb == "mpub":
                span_attrs = {**span_attrs, "messaging.batch.message_count": count}
            self.span = instr.tracer.start_span(
                labels.span_name, kind=SpanKind.PRODUCER, attributes=span_attrs
            )
        self.start = time.perf_counter()

    def end(self, exc: BaseException | None) -> None:
        elapsed = time.perf_counter() - self.start
        labels = self.labels
        instr = self.instr
        if exc is None:
            attrs, key = labels.attrs, labels.key
        else:
            attrs = {**labels.attrs, "error.type": error_type(exc)}
            key = key_of(attrs)
        if instr.metrics:
            instr.operation_duration.record(elapsed, attrs)
            instr.sent_messages.add(self.count, key)
        span = self.span
        if span is not None:
            if exc is not None:
                span.set_attribute("error.type", attrs["error.type"])
                span.set_status(StatusCode.ERROR, str(exc))
            span.end()


class _Labels:
    """The attributes of one client's publishes of one kind to one topic, made once."""

    __slots__ = ("attrs", "key", "span_name", "verb")

    def __init__(self, verb: str, topic: str, server: dict[str, Any] | None) -> None:
        attrs = system_attributes()
        attrs["messaging.operation.type"] = "send"
        attrs["messaging.operation.name"] = verb
        attrs["messaging.destination.name"] = topic
        if server:
            attrs.update(server)
        self.attrs = attrs
        self.key = key_of(attrs)
        self.verb = verb
        self.span_name = f"{verb} {topic}"


_MAX_LABELS = 1000  # topics per client remembered (more: made per call)


def _labels(cache: dict[tuple[str, str], _Labels], client: Any, verb: str, topic: str) -> _Labels:
    labels = cache.get((verb, topic))
    if labels is None:
        labels = _Labels(verb, topic, _server(client))
        if len(cache) < _MAX_LABELS:
            cache[(verb, topic)] = labels
    return labels


class PublishObserver(Observer):
    """One Writer's or SyncWriter's publishes as spans and metrics (never raises)."""

    __slots__ = ("_client", "_instr", "_labels")

    def __init__(self, instr: Instruments, client: Any) -> None:
        self._instr = instr
        self._client = client
        self._labels: dict[tuple[str, str], _Labels] = {}

    def publish_started(self, verb: str, topic: str, count: int) -> _Send | None:
        try:
            return _Send(self._instr, _labels(self._labels, self._client, verb, topic), count)
        except Exception:
            report("publish span")
            return None

    def publish_settled(self, token: Any, error: BaseException | None) -> None:
        if token is not None:
            guarded("publish span", token.end, error)


def _server(client: Any) -> dict[str, Any] | None:
    """``server.address``/``port`` when the Writer has one nsqd (else which one is not known
    before the call picks it)."""
    nodes = getattr(client, "_nodes", None)  # a Writer's node set, else a SyncWriter's options
    checked = getattr(client, "_checked", None)
    if nodes is not None:
        addresses: Any = nodes.addresses
    else:
        addresses = getattr(checked, "nsqd_tcp_addresses", None)
    if isinstance(addresses, list) and len(addresses) == 1:
        addr = addresses[0]
        if isinstance(addr, tuple):
            return {"server.address": addr[0], "server.port": addr[1]}
        if isinstance(addr, str):
            return server_attributes(addr)
    if isinstance(addresses, str) and "," not in addresses:
        return server_attributes(addresses)
    return None


# ---------------------------------------------------------------------- consuming


def _process_attributes(client: Any, msg: Any) -> dict[str, Any]:
    """The process attributes of ``client`` (made once; callers must not change them)."""
    attrs: dict[str, Any] | None = client.__dict__.get("_nsq_process_attrs")
    if attrs is None:
        attrs = consumer_attributes(client.topic, client.channel)
        attrs["messaging.operation.type"] = "process"
        attrs["messaging.operation.name"] = "process"
        client._nsq_process_attrs = attrs
    return attrs


def _span_attributes(client: Any, msg: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    span_attrs = dict(attrs)
    span_attrs["messaging.message.id"] = msg.id.decode("ascii", "replace")
    span_attrs["messaging.message.body.size"] = len(msg.body)
    span_attrs["nsq.message.attempts"] = msg.attempts
    address = msg.nsqd_address
    if address is not None:
        servers: dict[str, dict[str, Any]] = client._nsq_servers
        server = servers.get(address)
        if server is None:
            server = servers[address] = server_attributes(address)
        span_attrs.update(server)
    return span_attrs


def _start_process(client: Any, msg: Any, attrs: dict[str, Any]) -> Span:
    instr: Instruments = client._nsq_instr
    link = extract_link(msg.body)
    return instr.tracer.start_span(
        f"process {client.topic}",
        kind=SpanKind.CONSUMER,
        attributes=_span_attributes(client, msg, attrs),
        links=[Link(link)] if link is not None else None,
    )


class _Process:
    """One handler call: its span (current while the handler runs) and start time."""

    __slots__ = ("attrs", "client", "span", "start", "token")

    def __init__(self, client: Any, msg: Any) -> None:
        self.client = client
        self.attrs = _process_attributes(client, msg)
        self.span: Span | None = None
        self.token: Any = None
        if client._nsq_instr.traces:
            self.span = _start_process(client, msg, self.attrs)
            self.token = context.attach(trace.set_span_in_context(self.span))
        self.start = time.perf_counter()

    def end(self, exc: BaseException | None, result: object) -> None:
        elapsed = time.perf_counter() - self.start
        attrs = self.attrs
        if exc is not None:
            attrs = {**attrs, "error.type": error_type(exc)}
        instr: Instruments = self.client._nsq_instr
        if instr.metrics:
            instr.process_duration.record(elapsed, attrs)
        span = self.span
        if span is not None:
            if self.token is not None:
                context.detach(self.token)
            outcome = "req" if exc is not None or result is False else "fin"
            span.set_attribute("nsq.message.outcome", outcome)
            if exc is not None:
                span.set_attribute("error.type", attrs["error.type"])
                span.set_status(StatusCode.ERROR, str(exc))
            span.end()


def _start_handler(client: Any, msg: Any) -> _Process | None:
    try:
        return _Process(client, msg)
    except Exception:
        report("process span")
        return None


def _end_handler(op: _Process | None, exc: BaseException | None, result: object) -> None:
    if op is not None:
        guarded("process span", op.end, exc, result)


def wrap_handler(client: Any, handler: Callable[[Any], Any], is_async: bool) -> Any:
    """``handler`` inside a process span and a duration record, same contract and same kind
    (a coroutine function stays one, so the Reader still awaits it)."""
    if is_async:

        async def instrumented_async(msg: Any) -> Any:
            op = _start_handler(client, msg)
            try:
                result = await handler(msg)
            except BaseException as exc:
                _end_handler(op, exc, None)
                raise
            _end_handler(op, None, result)
            return result

        return instrumented_async

    def instrumented(msg: Any) -> Any:
        op = _start_handler(client, msg)
        try:
            result = handler(msg)
        except BaseException as exc:
            _end_handler(op, exc, None)
            raise
        _end_handler(op, None, result)
        return result

    return instrumented


class ReaderObserver(Observer):
    """One core Reader: handler spans, delivery-to-settle spans, requeue reasons."""

    __slots__ = ("_client", "_handler_mode", "_instr", "_spans")

    def __init__(self, instr: Instruments, client: Any) -> None:
        self._instr = instr
        self._client = client
        self._spans: dict[Any, Span] = {}
        self._handler_mode = False

    @property
    def watch_settles(self) -> bool:
        # while tracing iterated messages, every FIN must reach settled() (ends a span)
        return self._instr.traces and not self._handler_mode

    def wrap_handler(self, handler: Callable[[Any], Any], is_async: bool) -> Callable[[Any], Any]:
        wrapped: Callable[[Any], Any] | None = guarded(
            "wrap handler", wrap_handler, self._client, handler, is_async
        )
        return handler if wrapped is None else wrapped

    def handler_mode(self, on: bool) -> None:
        self._handler_mode = on

    def delivered(self, messages: list[Any]) -> None:
        if self._instr.traces and not self._handler_mode:
            guarded("delivery spans", self._delivered, messages)

    def _delivered(self, messages: list[Any]) -> None:
        spans = self._spans
        client = self._client
        attrs = _process_attributes(client, None)
        for msg in messages:
            spans[msg] = _start_process(client, msg, attrs)

    def settled(self, msg: Any, fin: bool, backoff: bool) -> None:
        guarded("settle", self._settled, msg, fin, backoff)

    def _settled(self, msg: Any, fin: bool, backoff: bool) -> None:
        instr = self._instr
        client = self._client
        if not fin and instr.metrics:
            running = getattr(client, "state", None)
            closing = running is not None and running.value != "running"
            reason = "close" if closing else ("handler_failure" if backoff else "neutral")
            keys: dict[str, Any] = client.__dict__.setdefault("_nsq_requeue_keys", {})
            key = keys.get(reason)
            if key is None:
                attrs = consumer_attributes(client.topic, client.channel)
                attrs["nsq.requeue.reason"] = reason
                key = keys[reason] = key_of(attrs)
            instr.requeued.add(1, key)
        span = self._spans.pop(msg, None)
        if span is not None:
            span.set_attribute("nsq.message.outcome", "fin" if fin else "req")
            span.end()

    def connection_lost(self, conn: Any) -> None:
        if self._spans:
            guarded("lost spans", self._lost, conn)

    def _lost(self, conn: Any) -> None:
        spans = self._spans
        for msg in list(conn.in_flight.values()):
            span = spans.pop(msg, None)
            if span is not None:
                span.set_attribute("nsq.message.outcome", "lost")
                span.set_attribute("error.type", "connection_lost")
                span.set_status(StatusCode.ERROR, "the connection to nsqd was lost")
                span.end()
