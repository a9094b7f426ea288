"""The supervisor's HTTP endpoints, served from its own selector loop (no thread, no framework).

The supervisor is single-threaded on purpose: it forks its children, and a process that forks
must not have other threads (one could hold a lock the child then waits for forever; Python
3.12+ warns about it). So the health server is not ``http.server`` in a thread but a small
non-blocking responder on the supervisor's :mod:`selectors` loop: it reads one request (``GET`` or
``HEAD``, headers up to 8 KiB, within :data:`REQUEST_TIMEOUT`), asks the supervisor for the
answer (which may come later: ``/stats`` waits for the children's answers), writes a JSON body
with ``Connection: close`` and closes. Probes and scrapers need nothing more.

:func:`sum_stats` is the ``total`` of ``GET /stats``: the children's ``stats()`` added up.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["REQUEST_TIMEOUT", "HealthServer", "Reply", "sum_stats"]

REQUEST_TIMEOUT = 5.0  # seconds a client gets to send its request and read the answer
_MAX_REQUEST = 8192
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}

#: how the supervisor answers a request: ``reply(status, document)``, now or later
Reply = Callable[[int, dict[str, Any]], None]


class _Request:
    """One accepted connection: read the request, write the answer, close."""

    __slots__ = ("closed", "head", "inbox", "opened", "outbox", "server", "sock")

    def __init__(self, server: HealthServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = b""
        self.head = False
        self.closed = False
        self.opened = time.monotonic()

    def on_event(self, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self._read()
        elif mask & selectors.EVENT_WRITE:
            self._write()

    def _read(self) -> None:
        try:
            chunk = self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not chunk:
            self.close()
            return
        self.inbox += chunk
        end = self.inbox.find(b"\r\n\r\n")
        if end < 0:
            end = self.inbox.find(b"\n\n")
        if end < 0:
            if len(self.inbox) > _MAX_REQUEST:
                self._unregister()
                self.reply(400, {"error": "request head too large"})
            return
        self._unregister()  # nothing more is read; the answer registers for writing
        self._dispatch(bytes(self.inbox[:end]).split(b"\n", 1)[0].strip())

    def _dispatch(self, line: bytes) -> None:
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            self.reply(400, {"error": "not an HTTP/1.x request line"})
            return
        method, target = parts[0], parts[1].decode("latin-1")
        if method not in (b"GET", b"HEAD"):
            self.reply(405, {"error": "only GET and HEAD"})
            return
        self.head = method == b"HEAD"
        path = target.split("?", 1)[0]
        self.server.respond(path, self.reply)

    def reply(self, status: int, document: dict[str, Any]) -> None:
        if self.closed or self.outbox:
            return  # closed meanwhile (timed out), or answered already
        body = json.dumps(document, indent=1, default=str).encode() + b"\n"
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        self.outbox = head if self.head else head + body
        self._write()
        if self.outbox and not self.closed:
            self.server.selector.register(self.sock, selectors.EVENT_WRITE, self.on_event)

    def _write(self) -> None:
        try:
            sent = self.sock.send(self.outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        self.outbox = self.outbox[sent:]
        if not self.outbox:
            self.close()

    def _unregister(self) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.server.selector.unregister(self.sock)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.forget(self)
        self._unregister()
        self.sock.close()


class HealthServer:
    """Listens on ``address`` and answers through ``respond(path, reply)``. Runs on the
    supervisor's selector: every method is called from its loop (one thread)."""

    def __init__(
        self,
        address: tuple[str, int],
        selector: selectors.BaseSelector,
        respond: Callable[[str, Reply], None],
    ) -> None:
        self.selector = selector
        self.respond = respond
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family, backlog=64)
        self.sock.setblocking(False)
        self._requests: dict[_Request, None] = {}
        selector.register(self.sock, selectors.EVENT_READ, self._accept)

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def _accept(self, mask: int) -> None:
        for _ in range(16):
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            conn.setblocking(False)
            request = _Request(self, conn)
            self._requests[request] = None
            self.selector.register(conn, selectors.EVENT_READ, request.on_event)

    def forget(self, request: _Request) -> None:
        self._requests.pop(request, None)

    def expire(self, now: float) -> None:
        """Close the connections older than :data:`REQUEST_TIMEOUT` (slow or stuck clients)."""
        for request in [r for r in self._requests if now - r.opened > REQUEST_TIMEOUT]:
            request.close()

    def sockets(self) -> Iterable[socket.socket]:
        """Every socket this server holds (a forked child closes its copies)."""
        yield self.sock
        for request in self._requests:
            yield request.sock

    def close(self) -> None:
        for request in list(self._requests):
            request.close()
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.sock)
        self.sock.close()


def sum_stats(children: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The children's ``stats()`` added up: every number (not the flags), ``connections`` as
    their count, and ``in_backoff`` as the number of children backing off."""
    total: dict[str, Any] = {}
    for stats in children:
        for key, value in stats.items():
            if key == "connections" and isinstance(value, list):
                total[key] = total.get(key, 0) + len(value)
            elif key == "in_backoff":
                total[key] = total.get(key, 0) + int(bool(value))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
            elif key in ("topic", "channel"):
                total.setdefault(key, value)
    return total
