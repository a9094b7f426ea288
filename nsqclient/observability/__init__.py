"""OpenTelemetry metrics and traces for nsqclient's Readers and Writers (the ``otel`` extra).

Turn it on once, before creating clients::

    from nsqclient.observability import instrument

    instrument()  # with the global tracer and meter providers

Every Reader, Writer, SyncReader and SyncWriter created afterwards emits the messaging semantic
conventions' spans and metrics plus NSQ's own (``nsq.*``); see docs/guides/opentelemetry.md.
:func:`set_attributes` adds attributes to everything emitted (``nsq.worker.process`` in each of
``nsqclient worker``'s children, so their series stay apart).
Only ``opentelemetry-api`` is needed (``pip install nsqclient[otel]``); the application brings
the SDK and exporters. Nothing here imports OpenTelemetry until :func:`instrument` or the
envelope helpers are used, and clients created without it run exactly the code they always did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import observer
from ._attributes import set_attributes

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ._instrumentation import Instrumentation

__all__ = [
    "instrument",
    "is_instrumented",
    "set_attributes",
    "uninstrument",
    "unwrap_body",
    "wrap_body",
]


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    traces: bool = True,
    metrics: bool = True,
) -> Instrumentation:
    """Instrument every nsqclient client created from now on; returns the instrumentation.

    ``tracer_provider`` / ``meter_provider`` default to OpenTelemetry's global ones (set them
    first, or the API's no-op defaults apply). ``traces=False`` or ``metrics=False`` leaves one
    out (e.g. metrics only: no span is created at all). Calling it again replaces the previous
    instrumentation for clients created afterwards. ``instrumentation.attach(client)`` adds an
    asyncio Reader or Writer that already exists. Raises ImportError (saying which extra to
    install) if ``opentelemetry-api`` is missing.
    """
    try:
        from ._instrumentation import Instrumentation
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "instrument() needs the OpenTelemetry API: pip install 'nsqclient[otel]'"
        ) from exc
    instr = Instrumentation(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        traces=traces,
        metrics_enabled=metrics,
    )
    instr.install()
    return instr


def uninstrument() -> None:
    """Clients created from now on are not instrumented (existing ones keep reporting)."""
    observer.install(None)


def is_instrumented() -> bool:
    """True while :func:`instrument` is in effect for new clients."""
    return observer.installed() is not None


def wrap_body(body: Any, context: Context | None = None) -> bytes:
    """Wrap ``body`` in an envelope carrying ``context`` (default: the current one), opt-in
    since NSQ has no headers: 4 magic bytes, a 2-byte length, the propagator's fields as
    ``name=value`` lines, then the payload. The instrumented Reader links its span to it."""
    from ._envelope import wrap_body as wrap

    return wrap(body, context)


def unwrap_body(body: bytes) -> tuple[bytes, Context | None]:
    """``(payload, context)`` of a wrapped body; ``(body, None)`` for a plain one."""
    from ._envelope import unwrap_body as unwrap

    return unwrap(body)
