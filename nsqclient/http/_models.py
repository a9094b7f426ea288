"""What nsqlookupd says about producers: :class:`Producer`, :class:`Node`, :class:`LookupResult`.

Built from lookupd's JSON by tolerant constructors that accept every supported server version
(very old lookupds named ``broadcast_address`` ``address``) and refuse shapes that would make a
Reader connect somewhere wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..addresses import format_address

__all__ = ["LookupResult", "Node", "Producer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Producer:
    """One nsqd as nsqlookupd knows it. Connect to :attr:`tcp_address`, not ``remote_address``.

    ``remote_address`` is where lookupd saw nsqd's registration connection come from (often an
    ephemeral port or a NAT address); ``broadcast_address`` is what nsqd asks clients to use.
    """

    broadcast_address: str
    tcp_port: int
    http_port: int
    hostname: str = ""
    remote_address: str = ""
    version: str = ""

    @property
    def tcp_address(self) -> str:
        """``host:port`` for the TCP protocol, IPv6 literals bracketed."""
        return format_address(self.broadcast_address, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` of nsqd's HTTP API, IPv6 literals bracketed."""
        return format_address(self.broadcast_address, self.http_port)

    @property
    def node_id(self) -> str:
        """lookupd's key for this producer in ``/topic/tombstone?node=`` (never bracketed)."""
        return f"{self.broadcast_address}:{self.http_port}"

    @classmethod
    def from_json(cls, data: object) -> Producer:
        """Build from one element of lookupd's ``producers`` array; ValueError if unusable."""
        fields = _producer_fields(data)
        return cls(**fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class Node(Producer):
    """An nsqd listed by lookupd's ``/nodes``, with the topics it registered.

    ``tombstones[i]`` says whether ``topics[i]`` is tombstoned for this node (tombstoned
    producers are still listed here, but hidden from ``/lookup``).
    """

    topics: tuple[str, ...] = ()
    tombstones: tuple[bool, ...] = ()

    def is_tombstoned(self, topic: str) -> bool:
        """True if lookupd lists ``topic`` as tombstoned for this nsqd."""
        return any(
            t == topic and dead for t, dead in zip(self.topics, self.tombstones, strict=False)
        )

    @classmethod
    def from_json(cls, data: object) -> Node:
        """Build from one element of lookupd's ``/nodes`` array; ValueError if unusable."""
        fields = _producer_fields(data)
        assert isinstance(data, Mapping)  # checked by _producer_fields
        topics = tuple(_str_list(data.get("topics"), "topics"))
        raw_tombstones = data.get("tombstones") or []
        if not isinstance(raw_tombstones, list) or not all(
            isinstance(t, bool) for t in raw_tombstones
        ):
            raise ValueError(f"'tombstones' must be a list of booleans, got {raw_tombstones!r}")
        tombstones = tuple(raw_tombstones) + (False,) * (len(topics) - len(raw_tombstones))
        return cls(**fields, topics=topics, tombstones=tombstones[: len(topics)])


@dataclass(frozen=True, slots=True)
class LookupResult:
    """``/lookup?topic=``: the topic's channels and the producers to connect to.

    Empty when lookupd has never heard of the topic, so a Reader can poll before anyone publishes.
    """

    # Typed as read-only sequences (a list[Node] from nodes() fits where producers go);
    # the values are tuples, so a result is immutable and hashable.
    channels: Sequence[str] = ()
    producers: Sequence[Producer] = ()

    @classmethod
    def from_json(cls, data: object) -> LookupResult:
        """Build from lookupd's ``/lookup`` reply; ValueError if it is not the expected shape."""
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a JSON object, got {data!r}")
        producers = data.get("producers") or []
        if not isinstance(producers, list):
            raise ValueError(f"'producers' must be a list, got {producers!r}")
        return cls(
            channels=tuple(_str_list(data.get("channels"), "channels")),
            producers=tuple(Producer.from_json(p) for p in producers),
        )


def _producer_fields(data: object) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"a producer must be a JSON object, got {data!r}")
    host = data.get("broadcast_address") or data.get("address")  # 'address' before lookupd 0.2.25
    if not isinstance(host, str) or not host:
        raise ValueError(f"producer has no broadcast_address: {dict(data)!r}")
    return {
        "broadcast_address": host,
        "tcp_port": _port(data, "tcp_port", required=True),
        "http_port": _port(data, "http_port", required=False),
        "hostname": _text(data, "hostname"),
        "remote_address": _text(data, "remote_address"),
        "version": _text(data, "version"),
    }


def _port(data: Mapping[str, Any], key: str, *, required: bool) -> int:
    value = data.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"producer {key} must be an integer, got {value!r}")
    return value


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _str_list(value: object, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'{name}' must be a list of strings, got {value!r}")
    return value
