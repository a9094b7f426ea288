"""A small keep-alive HTTP/1.1 client for the publish calls (``/pub``, ``/mpub``).

Why not httpx here: an httpx request costs about 3,000 Python function calls (URL parsing,
header models, anyio locks, the pool's scans of every connection), near 1 ms of CPU on a small
machine, so HTTP publishing topped out near 1,300 msgs/s. A publish is one POST with a known
body to a known host, answered with a few bytes; writing the request head from prepared bytes
and parsing the answer here costs a few tens of microseconds. The transports route calls here
only on the clients they create themselves (a caller's own httpx client keeps its proxies, auth
and hooks): the asyncio one its publish calls (the others stay on httpx, bounded by a deadline
around them), the blocking one every call, because only here does ``timeout`` bound the whole
request (httpx's is per phase: a server trickling its answer a byte at a time never trips it,
and a blocking httpx call cannot be cut short from outside).

``ResponseParser`` is I/O-free (Content-Length, chunked, or read-to-close bodies);
:class:`AsyncWire` (an asyncio protocol per connection) and :class:`SyncWire` (blocking
sockets, shareable by threads) keep idle connections for reuse, dropping any the server closed
meanwhile. Neither retries: a request on a connection that broke may have been applied, and the
caller's error says so.
"""

from __future__ import annotations

import asyncio
import re
import select
import socket
import ssl
import time
from collections import deque
from typing import Any, cast
from urllib.parse import quote, urlsplit

from ..errors import ConfigError, HTTPConnectError, HTTPProtocolError, HTTPTimeoutError
from ._errors import NOT_HTTP_HINT, outcome

__all__ = ["AsyncWire", "ResponseParser", "SyncWire", "WireResponse", "request_target"]

#: idle connections kept per client; more concurrent publishers open (and then close) extras
MAX_IDLE = 32
#: connections open at once per asyncio client (httpx's default too); more requests queue
MAX_CONNECTIONS = 100
_MAX_HEAD = 64 * 1024
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


class WireResponse:
    """A complete answer: status, headers (names lowercased), body."""

    __slots__ = ("body", "headers", "keep_alive", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes, keep_alive: bool):
        self.status = status
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


def request_target(path: str, params: tuple[tuple[str, str], ...]) -> str:
    """``/pub?topic=t`` with each value percent-encoded (``#ephemeral`` topics need it)."""
    if not params:
        return path
    return path + "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in params)


class ResponseParser:
    """Feed bytes in, get one :class:`WireResponse` out (or None while incomplete)."""

    __slots__ = ("_body_len", "_buf", "_chunks", "_head", "_mode")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._head: tuple[int, dict[str, str], bool] | None = None
        self._mode = ""  # "length", "chunked", "close"
        self._body_len = 0
        self._chunks: list[bytes] = []

    def feed(self, data: bytes) -> WireResponse | None:
        self._buf += data
        if self._head is None and not self._parse_head():
            return None
        return self._body()

    def feed_eof(self) -> WireResponse | None:
        """The server closed: the answer is complete only if its body runs to the close."""
        if self._head is not None and self._mode == "close":
            status, headers, _ = self._head
            return WireResponse(status, headers, bytes(self._buf), False)
        return None

    @property
    def has_head(self) -> bool:
        """The answer's status line and headers arrived (it is HTTP)."""
        return self._head is not None

    @property
    def started(self) -> bool:
        """Some of the answer arrived (so the request surely reached the server)."""
        return bool(self._buf) or self._head is not None

    def _parse_head(self) -> bool:
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _MAX_HEAD:
                    raise ValueError("response head too large")
                return False
            lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
            del self._buf[: end + 4]
            version, _, rest = lines[0].partition(" ")
            if not version.startswith("HTTP/1."):
                raise ValueError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
            status = int(rest[:3])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise ValueError(f"bad header line {line[:60]!r}")
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:  # interim answer (we never ask for one): skip it
                continue
            conn = headers.get("connection", "").lower()
            keep = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._mode = "chunked"
            elif "content-length" in headers:
                self._mode = "length"
                self._body_len = int(headers["content-length"])
                if self._body_len < 0:
                    raise ValueError(f"negative Content-Length {self._body_len}")
            elif status in (204, 304):
                self._mode, self._body_len = "length", 0
            else:
                self._mode, keep = "close", False
            self._head = (status, headers, keep)
            return True

    def _body(self) -> WireResponse | None:
        assert self._head is not None
        status, headers, keep = self._head
        buf = self._buf
        if self._mode == "length":
            if len(buf) < self._body_len:
                return None
            if len(buf) > self._body_len:
                raise ValueError("more bytes than the response's Content-Length")
            return WireResponse(status, headers, bytes(buf), keep)
        if self._mode == "close":
            return None
        while True:  # chunked: size line, data, CRLF; a zero size ends it (after trailers)
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return None
            size = int(bytes(buf[:line_end]).split(b";", 1)[0].strip(), 16)
            if size < 0:
                raise ValueError(f"negative chunk size {size}")
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", line_end)
                if buf[line_end : line_end + 4] == b"\r\n\r\n":
                    trailer_end = line_end
                if trailer_end < 0:
                    return None
                return WireResponse(status, headers, b"".join(self._chunks), keep)
            if len(buf) < line_end + 2 + size + 2:
                return None
            self._chunks.append(bytes(buf[line_end + 2 : line_end + 2 + size]))
            del buf[: line_end + 2 + size + 2]


