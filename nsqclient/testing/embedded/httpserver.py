"""A small asyncio HTTP/1.1 server and an httprouter-like router, for nsqd's and lookupd's APIs.

Enough of HTTP/1.1 for the clients that talk to nsqd: keep-alive, ``Content-Length`` and chunked
request bodies, ``Expect: 100-continue``, HEAD. The router copies julienschmidt/httprouter as
nsqd configures it: 405 with an ``Allow`` header, automatic OPTIONS, trailing-slash and
case-insensitive path redirects. Responses use nsqd's "V1" format helpers below.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import ssl
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Final
from urllib.parse import unquote, urlsplit

from ...protocol.names import is_valid_name
from .listen import backlog, bound_address, listen_socket, peer_address
from .wire import parse_query

__all__ = [
    "HttpError",
    "HttpServer",
    "Request",
    "Response",
    "Router",
    "plain",
    "query_args",
    "request_line",
    "stop_accepting",
    "topic_channel_args",
    "v1_error",
    "v1_ok",
    "valid_name",
]

_MAX_HEADER: Final = 1 << 20
_V1: Final = ("X-NSQ-Content-Type", "nsq; version=1.0")
_JSON: Final = ("Content-Type", "application/json; charset=utf-8")
_TEXT: Final = ("Content-Type", "text/plain; charset=utf-8")


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    content_length: int  # -1 when unknown (chunked), as Go's Request.ContentLength
    body_complete: bool  # False when the body was larger than the server reads
    remote: str
    params: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


def v1_ok(data: object = None) -> Response:
    """nsqd's RespondV1 for success: a string as-is, None as empty, anything else as JSON."""
    if data is None:
        return Response(200, b"", [_V1])
    if isinstance(data, bytes | str):
        body = data.encode() if isinstance(data, str) else data
        return Response(200, body, [_V1, _TEXT] if body else [_V1])
    from .wire import go_json

    return Response(200, go_json(data), [_JSON, _V1])


def v1_error(status: int, message: str) -> Response:
    body = json.dumps({"message": message}, separators=(",", ":")).encode()
    return Response(status, body, [_JSON, _V1])


class HttpError(Exception):
    """Raised by a route handler; the router answers it as nsqd's V1 error with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def valid_name(name: str) -> bool:
    return is_valid_name(name.encode("utf-8", "surrogateescape"))


def query_args(request: Request) -> dict[str, list[str]]:
    """The query string's parameters (``http_api.NewReqParams``): 400 INVALID_REQUEST if bad."""
    try:
        return parse_query(request.query)
    except ValueError:
        raise HttpError(400, "INVALID_REQUEST") from None


def topic_channel_args(params: dict[str, list[str]]) -> tuple[str, str]:
    """``http_api.GetTopicChannelArgs``, with its error codes in its order."""
    if "topic" not in params:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    topic = params["topic"][0]
    if not valid_name(topic):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    if "channel" not in params:
        raise HttpError(400, "MISSING_ARG_CHANNEL")
    channel = params["channel"][0]
    if not valid_name(channel):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def plain(status: int, text: str) -> Response:
    return Response(status, text.encode(), [_TEXT])


