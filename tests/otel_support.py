"""OpenTelemetry SDK fixtures for the instrumentation tests: an in-memory span exporter and
metric reader behind ``nsqclient.instrument()``, and helpers to read what they hold."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nsqclient.observability import instrument, uninstrument


@dataclass
class Telemetry:
    spans_exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    instrumentation: Any

    def spans(self, name_prefix: str = "") -> list[ReadableSpan]:
        return [
            s for s in self.spans_exporter.get_finished_spans() if s.name.startswith(name_prefix)
        ]

    def points(self, name: str) -> list[Any]:
        """Every data point of metric ``name`` now (collects)."""
        data = self.reader.get_metrics_data()
        found = []
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def value(self, name: str, **attrs: Any) -> float:
        """Sum of the points of ``name`` whose attributes include ``attrs`` (dots as ``__``)."""
        wanted = {k.replace("__", "."): v for k, v in attrs.items()}
        total = 0.0
        for point in self.points(name):
            if all(point.attributes.get(k) == v for k, v in wanted.items()):
                total += point.count if hasattr(point, "bucket_counts") else point.value
        return total


def make_telemetry(**options: Any) -> Telemetry:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    instr = instrument(tracer_provider=tracer_provider, meter_provider=meter_provider, **options)
    return Telemetry(exporter, reader, instr)


def installed_telemetry(**options: Any) -> Iterator[Telemetry]:
    """For a fixture: ``instrument()`` with the SDK's in-memory exporter and reader, undone
    after (``yield from installed_telemetry()``)."""
    try:
        yield make_telemetry(**options)
    finally:
        uninstrument()
