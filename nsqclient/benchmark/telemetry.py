"""``--otel metrics|traces``: run the scenarios with nsqclient's OpenTelemetry instrumentation on,
to measure what it costs per message (compare the CPU µs/msg with a run without ``--otel``).

The SDK is configured the way a service would, with in-memory sinks so no exporter's network
or serialisation cost is counted: ``metrics`` is a MeterProvider with an InMemoryMetricReader
(recording and aggregation; collection happens once, at the end); ``traces`` adds a
TracerProvider whose SimpleSpanProcessor hands every span to an InMemorySpanExporter (cleared
after each collection so memory stays flat). Needs ``opentelemetry-sdk`` (the test extra).
"""

from __future__ import annotations

from typing import Any

__all__ = ["MODES", "enable"]

MODES = ("off", "metrics", "traces")


def enable(mode: str) -> Any:
    """Instrument every client created from now on; returns what to keep alive (or None)."""
    if mode == "off":
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError as exc:
        raise SystemExit(
            "--otel needs the OpenTelemetry SDK: pip install 'nsqclient[otel]' opentelemetry-sdk"
        ) from exc

    from ..observability import instrument

    class Forgetful(SpanExporter):
        """The in-memory exporter, emptied every 10,000 spans (a long run would otherwise hold
        millions of spans and measure the garbage collector)."""

        def __init__(self, inner: InMemorySpanExporter) -> None:
            self.inner = inner
            self.count = 0

        def export(self, spans: Any) -> Any:
            self.count += len(spans)
            if self.count >= 10_000:
                self.count = 0
                self.inner.clear()
            return self.inner.export(spans)

    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    tracer_provider = None
    exporter = None
    if mode == "traces":
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(Forgetful(exporter)))
    instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        traces=mode == "traces",
        metrics=True,
    )
    return reader, meter_provider, tracer_provider, exporter