class _Origin:
    """Where requests go, and the constant part of every request head."""

    def __init__(self, base_url: str, headers: dict[str, str], verify: ssl.SSLContext | bool):
        parts = urlsplit(base_url)
        self.host = (parts.hostname or "127.0.0.1").strip("[]")
        self.https = parts.scheme == "https"
        self.port = parts.port or (443 if self.https else 80)
        self.address = f"{self.host}:{self.port}"
        self.ssl: ssl.SSLContext | None = None
        if self.https:
            self.ssl = _context(verify)
        fixed = {"Host": parts.netloc, **headers}
        for name, value in fixed.items():
            if not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
                raise ConfigError(
                    f"header {name!r}: {value!r} cannot be sent (names are HTTP tokens; values "
                    "are printable Latin-1 without line breaks)"
                )
        self._tail = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")

    def encode(self, method: str, target: str, content: bytes | None) -> bytes:
        body = content or b""
        head = f"{method} {target} HTTP/1.1\r\nContent-Length: {len(body)}\r\n".encode("latin-1")
        return b"".join((head, self._tail, b"\r\n", body))


def _context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    """The context httpx would build: certifi's CAs for True (httpx's own dependency), none
    checked for False."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _connect_failed(exc: BaseException, url: str, address: str) -> HTTPConnectError:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail += (
            "; the server certificate was not verified: pass verify=ssl.create_default_context("
            "cafile=...) for a private CA"
        )
    else:
        detail += "; is the daemon running and is this its HTTP address?"
    return HTTPConnectError(f"no response ({detail})", url=url, address=address, sent=False)


def _broke(
    exc: BaseException | None, url: str, address: str, method: str = "POST", head: bool = True
) -> HTTPConnectError:
    """The request was sent and the connection broke; ``head`` False: before any HTTP answer
    head (what a TCP port given as the HTTP one does)."""
    detail = (str(exc) or type(exc).__name__) if exc is not None else "connection closed"
    if not head:
        detail += NOT_HTTP_HINT
    return HTTPConnectError(f"no response ({detail}); {outcome(method)}", url=url, address=address)


def _bad_answer(exc: Exception, url: str) -> HTTPProtocolError:
    return HTTPProtocolError(f"malformed HTTP response ({exc})", url=url)


def _left(deadline: float) -> float:
    """Seconds until ``deadline`` (monotonic); TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    return left


