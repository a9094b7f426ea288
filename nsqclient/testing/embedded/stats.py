"""``GET /stats`` of the embedded nsqd, with nsqd's JSON shape, key order, filters and nulls.

Quirks copied from ``nsqd/stats.go`` and ``http.go``: ``topics`` is ``null`` for an unknown
``topic`` filter; a channel's ``clients`` and the top-level ``producers`` are ``null`` with
``include_clients=false`` (``producers`` also when nobody published over TCP); a client's
``pub_counts`` lists at most one topic (nsqd breaks out of its loop after the first).
The document is read from the nsqd through :class:`StatsNsqd` (a protocol: the HTTP API above
calls this module).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Final, Protocol

from .httpserver import Response, plain, v1_ok

if TYPE_CHECKING:
    from .channel import Channel
    from .connection import ClientConnection
    from .topic import Broker, Topic

__all__ = ["StatsNsqd", "client_stats", "stats_response"]

_BOOL: Final = {"true": True, "1": True, "false": False, "0": False}
_E2E: Final = {"count": 0, "percentiles": None}
_TLS_VERSIONS: Final = {
    "TLSv1": "TLS1.0",
    "TLSv1.1": "TLS1.1",
    "TLSv1.2": "TLS1.2",
    "TLSv1.3": "TLS1.3",
}
_CIPHERS: Final = {  # OpenSSL name -> (Go constant name or None, IANA id)
    "ECDHE-RSA-AES128-GCM-SHA256": ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0xC02F),
    "ECDHE-ECDSA-AES128-GCM-SHA256": ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", 0xC02B),
    "ECDHE-RSA-AES128-SHA": ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 0xC013),
    "ECDHE-RSA-AES256-SHA": ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", 0xC014),
    "AES128-SHA": ("TLS_RSA_WITH_AES_128_CBC_SHA", 0x002F),
    "AES256-SHA": ("TLS_RSA_WITH_AES_256_CBC_SHA", 0x0035),
    "ECDHE-RSA-AES256-GCM-SHA384": (None, 0xC030),
    "ECDHE-ECDSA-AES256-GCM-SHA384": (None, 0xC02C),
    "ECDHE-RSA-CHACHA20-POLY1305": (None, 0xCCA8),
    "TLS_AES_128_GCM_SHA256": (None, 0x1301),
    "TLS_AES_256_GCM_SHA384": (None, 0x1302),
    "TLS_CHACHA20_POLY1305_SHA256": (None, 0x1303),
}


class StatsNsqd(Protocol):
    """What ``/stats`` reads of its nsqd (:class:`~.nsqd.EmbeddedNsqd`): the topics and
    channels, the open connections (the producers), the version and start time."""

    version: str
    start_time: float

    @property
    def broker(self) -> Broker: ...

    @property
    def conns(self) -> Collection[ClientConnection]: ...


def _tls_fields(conn: ClientConnection) -> tuple[str, str]:
    transport = conn.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if not conn.tls or ssl_object is None:
        return "", ""
    cipher = ssl_object.cipher()
    name = cipher[0] if cipher else ""
    go_name, number = _CIPHERS.get(name, (None, 0))
    suite = go_name or f"Unknown {number}"
    version = ssl_object.version() or ""
    return suite, _TLS_VERSIONS.get(version, f"Unknown {version}")


def client_stats(conn: ClientConnection, topic_filter: str) -> dict[str, Any]:
    """One ``ClientV2Stats`` entry, keys in nsqd's order (``omitempty`` fields only when set)."""
    entry: dict[str, Any] = {
        "client_id": conn.client_id,
        "hostname": conn.hostname,
        "version": "V2",
        "remote_address": conn.remote_address,
        "state": conn.state,
        "ready_count": conn.ready_count,
        "in_flight_count": conn.in_flight_count,
        "message_count": conn.message_count,
        "finish_count": conn.finish_count,
        "requeue_count": conn.requeue_count,
        "connect_ts": conn.connect_ts,
        "sample_rate": conn.sample_rate,
        "deflate": conn.deflate,
        "snappy": conn.snappy,
        "user_agent": conn.user_agent,
    }
    state = conn.auth_state
    if conn.has_authorizations():
        entry["authed"] = True
    if state is not None and state.identity:
        entry["auth_identity"] = state.identity
    if state is not None and state.identity_url:
        entry["auth_identity_url"] = state.identity_url
    for topic, count in conn.pub_counts.items():
        if topic_filter and topic != topic_filter:
            continue
        entry["pub_counts"] = [{"topic": topic, "count": count}]
        break
    suite, version = _tls_fields(conn)
    entry.update(
        tls=conn.tls,
        tls_cipher_suite=suite,
        tls_version=version,
        tls_negotiated_protocol="",
        tls_negotiated_protocol_is_mutual=conn.tls,  # Go 1.17+ always reports true
    )
    return entry


