"""Attributes added to every metric point and span nsqclient makes (:func:`set_attributes`):
what tells apart processes that are otherwise alike, such as a worker's children
(``nsq.worker.process``). Kept apart from the instrumentation so that setting them never
imports OpenTelemetry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EXTRA", "set_attributes"]

#: the attributes set; read when attributes are made (written by the process's main code,
#: normally once, before any client exists)
EXTRA: dict[str, Any] = {}


def set_attributes(attributes: Mapping[str, str | bool | int | float] | None) -> None:
    """Replace the attributes added to every metric point and span (None or ``{}``: none)."""
    EXTRA.clear()
    if attributes:
        for key, value in attributes.items():
            if not isinstance(key, str) or not isinstance(value, str | bool | int | float):
                raise TypeError(
                    f"attributes are str -> str, bool, int or float; got {key!r}: {value!r}"
                )
        EXTRA.update(attributes)