def _readable(sock: Any) -> bool:
    """Idle and readable means closed by the server (or spoilt by stray bytes)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


# -- asyncio -------------------------------------------------------------------------------------


#: seconds ``AsyncWire.aclose`` waits for its closed connections' transports to end
CLOSE_WAIT = 2.0


class _Conn(asyncio.Protocol):
    __slots__ = ("closed", "gone", "parser", "transport", "waiter")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = ResponseParser()
        self.waiter: asyncio.Future[WireResponse] | None = None
        self.closed = False
        self.gone: asyncio.Future[None] | None = None  # done once the transport is gone

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's does not subclass asyncio.Transport)
        self.transport = cast("asyncio.Transport", transport)
        self.gone = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():  # nothing asked: a stray byte spoils the connection
            self.close()
            return
        try:
            response = self.parser.feed(data)
        except ValueError as exc:
            waiter.set_exception(exc)
            self.close()
            return
        if response is not None:
            waiter.set_result(response)

    def eof_received(self) -> bool | None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            response = self.parser.feed_eof()
            if response is not None:
                waiter.set_result(response)
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        gone = self.gone
        if gone is not None and not gone.done():
            gone.set_result(None)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("the server closed the connection"))

    def stale(self) -> bool:
        """The server closed (or wrote to) this idle connection, and the loop has not seen it
        yet."""
        assert self.transport is not None
        sock = self.transport.get_extra_info("socket")
        return sock is None or _readable(sock)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def close_quietly(self) -> None:
        """Close a connection whose event loop may be closed already (asyncio then refuses to
        close the transport): shut the socket down, so the server sees the close; the transport
        releases the descriptor when it is collected."""
        self.closed = True
        if self.transport is None:
            return
        try:
            self.transport.close()
        except RuntimeError:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class AsyncWire:
    """Idle asyncio connections to one origin, and a request on one of them."""

    def __init__(self, base_url: str, headers: dict[str, str], verify: ssl.SSLContext | bool):
        self._origin = _Origin(base_url, headers, verify)
        self._idle: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self.base_url = base_url
        self.address = self._origin.address
        self.opened = 0  # connections made so far (reuse shows as requests >> opened)
        self._closed = False

    async def request(self, method: str, target: str, content: bytes | None) -> WireResponse:
        """One request; the caller bounds it with a timeout (a cancelled one drops the
        connection, since its answer may still arrive)."""
        if asyncio.get_running_loop() is not self._loop:  # first use, or a new event loop
            self._rebind()
        async with self._slots:
            return await self._request(method, target, content)

    def _rebind(self) -> None:
        """Connections and the semaphore belong to one event loop: a client used under a new
        one (successive ``asyncio.run`` calls) starts afresh rather than hang on the old."""
        self._loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close_quietly()

    async def _request(self, method: str, target: str, content: bytes | None) -> WireResponse:
        origin = self._origin
        data = origin.encode(method, target, content)
        url = self.base_url + target
        idle = self._idle
        conn = None
        while idle:
            conn = idle.pop()
            if not conn.closed and not conn.stale():
                break
            conn.close()
            conn = None
        loop = asyncio.get_running_loop()
        if conn is None:
            try:
                transport, conn = await loop.create_connection(
                    _Conn,
                    origin.host,
                    origin.port,
                    ssl=origin.ssl,
                    server_hostname=origin.host if origin.ssl else None,
                )
            except (OSError, ssl.SSLError) as exc:
                raise _connect_failed(exc, url, origin.address) from exc
            self.opened += 1
            if conn.transport is None:  # uvloop may call connection_made a turn later
                conn.transport = transport
        assert conn.transport is not None
        waiter: asyncio.Future[WireResponse] = loop.create_future()
        conn.waiter = waiter
        conn.parser = ResponseParser()
        ok = False
        try:
            conn.transport.write(data)
            response = await waiter
            ok = True
        except ValueError as exc:
            raise _bad_answer(exc, url) from exc
        except OSError as exc:
            raise _broke(exc, url, origin.address) from exc
        finally:
            conn.waiter = None
            idle = self._idle  # not the list taken above: close() or a new loop replace it
            keep = ok and response.keep_alive and not conn.closed and not self._closed
            if keep and len(idle) < MAX_IDLE:
                idle.append(conn)
            else:
                conn.close()
        return response

    def close(self) -> list[_Conn]:
        """Close the idle connections (returned); those still in a request close when it
        ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close_quietly()  # the caller's loop need not be theirs
        return idle

    async def aclose(self) -> None:
        """:meth:`close`, then wait (at most ``CLOSE_WAIT`` seconds) until those connections
        are gone, when this is their loop: a TLS connection's shutdown takes loop turns, and a
        loop closed before they end leaves its transport open (uvloop then fails to close)."""
        closed = self.close()
        if asyncio.get_running_loop() is not self._loop:
            return
        waits = [c.gone for c in closed if c.gone is not None and not c.gone.done()]
        if waits:
            await asyncio.wait(waits, timeout=CLOSE_WAIT)


