"""nsqd as a client of an auth server (``internal/auth``): the query, its checks, the cache.

``GET http://<addr>/auth?common_name=&remote_ip=&secret=&tls=`` (or the full URL when the address
contains ``://``), addresses tried from a random start, a 403 on plain HTTP retried on the HTTPS
port the body names. The reply's permissions must be ``subscribe``/``publish``, its regexes must
compile and ``ttl`` must be positive; a topic/channel is allowed when any entry's unanchored
regexes match (Python ``re`` stands in for Go's RE2).
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import ssl
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

__all__ = ["AuthState", "Authorization", "common_name", "query_any"]


@dataclasses.dataclass(frozen=True)
class Authorization:
    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions or not self.topic.search(topic):
            return False
        return any(c.search(channel) for c in self.channels)


@dataclasses.dataclass
class AuthState:
    identity: str
    identity_url: str
    ttl: int
    authorizations: list[Authorization]
    expires: float  # time.monotonic()

    def expired(self) -> bool:
        return self.expires < time.monotonic()

    def is_allowed(self, topic: str, channel: str) -> bool:
        return any(a.is_allowed(topic, channel) for a in self.authorizations)


def _parse(body: bytes) -> AuthState:
    doc: Any = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError("auth reply is not a JSON object")
    ttl = doc.get("ttl") or 0
    identity = doc.get("identity") or ""
    identity_url = doc.get("identity_url") or ""
    entries = doc.get("authorizations") or []
    if not (isinstance(ttl, int) and isinstance(identity, str) and isinstance(entries, list)):
        raise ValueError("auth reply has fields of the wrong type")
    authorizations = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError("authorization is not an object")
        permissions = entry.get("permissions") or []
        for p in permissions:
            if p not in ("subscribe", "publish"):
                raise ValueError(f"unknown permission {p}")
        try:
            topic = re.compile(entry.get("topic") or "")
            channels = tuple(re.compile(c) for c in entry.get("channels") or [])
        except (re.error, TypeError) as exc:
            raise ValueError(f"unable to compile regex {exc}") from None
        authorizations.append(Authorization(topic, channels, frozenset(permissions)))
    if ttl <= 0:
        raise ValueError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(identity, str(identity_url), ttl, authorizations, time.monotonic() + ttl)


async def _query(client: httpx.AsyncClient, address: str, params: dict[str, str]) -> AuthState:
    query = urlencode(sorted(params.items()))
    url = f"{address}?{query}" if "://" in address else f"http://{address}/auth?{query}"
    while True:
        response = await client.get(url, headers={"Accept": "application/vnd.nsq; version=1.0"})
        if response.status_code == 403 and not url.startswith("https"):
            port = json.loads(response.content)["https_port"]
            parts = urlsplit(url)
            url = urlunsplit(("https", f"{parts.hostname}:{port}", *parts[2:]))
            continue
        if response.status_code != 200:
            raise ValueError(f"got response {response.status_code} {response.content!r}")
        return _parse(response.content)


async def query_any(
    addresses: Sequence[str],
    *,
    remote_ip: str,
    tls: bool,
    common_name: str,
    secret: str,
    connect_timeout: float = 2.0,
    request_timeout: float = 5.0,
    verify: ssl.SSLContext | bool = True,
) -> AuthState:
    """Try each auth server from a random one; the first valid reply wins."""
    params = {
        "remote_ip": remote_ip,
        "tls": "true" if tls else "false",
        "secret": secret,
        "common_name": common_name,
    }
    errors: list[str] = []
    start = random.randrange(len(addresses))
    timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
    async with httpx.AsyncClient(timeout=timeout, verify=verify) as client:
        for i in range(len(addresses)):
            address = addresses[(start + i) % len(addresses)]
            try:
                return await _query(client, address, params)
            except Exception as exc:
                errors.append(f"failed to auth against {address} - {exc}")
    raise ValueError("; ".join(errors))


def common_name(peercert: Any) -> str:
    """The subject CN of a client certificate as ``ssl`` reports it ("" when none)."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""