class Router:
    """Routes by method and path; ``/prefix/:name`` captures the last segment."""

    def __init__(self) -> None:
        self._routes: dict[str, dict[str, Handler]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        self._routes.setdefault(method, {})[path] = handler

    def _match(self, method: str, path: str) -> tuple[Handler, dict[str, str]] | None:
        table = self._routes.get(method, {})
        if path in table:
            return table[path], {}
        head, _, tail = path.rpartition("/")
        if tail:
            for pattern, handler in table.items():
                if pattern.startswith(head + "/:") and "/" not in pattern[len(head) + 2 :]:
                    return handler, {pattern[len(head) + 2 :]: tail}
        return None

    def _allowed(self, method: str, path: str) -> str:
        allowed = [m for m in self._routes if m != method and self._match(m, path)]
        return ", ".join(sorted([*allowed, "OPTIONS"])) if allowed else ""

    async def __call__(self, request: Request) -> Response:
        method, path = request.method, request.path
        found = self._match(method, path)
        if found is not None:
            handler, request.params = found
            try:
                return await handler(request)
            except HttpError as exc:
                return v1_error(exc.status, exc.message)
        if method in self._routes and method != "CONNECT" and path != "/":
            target = path[:-1] if path.endswith("/") else path + "/"
            if self._match(method, target) is None:
                lowered = {p.lower(): p for p in self._routes[method] if ":" not in p}
                target = lowered.get(path.lower().rstrip("/") or "/", "")
            if target:
                return _redirect(request, target, 301 if method == "GET" else 307)
        allow = self._allowed(method, path)
        if method == "OPTIONS" and allow:
            return Response(200, b"", [("Allow", allow)])
        if allow:
            response = v1_error(405, "METHOD_NOT_ALLOWED")
            response.headers.insert(0, ("Allow", allow))
            return response
        return v1_error(404, "NOT_FOUND")


def _redirect(request: Request, path: str, status: int) -> Response:
    location = path + ("?" + request.query if request.query else "")
    headers = [("Location", location)]
    if request.method in ("GET", "HEAD"):
        body = f'<a href="{location}">{HTTPStatus(status).phrase}</a>.\n\n'.encode()
        return Response(status, body, [("Content-Type", "text/html; charset=utf-8"), *headers])
    return Response(status, b"", headers)


async def stop_accepting(*servers: asyncio.Server | None) -> None:
    """Stop taking connections off the servers' listen queues, then let the ones already taken
    reach ``connection_made``. Call before ``Server.close()``: asyncio (3.11) leaks the socket of a
    connection accepted just before ``close()`` whose setup runs after it."""
    loop = asyncio.get_running_loop()
    for server in servers:
        if server is not None:
            for sock in server.sockets:
                loop.remove_reader(sock.fileno())
    for _ in range(2):
        await asyncio.sleep(0)


class _BadRequest(Exception):
    pass


def _go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` for a short span: ``1.316µs``, ``20.5ms``."""
    ns = max(0, round(seconds * 1e9))
    if ns < 1000:
        return f"{ns}ns"
    for unit, name, digits in ((1_000, "\u00b5s", 3), (1_000_000, "ms", 6), (10**9, "s", 9)):
        if ns < unit * 1000 or name == "s":
            whole, frac = divmod(ns, unit)
            text = f"{frac:0{digits}d}".rstrip("0")
            return f"{whole}.{text}{name}" if text else f"{whole}{name}"
    raise AssertionError  # unreachable


def request_line(request: Request, status: int, start: float) -> str:
    """The line nsqd's ``http_api.Log`` writes: ``200 GET /ping (127.0.0.1:5000) 1.3µs``."""
    uri = f"{request.path}?{request.query}" if request.query else request.path
    took = _go_duration(time.perf_counter() - start)
    return f"{status} {request.method} {uri} ({request.remote}) {took}"


class HttpServer:
    """Serves ``handler`` on one listening socket; bodies above ``body_limit`` are not read."""

    def __init__(self, handler: Handler, *, body_limit: int) -> None:
        self.handler = handler
        self.body_limit = body_limit
        self._server: asyncio.Server | None = None
        self.bound = ""
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def server(self) -> asyncio.Server | None:
        return self._server

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen as Go does (:mod:`.listen`); the bound port. ``bound`` names the address."""
        sock = listen_socket(host, port)
        self._server = await asyncio.start_server(
            self._serve, sock=sock, ssl=tls, limit=_MAX_HEADER, backlog=backlog()
        )
        self.bound = bound_address(sock)
        return int(sock.getsockname()[1])

    def close(self, *, abort: bool = False) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            if abort:
                writer.transport.abort()
            else:
                writer.close()

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        peer = peer_address(writer.get_extra_info("peername"))
        remote = peer[1] if peer is not None else ""
        try:
            while True:
                try:
                    request, keep_alive = await self._read_request(reader, writer, remote)
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    break
                except _BadRequest:
                    writer.write(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; "
                        b"charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
                    )
                    break
                try:
                    response = await self.handler(request)
                except Exception:
                    response = v1_error(500, "INTERNAL_ERROR")
                keep_alive = keep_alive and request.body_complete
                writer.write(_serialize(request, response, keep_alive))
                await writer.drain()
                if not keep_alive:
                    break
        except (ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # server shutdown: end quietly (3.11 logs a cancelled stream handler as an error)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, remote: str
    ) -> tuple[Request, bool]:
        # The request line is judged as soon as it is complete, as Go's net/http does: a client
        # speaking nsqd's TCP protocol here ("  V2IDENTIFY\n...") gets 400 and a close at once
        # instead of a silent wait for a blank line that never comes.
        request_line = _strip_eol(await reader.readuntil(b"\n")).decode("latin-1")
        try:
            method, target, version = request_line.split(" ")
        except ValueError:
            raise _BadRequest from None
        if not method or not version.startswith("HTTP/1."):
            raise _BadRequest
        lines: list[str] = []
        size = len(request_line)
        while raw := _strip_eol(await reader.readuntil(b"\n")):
            size += len(raw)
            if size > _MAX_HEADER:
                raise asyncio.LimitOverrunError("request header too large", size)
            lines.append(raw.decode("latin-1"))
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _BadRequest
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        connection = headers.get("connection", "").lower()
        keep_alive = "close" not in connection and (
            version == "HTTP/1.1" or "keep-alive" in connection
        )
        if target.startswith(("http://", "https://")):
            parts = urlsplit(target)
            raw_path, query = parts.path or "/", parts.query
        else:
            raw_path, _, query = target.partition("?")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        try:
            length = -1 if chunked else int(headers.get("content-length", "0") or 0)
        except ValueError:
            raise _BadRequest from None
        if length < -1:
            raise _BadRequest
        body, complete = b"", True
        if length > self.body_limit:
            complete = False
        elif length != 0:
            if headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            if chunked:
                body, complete = await self._read_chunked(reader)
            else:
                body = await reader.readexactly(length)
        request = Request(method, unquote(raw_path), query, headers, body, length, complete, remote)
        return request, keep_alive

    async def _read_chunked(self, reader: asyncio.StreamReader) -> tuple[bytes, bool]:
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise _BadRequest from None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return b"".join(parts), True
            total += size
            parts.append(await reader.readexactly(min(size, self.body_limit + 1)))
            if total > self.body_limit:
                return b"".join(parts), False
            await reader.readexactly(2)


def _strip_eol(line: bytes) -> bytes:
    """A line without its ``\n`` or ``\r\n`` (Go's textproto accepts either)."""
    return line[:-2] if line.endswith(b"\r\n") else line[:-1]


def _serialize(request: Request, response: Response, keep_alive: bool) -> bytes:
    status = response.status
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines.extend(f"{k}: {v}" for k, v in response.headers)
    lines.append(f"Date: {email.utils.formatdate(usegmt=True)}")
    lines.append(f"Content-Length: {len(response.body)}")
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if request.method == "HEAD" else head + response.body