# -- blocking ------------------------------------------------------------------------------------


class SyncWire:
    """Idle blocking sockets to one origin. Threads may share it: the idle deque's ``pop`` and
    ``append`` are atomic, and each request holds its socket alone."""

    def __init__(self, base_url: str, headers: dict[str, str], verify: ssl.SSLContext | bool):
        self._origin = _Origin(base_url, headers, verify)
        self._idle: deque[socket.socket] = deque()
        self.base_url = base_url
        self.opened = 0  # connections made so far (a racy count across threads: a statistic)
        self._closed = False

    def _take_idle(self) -> socket.socket | None:
        while True:
            try:
                sock = self._idle.pop()
            except IndexError:
                return None
            if not _readable(sock):
                return sock
            sock.close()  # an idle socket with news was closed by the server (or spoilt)

    def _connect(self, timeout: float, url: str) -> socket.socket:
        origin = self._origin
        try:
            sock = socket.create_connection((origin.host, origin.port), timeout=timeout)
        except TimeoutError as exc:
            raise HTTPTimeoutError(
                f"timed out connecting ({exc})", url=url, address=origin.address
            ) from exc
        except OSError as exc:
            raise _connect_failed(exc, url, origin.address) from exc
        self.opened += 1
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if origin.ssl is not None:
            try:
                sock = origin.ssl.wrap_socket(sock, server_hostname=origin.host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise _connect_failed(exc, url, origin.address) from exc
        return sock

    def request(
        self, method: str, target: str, content: bytes | None, timeout: float
    ) -> WireResponse:
        origin = self._origin
        data = origin.encode(method, target, content)
        url = self.base_url + target
        deadline = time.monotonic() + timeout  # the whole request: connect, send, every read
        sock = self._take_idle() or self._connect(timeout, url)
        parser = ResponseParser()
        keep = False
        try:
            sock.settimeout(_left(deadline))
            sock.sendall(data)  # one timeout for all of it (not reset by each send)
            while True:
                sock.settimeout(_left(deadline))
                chunk = sock.recv(65536)
                response = parser.feed_eof() if not chunk else parser.feed(chunk)
                if response is not None:
                    break
                if not chunk:
                    raise ConnectionResetError("the server closed the connection")
            keep = response.keep_alive
        except TimeoutError as exc:
            raise HTTPTimeoutError(f"timed out ({exc})", url=url, address=origin.address) from exc
        except ValueError as exc:
            raise _bad_answer(exc, url) from exc
        except OSError as exc:
            raise _broke(exc, url, origin.address, method, parser.has_head) from exc
        finally:
            if keep and not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(sock)  # racing threads may keep a few more than MAX_IDLE
            else:
                sock.close()
        if self._closed:  # closed while this request ran: do not leave a socket behind
            self.close()
        return response

    def close(self) -> None:
        """Close the idle sockets; those still in a request close when it ends."""
        self._closed = True
        while self._idle:
            try:
                self._idle.pop().close()
            except IndexError:
                return
