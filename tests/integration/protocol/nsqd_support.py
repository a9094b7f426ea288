"""Helpers for the raw-protocol tests against real nsqd: identities, /stats lookups, deadlines."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from nsqclient.protocol import IdentifyOptions
from nsqclient.testing.daemons import NsqdProcess
from tests.support import unique as unique
from tests.support import wait_until


def options(**kwargs: Any) -> IdentifyOptions:
    """IDENTIFY options with a recognisable identity (visible in nsqd's /stats)."""
    kwargs.setdefault("client_id", "rawconn")
    kwargs.setdefault("hostname", "rawconn.test")
    kwargs.setdefault("user_agent", "nsqclient-tests/rawconn")
    return IdentifyOptions(**kwargs)


def ca_context(ca_cert: Path) -> ssl.SSLContext:
    """Verifies nsqd's certificate against the test CA (hostname 127.0.0.1 is in its SAN)."""
    return ssl.create_default_context(cafile=str(ca_cert))


def channel_stats(nsqd: NsqdProcess, topic: str, channel: str) -> dict[str, Any] | None:
    stats = nsqd.stats(topic=topic, channel=channel)
    for t in stats.get("topics") or []:
        if t["topic_name"] != topic:
            continue
        for c in t.get("channels") or []:
            if c["channel_name"] == channel:
                result: dict[str, Any] = c
                return result
    return None


def topic_stats(nsqd: NsqdProcess, topic: str) -> dict[str, Any] | None:
    for t in nsqd.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            result: dict[str, Any] = t
            return result
    return None


def wait_channel(
    nsqd: NsqdProcess,
    topic: str,
    channel: str,
    timeout: float = 10.0,
    client: dict[str, Any] | None = None,
    **expected: int,
) -> dict[str, Any]:
    """Wait until the channel's stats show every ``field=value`` given (depth, in_flight_count,
    deferred_count, requeue_count, timeout_count, message_count, ...) and, with ``client``, its
    single client's stats show those fields too.

    Wait for every field you assert on: nsqd updates channel and client counters one after the
    other (FIN drops the channel's in-flight entry, then bumps the client's finish_count), so a
    snapshot taken between the two is legitimately inconsistent.
    """

    def probe() -> dict[str, Any] | None:
        stats = channel_stats(nsqd, topic, channel)
        if stats is None or any(stats.get(k) != v for k, v in expected.items()):
            return None
        if client:
            clients = stats.get("clients") or []
            if len(clients) != 1 or any(clients[0].get(k) != v for k, v in client.items()):
                return None
        return stats

    return wait_until(probe, timeout, f"channel {topic}/{channel} stats {expected} {client or ''}")


def single_client(stats: dict[str, Any]) -> dict[str, Any]:
    clients = stats.get("clients") or []
    assert len(clients) == 1, clients
    client: dict[str, Any] = clients[0]
    return client
