"""The :class:`Instrumentation`: tracer, meter, instruments, and the clients it watches.

Imported only once the application turns instrumentation on (it imports ``opentelemetry``).
Two kinds of metrics, so nothing is added per message that the clients do not count already:

* **recorded** where only a call knows the value: publish duration (per PUB/MPUB/DPUB call)
  and handler duration (per handled message) in SDK histograms; sent messages (per publish) and
  requeues by reason (per REQ) in a :class:`Tally` here, observed at collection;
* **observed** at collection time from the clients' own counters and ``stats()``, through
  callbacks: consumed messages, in flight, RDY, backoff, give-ups, connection losses and
  reconnects per nsqd, HTTP-fallback publishes, the sync facade's queues. The same numbers feed
  ``stats()`` and the metrics, so the two cannot disagree.

Each client's observer (spans, recorded metrics) is made by :mod:`._clients`, which sees this
class only through its ``Instruments`` protocol. Nothing here may raise into the application:
every call into OpenTelemetry goes through :func:`~._guard.guarded` (or a ``try``) and a
failure is logged once at WARNING, then at DEBUG.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.trace import Tracer

from .. import __version__, observer
from ..addresses import format_address
from . import _clients
from ._attributes import Key, consumer_attributes, server_attributes, system_attributes
from ._guard import guarded, report

__all__ = ["SEMCONV_VERSION", "Instrumentation", "Tally"]

#: the messaging semantic conventions followed (status "development" there)
SEMCONV_VERSION = "1.27.0"
_SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

#: the bucket boundaries the messaging conventions give for both duration histograms (seconds)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)

#: the ``nsq.requeue.reason`` values of the client's own REQs ("timeout" is nsqd's, from stats)
CLIENT_REQUEUE_REASONS = ("handler_failure", "neutral", "close")


class Instrumentation:
    """What :func:`~nsqclient.observability.instrument` returns: the providers' tracer and
    meter, the instruments, and the clients created since (weakly held).
    ``attach(client)`` instruments one more, e.g. one created before ``instrument()``."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        traces: bool = True,
        metrics_enabled: bool = True,
    ) -> None:
        self.traces = traces
        self.metrics = metrics_enabled
        self.tracer: Tracer = trace.get_tracer(
            "nsqclient", __version__, tracer_provider, schema_url=_SCHEMA_URL
        )
        meter: Meter = metrics.get_meter(
            "nsqclient", __version__, meter_provider, schema_url=_SCHEMA_URL
        )
        self.meter = meter
        self._readers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._writers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._sync_readers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._sync_writers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.operation_duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Publish (PUB, MPUB, DPUB) until nsqd's acknowledgement",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Time in the message handler",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        #: counted here (a dict add under a lock) and observed at collection: a synchronous
        #: SDK counter would cost more per publish than the rest of the instrumentation
        self.sent_messages = Tally()
        self.requeued = Tally()
        self._observables()

    # ------------------------------------------------------------------ attaching clients

    def attach(self, client: Any) -> None:
        """Instrument ``client`` (a Reader, Writer, SyncReader or SyncWriter). Idempotent."""
        guarded("attach", _clients.attach, self, client)

    def observe(self, client: object) -> observer.Observer | None:
        """:class:`nsqclient.observer.ObserverFactory`: a new client's observer (called by
        the client as it is created, once this is installed)."""
        return guarded("attach", _clients.observe, self, client)

    def install(self) -> None:
        """Make this the instrumentation every client created from now on attaches to."""
        observer.install(self)

    def uninstall(self) -> None:
        """Clients created from now on are not instrumented (those attached stay so)."""
        if observer.installed() is self:
            observer.install(None)

    # ------------------------------------------------------------------ observed metrics

    def _observables(self) -> None:
        m = self.meter
        reader = self._reader_points
        writer = self._writer_points
        specs: list[tuple[str, str, str, str, Callable[[], Iterator[tuple[dict[str, Any], float]]]]]
        specs = [
            # (kind, name, unit, description, points)
            (
                "counter",
                "messaging.client.sent.messages",
                "{message}",
                "Messages a publish carried (an MPUB counts its messages)",
                self.sent_messages.points,
            ),
            (
                "counter",
                "nsq.consumer.requeued.messages",
                "{message}",
                "Messages requeued, by nsq.requeue.reason: the client's REQs (handler_failure,"
                " neutral, close) and nsqd's own after a timeout (timeout)",
                self._requeued_points,
            ),
            (
                "counter",
                "messaging.client.consumed.messages",
                "{message}",
                "Messages delivered to this client by nsqd",
                reader("received", receive=True),
            ),
            (
                "counter",
                "nsq.consumer.finished.messages",
                "{message}",
                "Messages FIN'd",
                reader("finished"),
            ),
            (
                "counter",
                "nsq.consumer.given_up.messages",
                "{message}",
                "Messages FIN'd after max_attempts (handed to on_giving_up)",
                reader("given_up"),
            ),
            (
                "counter",
                "nsq.consumer.response_errors",
                "{response}",
                "FIN/REQ/TOUCH nsqd refused: the message had timed out there (nsqd requeued it)",
                reader("response_errors"),
            ),
            (
                "counter",
                "nsq.consumer.lost_on_disconnect.messages",
                "{message}",
                "Messages in flight on a connection that died (nsqd redelivers them)",
                reader("lost_on_disconnect"),
            ),
            (
                "updown",
                "nsq.consumer.in_flight.messages",
                "{message}",
                "Delivered and not yet answered",
                reader("in_flight"),
            ),
            (
                "updown",
                "nsq.consumer.queued.messages",
                "{message}",
                "Delivered, waiting for a handler or an iteration",
                reader("queued"),
            ),
            (
                "updown",
                "nsq.consumer.rdy",
                "{message}",
                "RDY granted over all connections",
                reader("total_rdy"),
            ),
            (
                "updown",
                "nsq.consumer.max_in_flight",
                "{message}",
                "The RDY budget (max_in_flight)",
                reader("max_in_flight"),
            ),
            (
                "updown",
                "nsq.consumer.connection.rdy",
                "{message}",
                "RDY granted per nsqd connection",
                self._rdy_points,
            ),
            (
                "gauge",
                "nsq.consumer.backoff.level",
                "{level}",
                "Consecutive-failure backoff level (0: not backing off)",
                reader("backoff_level"),
            ),
            (
                "counter",
                "nsq.connection.losses",
                "{connection}",
                "Connections to an nsqd lost (not closed on purpose)",
                self._outage_points("losses"),
            ),
            (
                "counter",
                "nsq.connection.reconnects",
                "{connection}",
                "Outages of an nsqd that ended with a new connection",
                self._outage_points("reconnects"),
            ),
            (
                "counter",
                "nsq.producer.http_fallback.messages",
                "{message}",
                "Messages acknowledged over the HTTP fallback",
                writer("published_over_http"),
            ),
            (
                "counter",
                "nsq.producer.resent",
                "{publish}",
                "Publishes sent again because nsqd never executed them",
                writer("resent"),
            ),
            (
                "counter",
                "nsq.producer.coalesced.batches",
                "{batch}",
                "MPUBs sent by publish coalescing (coalesce=True), each carrying two or more"
                " callers' PUBs (the callers' publishes are counted as without it)",
                writer("coalesced_batches"),
            ),
            (
                "counter",
                "nsq.producer.coalesced.messages",
                "{message}",
                "The callers' PUBs that went in those MPUBs",
                writer("coalesced_messages"),
            ),
            (
                "updown",
                "nsq.producer.outstanding",
                "{publish}",
                "Publishes sent, not yet acknowledged",
                writer("outstanding"),
            ),
            (
                "updown",
                "nsq.sync.bridge.depth",
                "{message}",
                "SyncReader: delivered messages crossing to (or buffered for) threads",
                self._bridge_points,
            ),
            (
                "updown",
                "nsq.sync.publish_queue.depth",
                "{publish}",
                "SyncWriter: publishes waiting to cross to the loop",
                self._publish_queue_points,
            ),
            (
                "counter",
                "nsq.sync.publish_queue.waits",
                "{publish}",
                "SyncWriter: publishes that found the queue full and waited",
                self._wait_points,
            ),
        ]
        make = {
            "counter": m.create_observable_counter,
            "updown": m.create_observable_up_down_counter,
            "gauge": m.create_observable_gauge,
        }
        for kind, name, unit, description, points in specs:
            make[kind](name, [self._callback(name, points)], unit=unit, description=description)

    def _callback(
        self, name: str, points: Callable[[], Iterator[tuple[dict[str, Any], float]]]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            # several clients may share attributes (two Readers of one channel): one sum each
            if not self.metrics:
                return []
            sums: dict[tuple[tuple[str, Any], ...], float] = {}
            try:
                for attrs, value in points():
                    key = tuple(sorted(attrs.items()))
                    sums[key] = sums.get(key, 0) + value
            except Exception:
                report(f"observing {name}")
            return [Observation(v, dict(k)) for k, v in sums.items()]

        return callback

    @staticmethod
    def _stats(client: Any) -> dict[str, Any] | None:
        # read from the exporter's thread while the loop may change a dict: retry, else skip
        for _ in range(3):
            try:
                result: dict[str, Any] = client.stats()
                return result
            except RuntimeError:
                continue
        return None

    def _requeued_points(self) -> Iterator[tuple[dict[str, Any], float]]:
        # every reason of every Reader from the start, zero until it happens: a rate() alert on
        # one needs the series before its first event (the callback sums the zero in)
        for reader in list(self._readers):
            for reason in CLIENT_REQUEUE_REASONS:
                attrs = consumer_attributes(reader.topic, reader.channel)
                attrs["nsq.requeue.reason"] = reason
                yield attrs, 0.0
        yield from self.requeued.points()
        for attrs, count in self._reader_points("timed_out")():
            attrs["nsq.requeue.reason"] = "timeout"
            yield attrs, count

    def _reader_points(
        self, key: str, *, receive: bool = False
    ) -> Callable[[], Iterator[tuple[dict[str, Any], float]]]:
        def points() -> Iterator[tuple[dict[str, Any], float]]:
            for reader in list(self._readers):
                stats = self._stats(reader)
                if stats is None:
                    continue
                attrs = consumer_attributes(reader.topic, reader.channel)
                if receive:
                    attrs["messaging.operation.name"] = "receive"
                    attrs["messaging.operation.type"] = "receive"
                yield attrs, float(stats[key])

        return points

    def _writer_points(self, key: str) -> Callable[[], Iterator[tuple[dict[str, Any], float]]]:
        def points() -> Iterator[tuple[dict[str, Any], float]]:
            for writer in list(self._writers):
                stats = self._stats(writer)
                if stats is not None:
                    yield system_attributes(), float(stats[key])

        return points

    def _rdy_points(self) -> Iterator[tuple[dict[str, Any], float]]:
        for reader in list(self._readers):
            stats = self._stats(reader)
            if stats is None:
                continue
            for conn in stats["connections"]:
                attrs = consumer_attributes(reader.topic, reader.channel)
                attrs.update(server_attributes(conn["address"]))
                yield attrs, float(conn["rdy"])

    def _outage_points(self, which: str) -> Callable[[], Iterator[tuple[dict[str, Any], float]]]:
        def points() -> Iterator[tuple[dict[str, Any], float]]:
            for role, clients in (("consumer", self._readers), ("producer", self._writers)):
                for client in list(clients):
                    nodes = client._nodes
                    counts: dict[str, int] = dict(getattr(nodes.outages, f"{which}_by"))
                    # every nsqd the client knows (configured, or listed by lookupd), zero until
                    # its first loss: the series exists before a rate() alert needs it
                    for addr in nodes.addresses:
                        counts.setdefault(format_address(*addr), 0)
                    for address, count in counts.items():
                        attrs = system_attributes()
                        attrs["nsq.client.role"] = role
                        attrs.update(server_attributes(address))
                        yield attrs, float(count)

        return points

    def _bridge_points(self) -> Iterator[tuple[dict[str, Any], float]]:
        for sync_reader in list(self._sync_readers):
            depth = len(sync_reader._local) + len(sync_reader._work_queue)
            sink = getattr(sync_reader, "_sink", None)
            if sink is not None:
                depth += len(sink)
            yield consumer_attributes(sync_reader.topic, sync_reader.channel), float(depth)

    def _publish_queue_points(self) -> Iterator[tuple[dict[str, Any], float]]:
        for sync_writer in list(self._sync_writers):
            queue = getattr(sync_writer, "_queue", None)
            if queue is not None:
                yield system_attributes(), float(len(queue))

    def _wait_points(self) -> Iterator[tuple[dict[str, Any], float]]:
        for sync_writer in list(self._sync_writers):
            queue = getattr(sync_writer, "_queue", None)
            if queue is not None:
                yield system_attributes(), float(queue.full_waits)


class Tally:
    """A counter kept by attribute set until collection (thread-safe: SyncWriter publishes
    from many threads). ``add(n, key)`` takes a key from :func:`~._attributes.key_of`, made once per
    attribute set by the caller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Key, float] = {}

    def add(self, amount: float, key: Key) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + amount

    def points(self) -> Iterator[tuple[dict[str, Any], float]]:
        with self._lock:
            counts = list(self._counts.items())
        for key, count in counts:
            yield dict(key), count
