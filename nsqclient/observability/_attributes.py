"""The attribute sets of nsqclient's metric points and spans: the messaging conventions' own
(system, consumer, server, ``error.type``) and those added to every one (:func:`set_attributes`:
what tells apart processes that are otherwise alike, such as a worker's children,
``nsq.worker.process``). Built here for both the instrumentation (observed metrics) and the
clients' observers (spans, recorded metrics); kept apart from both so that setting them never
imports OpenTelemetry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "EXTRA",
    "Key",
    "consumer_attributes",
    "error_type",
    "key_of",
    "server_attributes",
    "set_attributes",
    "system_attributes",
]

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


#: an attribute set as a hashable key (a metric's series)
Key = tuple[tuple[str, Any], ...]


def key_of(attrs: dict[str, Any]) -> Key:
    return tuple(sorted(attrs.items()))


def system_attributes() -> dict[str, Any]:
    """``messaging.system`` and what :func:`set_attributes` added (a new dict: the caller may
    add to it)."""
    attrs: dict[str, Any] = {"messaging.system": "nsq"}
    if EXTRA:
        attrs.update(EXTRA)
    return attrs


def consumer_attributes(topic: str, channel: str) -> dict[str, Any]:
    attrs = system_attributes()
    attrs["messaging.destination.name"] = topic
    attrs["messaging.consumer.group.name"] = channel
    return attrs


def server_attributes(address: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` from ``host:port`` (IPv6 hosts in brackets)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        return {"server.address": host, "server.port": int(port)}
    except ValueError:
        return {"server.address": address}


def error_type(exc: BaseException) -> str:
    """``error.type``: the exception's class name (nsqclient's are stable and documented)."""
    return type(exc).__qualname__
