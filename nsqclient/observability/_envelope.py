"""Carrying W3C trace context inside a message body: a small envelope, opt-in.

NSQ messages have no headers, so nothing about a trace crosses nsqd by default. An application
that owns its message format can wrap each body before publishing::

    MAGIC (4 bytes: 00 'T' 'C' 01) | header length (2 bytes, big-endian) | headers | payload

where *headers* are the propagator's fields (``traceparent``, ``tracestate``, ``baggage`` with
the default global propagator) as ``name=value`` lines. The instrumented Reader recognises the
envelope and links its ``process`` span to the context inside; the application calls
:func:`unwrap_body` to get its payload back. A body without the magic passes through unchanged,
so wrapped and plain messages can share a topic while producers migrate.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanContext

__all__ = ["MAGIC", "extract_link", "unwrap_body", "wrap_body"]

MAGIC = b"\x00TC\x01"
_HEAD = len(MAGIC) + 2


def wrap_body(body: bytes | bytearray | memoryview | str, context: Context | None = None) -> bytes:
    """``body`` in an envelope carrying ``context`` (default: the current one). A ``str`` body
    is UTF-8 encoded. With no active span the envelope carries no trace, only the payload."""
    payload = body.encode() if isinstance(body, str) else bytes(body)
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    headers = "".join(f"{k}={v}\n" for k, v in carrier.items()).encode("ascii", "replace")
    if len(headers) > 0xFFFF:
        raise ValueError("trace context headers over 65535 bytes (is baggage that large?)")
    return b"".join((MAGIC, len(headers).to_bytes(2, "big"), headers, payload))


def _split(body: bytes) -> tuple[dict[str, str], bytes] | None:
    if body[:4] != MAGIC or len(body) < _HEAD:
        return None
    size = int.from_bytes(body[4:_HEAD], "big")
    if len(body) < _HEAD + size:
        return None
    carrier: dict[str, str] = {}
    for line in body[_HEAD : _HEAD + size].decode("ascii", "replace").splitlines():
        name, sep, value = line.partition("=")
        if sep:
            carrier[name] = value
    return carrier, body[_HEAD + size :]


def unwrap_body(body: bytes) -> tuple[bytes, Context | None]:
    """``(payload, context)`` from a wrapped body; ``(body, None)`` if it is not wrapped.

    Use the context as a parent (``tracer.start_as_current_span(..., context=ctx)``) or a link;
    the instrumented Reader already links its ``process`` span to it."""
    split = _split(body)
    if split is None:
        return body, None
    carrier, payload = split
    return payload, propagate.extract(carrier)


def extract_link(body: Any) -> SpanContext | None:
    """The span context a wrapped body carries, for a span link (None if none)."""
    if not isinstance(body, bytes) or body[:4] != MAGIC:
        return None
    split = _split(body)
    if split is None:
        return None
    span_context = trace.get_current_span(propagate.extract(split[0])).get_span_context()
    return span_context if span_context.is_valid else None
