"""nsqd's HTTP API (``nsqd/http.go``): routes, parameter checks in nsqd's order, V1 replies.

Parameters come only from the query string. Errors are ``{"message": CODE}`` with nsqd's status;
every V1 reply carries ``X-NSQ-Content-Type: nsq; version=1.0``. ``/stats`` is in :mod:`.stats`.
The API sees its nsqd through :class:`HttpNsqd` (a protocol: nsqd makes its listeners).
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Protocol

from .bodies import ItemReader, read_mpub_items
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
from .stats import StatsNsqd, stats_response
from .topic import Topic
from .wire import ClientError, to_int64

if TYPE_CHECKING:
    from .logs import LogBuffer
    from .options import NsqdOptions

__all__ = ["HttpNsqd", "NsqdHttpApi"]

_INT64: Final = re.compile(r"[+-]?[0-9]+")
_BOOL: Final = {"true": True, "1": True, "false": False, "0": False}


class HttpNsqd(StatsNsqd, Protocol):
    """What the HTTP API uses of its nsqd (:class:`~.nsqd.EmbeddedNsqd`) besides ``/stats``:
    its options and log (``/config`` edits both), its ports and broadcast address (``/info``,
    ``/config``), and its lookupd peers (``PUT /config/nsqlookupd_tcp_addresses``)."""

    options: NsqdOptions
    log: LogBuffer
    tcp_port: int
    http_port: int
    https_port: int | None

    @property
    def broadcast_address(self) -> str: ...

    @property
    def broadcast_tcp_port(self) -> int: ...

    @property
    def broadcast_http_port(self) -> int: ...

    def set_lookupd_addresses(self, addresses: list[str]) -> None: ...


class NsqdHttpApi:
    """The request handler for one nsqd listener (``https`` is the TLS listener)."""

    def __init__(self, nsqd: HttpNsqd, *, https: bool) -> None:
        self.nsqd = nsqd
        self.https = https
        r = self.router = Router()
        routes: list[tuple[str, str, Callable[[Request], Awaitable[Response]]]] = [
            ("GET", "/ping", self.ping),
            ("GET", "/info", self.info),
            ("POST", "/pub", self.pub),
            ("POST", "/mpub", self.mpub),
            ("GET", "/stats", self.stats),
            ("POST", "/topic/create", self.topic_create),
            ("POST", "/topic/delete", self.topic_delete),
            ("POST", "/topic/empty", self.topic_empty),
            ("POST", "/topic/pause", self.topic_pause),
            ("POST", "/topic/unpause", self.topic_pause),
            ("POST", "/channel/create", self.channel_create),
            ("POST", "/channel/delete", self.channel_delete),
            ("POST", "/channel/empty", self.channel_admin),
            ("POST", "/channel/pause", self.channel_admin),
            ("POST", "/channel/unpause", self.channel_admin),
            ("GET", "/config/:opt", self.config),
            ("PUT", "/config/:opt", self.config),
        ]
        for method, path, handler in routes:
            r.add(method, path, handler)

    async def __call__(self, request: Request) -> Response:
        if not self.https and self.nsqd.options.tls_required is True:
            port = self.nsqd.https_port or 0
            body = f'{{"message": "TLS_REQUIRED", "https_port": {port}}}'.encode()
            return Response(
                403,
                body,
                [
                    ("X-NSQ-Content-Type", "nsq; version=1.0"),
                    ("Content-Type", "application/json; charset=utf-8"),
                ],
            )
        start = time.perf_counter()
        response = await self.router(request)
        if request.path not in ("/pub", "/mpub"):  # nsqd logs every route but these two
            self.nsqd.log("INFO", request_line(request, response.status, start))
        return response

    async def _get_topic(self, name: str) -> Topic:
        topic = self.nsqd.broker.get_topic(name)
        if not topic.started:
            await topic.ready
        return topic

    async def _topic_from_query(self, request: Request) -> tuple[dict[str, list[str]], Topic]:
        """``getTopicFromQuery``: creates the topic."""
        params = query_args(request)
        if "topic" not in params:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        name = params["topic"][0]
        if not valid_name(name):
            raise HttpError(400, "INVALID_TOPIC")
        return params, await self._get_topic(name)

    def _existing_topic(self, request: Request) -> tuple[Topic, str]:
        """``getExistingTopicFromQuery``."""
        topic_name, channel = topic_channel_args(query_args(request))
        topic = self.nsqd.broker.topics.get(topic_name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic, channel

    async def ping(self, request: Request) -> Response:
        return plain(200, "OK")

    async def info(self, request: Request) -> Response:
        nsqd, opts = self.nsqd, self.nsqd.options
        return v1_ok(
            {
                "version": nsqd.version,
                "broadcast_address": nsqd.broadcast_address,
                "hostname": socket.gethostname(),
                "http_port": nsqd.http_port,
                "tcp_port": nsqd.tcp_port,
                "start_time": int(nsqd.start_time),
                "max_heartbeat_interval": opts.max_heartbeat_interval * 1_000_000,
                "max_output_buffer_size": opts.max_output_buffer_size,
                "max_output_buffer_timeout": opts.max_output_buffer_timeout * 1_000_000,
                "max_deflate_level": opts.max_deflate_level,
            }
        )

    async def pub(self, request: Request) -> Response:
        max_msg = self.nsqd.options.max_msg_size
        if request.content_length > max_msg:
            raise HttpError(413, "MSG_TOO_BIG")
        body = request.body[: max_msg + 1]
        if len(body) == max_msg + 1:
            raise HttpError(413, "MSG_TOO_BIG")
        if not body:
            raise HttpError(400, "MSG_EMPTY")
        params, topic = await self._topic_from_query(request)
        delay = 0
        if "defer" in params:
            text = params["defer"][0]
            if not _INT64.fullmatch(text) or not -(1 << 63) <= int(text) < 1 << 63:
                raise HttpError(400, "INVALID_DEFER")
            delay = to_int64(int(text) * 1_000_000)
            if delay < 0 or delay > self.nsqd.options.max_req_timeout * 1_000_000:
                raise HttpError(400, "INVALID_DEFER")
        topic.put(self.nsqd.broker.new_message(body, delay / 1e9))
        return v1_ok("OK")

    async def mpub(self, request: Request) -> Response:
        opts = self.nsqd.options
        if request.content_length > opts.max_body_size:
            raise HttpError(413, "BODY_TOO_BIG")
        params, topic = await self._topic_from_query(request)
        binary = False
        if "binary" in params:
            binary = _BOOL.get(params["binary"][0], True)
        if binary:
            bodies = _read_binary(request.body, opts.max_msg_size, opts.max_body_size)
        else:
            bodies = _read_text(request.body, opts.max_msg_size, opts.max_body_size)
        new_message = self.nsqd.broker.new_message
        topic.put_many([new_message(b) for b in bodies])
        return v1_ok("OK")

    async def stats(self, request: Request) -> Response:
        params = query_args(request)
        return stats_response(self.nsqd, params)

    async def topic_create(self, request: Request) -> Response:
        await self._topic_from_query(request)
        return v1_ok()

    def _topic_name(self, request: Request) -> str:
        params = query_args(request)
        if "topic" not in params:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        return params["topic"][0]

    async def topic_delete(self, request: Request) -> Response:
        if not self.nsqd.broker.delete_topic(self._topic_name(request)):
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return v1_ok()

    async def topic_empty(self, request: Request) -> Response:
        name = self._topic_name(request)
        if not valid_name(name):
            raise HttpError(400, "INVALID_TOPIC")
        topic = self.nsqd.broker.topics.get(name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        topic.empty()
        return v1_ok()

    async def topic_pause(self, request: Request) -> Response:
        topic = self.nsqd.broker.topics.get(self._topic_name(request))
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        topic.set_paused("unpause" not in request.path)
        return v1_ok()

    async def channel_create(self, request: Request) -> Response:
        topic, channel = self._existing_topic(request)
        topic.get_channel(channel)
        return v1_ok()

    async def channel_delete(self, request: Request) -> Response:
        topic, channel = self._existing_topic(request)
        if not topic.delete_channel(channel):
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        return v1_ok()

    async def channel_admin(self, request: Request) -> Response:
        topic, name = self._existing_topic(request)
        channel = topic.channels.get(name)
        if channel is None:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        if request.path.endswith("/empty"):
            channel.empty()
        else:
            channel.set_paused("unpause" not in request.path)
        return v1_ok()

    async def config(self, request: Request) -> Response:
        opt = request.params["opt"]
        nsqd = self.nsqd
        if request.method == "PUT":
            limit = nsqd.options.max_msg_size + 1
            body = request.body[:limit]
            if len(body) == limit or not body:
                raise HttpError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_tcp_addresses":
                try:
                    addresses = json.loads(body)
                except ValueError:
                    raise HttpError(400, "INVALID_VALUE") from None
                if not isinstance(addresses, list) or not all(
                    isinstance(a, str) for a in addresses
                ):
                    raise HttpError(400, "INVALID_VALUE")
                nsqd.set_lookupd_addresses(addresses)
            elif opt == "log_level":
                levels = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
                level = levels.get(body.decode("utf-8", "replace").lower())
                if level is None:
                    raise HttpError(400, "INVALID_VALUE")
                nsqd.options.log_level = nsqd.log.level = level
            else:
                raise HttpError(400, "INVALID_OPTION")
        found, value = nsqd.options.config_value(
            opt, tcp_port=nsqd.broadcast_tcp_port, http_port=nsqd.broadcast_http_port
        )
        if not found:
            raise HttpError(400, "INVALID_OPTION")
        if value is None:  # a nil slice: JSON null
            return Response(
                200,
                b"null",
                [
                    ("Content-Type", "application/json; charset=utf-8"),
                    ("X-NSQ-Content-Type", "nsq; version=1.0"),
                ],
            )
        return v1_ok(value)


def _read_binary(body: bytes, max_msg: int, max_body: int) -> list[bytes]:
    """Binary ``/mpub``: TCP MPUB's errors minus ``E_``, always 413."""
    reader = read_mpub_items(max_msg, max_body)
    pos = 0
    try:
        need = next(reader)
        while True:
            if isinstance(need, ItemReader):
                pos = need.feed(body, pos)
                if not need.done:
                    raise HttpError(413, need.need[0][2:])
                need = reader.send(None)  # type: ignore[arg-type]
                continue
            if len(body) - pos < need[0]:
                raise HttpError(413, need[1][2:])
            chunk = body[pos : pos + need[0]]
            pos += need[0]
            need = reader.send(chunk)
    except StopIteration as stop:
        bodies: list[bytes] = stop.value
        return bodies
    except ClientError as exc:
        raise HttpError(413, exc.code[2:]) from None


def _read_text(body: bytes, max_msg: int, max_body: int) -> list[bytes]:
    """Text ``/mpub``: one message per ``\\n``-terminated line, empty lines skipped."""
    read_max = max_body + 1
    pieces = body[:read_max].split(b"\n")
    bodies = []
    total = 0
    for i, piece in enumerate(pieces):
        total += len(piece) + (i < len(pieces) - 1)
        if total == read_max:
            raise HttpError(413, "BODY_TOO_BIG")
        if not piece:
            continue
        if len(piece) > max_msg:
            raise HttpError(413, "MSG_TOO_BIG")
        bodies.append(piece)
    return bodies