def _channel_stats(channel: Channel, topic_filter: str, clients: bool) -> dict[str, Any]:
    members = list(channel.clients.values())
    return {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": channel.backend_depth,
        "in_flight_count": len(channel.in_flight),
        "deferred_count": len(channel.deferred),
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(members),
        "clients": [client_stats(c, topic_filter) for c in members] if clients else None,  # type: ignore[arg-type]
        "paused": channel.paused,
        "e2e_processing_latency": dict(_E2E),
    }


def _topic_stats(
    topic: Topic, channel_filter: str, topic_filter: str, clients: bool
) -> dict[str, Any]:
    names = sorted(topic.channels) if not channel_filter else [channel_filter]
    return {
        "topic_name": topic.name,
        "channels": [_channel_stats(topic.channels[n], topic_filter, clients) for n in names],
        "depth": topic.depth,
        "backend_depth": topic.backend_depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": dict(_E2E),
    }


def collect(nsqd: StatsNsqd, topic: str, channel: str, clients: bool) -> dict[str, Any]:
    """``NSQD.GetStats`` as the JSON document ``/stats?format=json`` returns (minus memory)."""
    topics_map = nsqd.broker.topics
    topics: list[dict[str, Any]] | None
    producers: list[dict[str, Any]] | None = None
    if topic and topic not in topics_map:
        topics = None
    else:
        topics = []
        for name in sorted(topics_map) if not topic else [topic]:
            t = topics_map[name]
            if channel and channel not in t.channels:
                continue
            topics.append(_topic_stats(t, channel, topic, clients))
    if clients and topics is not None:
        found = [client_stats(c, topic) for c in nsqd.conns if c.pub_counts]
        producers = found or None
    return {
        "version": nsqd.version,
        "health": "OK",
        "start_time": int(nsqd.start_time),
        "topics": topics,
        "producers": producers,
    }


def stats_response(nsqd: StatsNsqd, params: dict[str, list[str]]) -> Response:
    def get(key: str) -> str:
        return params[key][0] if key in params else ""

    clients = _BOOL.get(get("include_clients"), True)
    include_mem = _BOOL.get(get("include_mem"), True)
    doc = collect(nsqd, get("topic"), get("channel"), clients)
    if get("format") != "json":
        return plain(200, _text(doc, include_mem))
    out: dict[str, Any] = {k: doc[k] for k in ("version", "health", "start_time", "topics")}
    if include_mem:
        out["memory"] = {
            "heap_objects": 0,
            "heap_idle_bytes": 0,
            "heap_in_use_bytes": 0,
            "heap_released_bytes": 0,
            "gc_pause_usec_100": 0,
            "gc_pause_usec_99": 0,
            "gc_pause_usec_95": 0,
            "next_gc_bytes": 0,
            "gc_total_runs": 0,
        }
    out["producers"] = doc["producers"]
    return v1_ok(out)


def _text(doc: dict[str, Any], include_mem: bool) -> str:
    """A human summary in the spirit of nsqd's text format (not byte-exact)."""
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(doc["start_time"]))
    lines = [
        f"nsqd v{doc['version']} (embedded)",
        f"start_time {start}",
        "",
        f"Health: {doc['health']}",
        "",
    ]
    topics = doc["topics"] or []
    lines.append("Topics:" if topics else "Topics: None")
    for t in topics:
        mark = "*P " if t["paused"] else "   "
        lines.append(
            f"{mark}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: "
            f"{t['backend_depth']:<5} msgs: {t['message_count']:<8}"
        )
        for c in t["channels"]:
            mark = "   *P " if c["paused"] else "      "
            lines.append(
                f"{mark}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: "
                f"{c['backend_depth']:<5} inflt: {c['in_flight_count']:<4} def: "
                f"{c['deferred_count']:<4} re-q: {c['requeue_count']:<5} timeout: "
                f"{c['timeout_count']:<5} msgs: {c['message_count']:<8}"
            )
            lines.extend(
                f"        [V2 {client['hostname']} {client['user_agent']}] state: "
                f"{client['state']} inflt: {client['in_flight_count']} rdy: "
                f"{client['ready_count']}"
                for client in c["clients"] or []
            )
    producers = doc["producers"] or []
    lines.append("")
    lines.append("Producers:" if producers else "Producers: None")
    lines.extend(f"   [V2 {p['hostname']} {p['user_agent']}]" for p in producers)
    return "\n".join(lines) + "\n"
