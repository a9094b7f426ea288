"""nsqlookupd's HTTP API (``nsqlookupd/http.go``): lookup, listings, registry edits.

Arrays are ``[]``, never ``null``; ``/lookup`` of a topic never registered is 404
``TOPIC_NOT_FOUND`` and filters out producers that stopped pinging or were tombstoned lately;
``/nodes`` applies only the inactivity filter. Edits touch only the registry, never an nsqd.
The API sees its lookupd through :class:`HttpLookupd` (a protocol: the lookupd makes its
listener).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .httpserver import (
    HttpError,
    Request,
    Response,
    Router,
    plain,
    query_args,
    request_line,
    topic_channel_args,
    v1_ok,
    valid_name,
)
from .lookupd_db import RegistrationDB, filter_active

__all__ = ["HttpLookupd", "LookupdHttpApi"]


class HttpLookupd(Protocol):
    """What the HTTP API uses of its lookupd (:class:`~.lookupd.EmbeddedLookupd`): the
    registry, the clock and the two ages it filters producers by, the version, the log."""

    db: RegistrationDB
    version: str
    inactive_producer_timeout: float  # seconds
    tombstone_lifetime: float  # seconds

    def now(self) -> float: ...

    def log(self, level: str, text: str) -> None: ...


class LookupdHttpApi:
    def __init__(self, lookupd: HttpLookupd) -> None:
        self.lookupd = lookupd
        self.db = lookupd.db
        self.router = Router()
        routes: list[tuple[str, str, Callable[[Request], Awaitable[Response]]]] = [
            ("GET", "/ping", self.ping),
            ("GET", "/info", self.info),
            ("GET", "/debug", self.debug),
            ("GET", "/lookup", self.lookup),
            ("GET", "/topics", self.topics),
            ("GET", "/channels", self.channels),
            ("GET", "/nodes", self.nodes),
            ("POST", "/topic/create", self.topic_create),
            ("POST", "/topic/delete", self.topic_delete),
            ("POST", "/channel/create", self.channel_create),
            ("POST", "/channel/delete", self.channel_delete),
            ("POST", "/topic/tombstone", self.tombstone),
        ]
        for method, path, handler in routes:
            self.router.add(method, path, handler)

    async def __call__(self, request: Request) -> Response:
        start = time.perf_counter()
        response = await self.router(request)
        self.lookupd.log("INFO", request_line(request, response.status, start))
        return response

    def _arg(self, request: Request, name: str) -> str:
        params = query_args(request)
        if name not in params:
            raise HttpError(400, f"MISSING_ARG_{name.upper()}")
        return params[name][0]

    async def ping(self, request: Request) -> Response:
        return plain(200, "OK")

    async def info(self, request: Request) -> Response:
        return v1_ok({"version": self.lookupd.version})

    async def debug(self, request: Request) -> Response:
        data: dict[str, list[dict[str, Any]]] = {}
        for (category, key, subkey), producers in self.db.map.items():
            entries = data.setdefault(f"{category}:{key}:{subkey}", [])
            for p in producers.values():
                entries.append(
                    {
                        "id": p.peer.id,
                        "hostname": p.peer.hostname,
                        "broadcast_address": p.peer.broadcast_address,
                        "tcp_port": p.peer.tcp_port,
                        "http_port": p.peer.http_port,
                        "version": p.peer.version,
                        "tombstoned": p.tombstoned_at is not None,
                    }
                )
        return v1_ok(data)

    async def lookup(self, request: Request) -> Response:
        topic = self._arg(request, "topic")
        if not self.db.find_registrations("topic", topic, ""):
            raise HttpError(404, "TOPIC_NOT_FOUND")
        channels = [r[2] for r in self.db.find_registrations("channel", topic, "*")]
        producers = filter_active(
            self.db.find_producers("topic", topic, ""),
            self.lookupd.inactive_producer_timeout,
            self.lookupd.tombstone_lifetime,
        )
        return v1_ok({"channels": channels, "producers": [p.peer.to_json() for p in producers]})

    async def topics(self, request: Request) -> Response:
        return v1_ok({"topics": [r[1] for r in self.db.find_registrations("topic", "*", "")]})

    async def channels(self, request: Request) -> Response:
        topic = self._arg(request, "topic")
        return v1_ok(
            {"channels": [r[2] for r in self.db.find_registrations("channel", topic, "*")]}
        )

    async def nodes(self, request: Request) -> Response:
        lifetime = self.lookupd.tombstone_lifetime
        nodes = []
        producers = filter_active(
            self.db.find_producers("client", "", ""), self.lookupd.inactive_producer_timeout, 0
        )
        for p in producers:
            topics = [r[1] for r in self.db.lookup_registrations(p.peer.id) if r[0] == "topic"]
            tombstones = []
            for t in topics:
                mine = [tp for tp in self.db.find_producers("topic", t, "") if tp.peer is p.peer]
                tombstones.append(bool(mine) and mine[0].is_tombstoned(lifetime))
            nodes.append({**p.peer.to_json(), "tombstones": tombstones, "topics": topics})
        return v1_ok({"producers": nodes})

    async def topic_create(self, request: Request) -> Response:
        topic = self._arg(request, "topic")
        if not valid_name(topic):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        self.db.add_registration(("topic", topic, ""))
        return v1_ok()

    async def topic_delete(self, request: Request) -> Response:
        topic = self._arg(request, "topic")
        for r in self.db.find_registrations("channel", topic, "*"):
            self.db.remove_registration(r)
        for r in self.db.find_registrations("topic", topic, ""):
            self.db.remove_registration(r)
        return v1_ok()

    async def tombstone(self, request: Request) -> Response:
        topic = self._arg(request, "topic")
        params = query_args(request)
        if "node" not in params:
            raise HttpError(400, "MISSING_ARG_NODE")
        node = params["node"][0]
        for p in self.db.find_producers("topic", topic, ""):
            if f"{p.peer.broadcast_address}:{p.peer.http_port}" == node:
                p.tombstoned_at = self.lookupd.now()
        return v1_ok()

    async def channel_create(self, request: Request) -> Response:
        topic, channel = topic_channel_args(query_args(request))
        self.db.add_registration(("channel", topic, channel))
        self.db.add_registration(("topic", topic, ""))
        return v1_ok()

    async def channel_delete(self, request: Request) -> Response:
        topic, channel = topic_channel_args(query_args(request))
        found = self.db.find_registrations("channel", topic, channel)
        if not found:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        for r in found:
            self.db.remove_registration(r)
        return v1_ok()
