"""Telemetry never breaks the application: span processors, exporters and instruments that
raise, and clients whose stats cannot be read, leave publishing and consuming untouched."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from nsqclient.aio import Reader, Writer
from nsqclient.observability import instrument, uninstrument, unwrap_body, wrap_body
from nsqclient.testing import start_nsqd

pytestmark = pytest.mark.timeout(60)


class Raising(SpanProcessor):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("processor on_start")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("processor on_end")


class RaisingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise RuntimeError("exporter")


class Exploding:
    """An instrument whose every recording raises."""

    def record(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("record")

    add = record


@pytest.fixture
def nsqd() -> Iterator[Any]:
    server = start_nsqd("embedded")
    try:
        yield server
    finally:
        server.stop()


async def test_raising_telemetry_never_reaches_the_application(
    nsqd: Any, caplog: pytest.LogCaptureFixture
) -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(RaisingExporter()))
    tracer_provider.add_span_processor(Raising())
    reader = InMemoryMetricReader()
    instr = instrument(
        tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    for name in ("operation_duration", "sent_messages", "process_duration", "requeued"):
        setattr(instr, name, Exploding())
    try:
        with caplog.at_level(logging.DEBUG, "nsqclient.observability"):
            async with Writer([nsqd.tcp_address]) as writer:
                await writer.pub("t", b"1")
                await writer.mpub("t", [b"2", b"3"])
                published = writer.stats()["published"]
            seen: list[bytes] = []
            all_seen = asyncio.Event()

            def handler(msg: Any) -> bool | None:
                seen.append(msg.body)
                if len(seen) == 4:
                    all_seen.set()
                return False if len(seen) == 1 else None  # one REQ, then FINs

            async with Reader(
                "t",
                "c",
                nsqd_tcp_addresses=[nsqd.tcp_address],
                default_requeue_delay=0,
                max_backoff_duration=0,
            ) as consumer:
                consumer.set_message_handler(handler)
                await asyncio.wait_for(all_seen.wait(), 20)
                consumer.stats = _raise  # a collection that cannot read it skips it
                assert reader.get_metrics_data() is not None
        assert published == 3 and len(seen) == 4
        failures = [r for r in caplog.records if "instrumentation failed" in r.getMessage()]
        assert len(failures) >= 5  # every kind of failure was met (and swallowed)
        assert sum(r.levelno == logging.WARNING for r in failures) <= 1  # once, then DEBUG
    finally:
        uninstrument()


def _raise() -> dict[str, Any]:
    raise RuntimeError("stats")


def test_envelope_round_trip_and_plain_bodies_pass_through() -> None:
    tracer_provider = TracerProvider()
    tracer = tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        wrapped = wrap_body(b"payload")
    payload, ctx = unwrap_body(wrapped)
    assert payload == b"payload" and ctx is not None
    from opentelemetry import trace

    assert (
        trace.get_current_span(ctx).get_span_context().trace_id == span.get_span_context().trace_id
    )
    assert unwrap_body(b"plain") == (b"plain", None)
    assert unwrap_body(b"\x00TC\x01\xff") == (b"\x00TC\x01\xff", None)  # truncated: left alone
    assert unwrap_body(wrap_body("text"))[0] == b"text"
