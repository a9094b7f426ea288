"""A development auth server for nsqd's ``--auth-http-address`` (protocol reference §7.2).

nsqd asks ``GET /auth?common_name=&remote_ip=&secret=&tls=`` when a client sends AUTH, and
expects ``200`` with ``{"ttl", "identity", "identity_url", "authorizations": [...]}``. What nsqd
then tells the client:

* known secret with at least one authorization -> the AUTH reply JSON (``identity``, ...);
* known secret mapped to an empty list, or an unknown secret with ``unknown_secret="empty"``
  -> 200 with no authorizations -> ``E_UNAUTHORIZED AUTH no authorizations found``;
* unknown secret with ``unknown_secret="forbidden"`` (the default) -> 403 (plain text, so nsqd
  does not retry over HTTPS) -> ``E_AUTH_FAILED AUTH failed``.

Importable (``from test_service.auth_server import AuthServer``) and runnable::

    python test_service/auth_server.py --port 4181 --secret s3cret \\
        --secret readonly:.*:.*:subscribe --secret pubonly:^events$::publish

``--secret SECRET[:TOPIC_REGEX[:CHANNEL_REGEX[:PERMS]]]`` (PERMS comma-separated; defaults
``.*``, ``.*``, ``subscribe,publish``); repeating a secret adds authorizations to it. Regexes
cannot contain ``:`` on the command line. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any, Literal, Self

__all__ = ["ALLOW_ALL", "AuthRequest", "AuthServer", "main", "parse_secret_spec"]

Authorization = dict[str, Any]
ALLOW_ALL: list[Authorization] = [
    {"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}
]
UnknownSecret = Literal["forbidden", "empty"]


@dataclass(frozen=True)
class AuthRequest:
    """One ``/auth`` query nsqd made."""

    secret: str
    remote_ip: str
    tls: bool
    common_name: str
    path: str
    accept: str

    @property
    def query(self) -> dict[str, str]:
        """Every query parameter nsqd sent, by name (``secret``, ``remote_ip``, ``tls``, ...)."""
        query = urllib.parse.urlsplit(self.path).query
        return dict(urllib.parse.parse_qsl(query, keep_blank_values=True))


class AuthServer:
    """Threaded HTTP server implementing nsqd's auth contract for a fixed set of secrets.

    ``secrets`` maps a secret to its authorization entries (``None``: no secret is known).
    Every query is recorded in :attr:`requests`. ``set_secret``/``remove_secret`` change the
    answers while running (with a short ``ttl``, that provokes nsqd's re-query paths);
    ``set_reply`` makes a secret get a fixed reply, well-formed or not (how nsqd takes odd
    answers).
    """

    def __init__(
        self,
        secrets: Mapping[str, Sequence[Authorization]] | None = None,
        ttl: int = 3600,
        *,
        unknown_secret: UnknownSecret = "forbidden",
        identity_url: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
    ) -> None:
        self.ttl = ttl
        self.verbose = verbose
        self.unknown_secret: UnknownSecret = unknown_secret
        self.identity_url = identity_url
        self._secrets: dict[str, list[Authorization]] = {
            secret: [dict(a) for a in auths] for secret, auths in (secrets or {}).items()
        }
        self._ttls: dict[str, int] = {}
        self._replies: dict[str, tuple[int, Any]] = {}
        self._requests: list[AuthRequest] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._host = host
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- configuration --

    def set_secret(
        self, secret: str, authorizations: Sequence[Authorization], *, ttl: int | None = None
    ) -> None:
        """Answer ``secret`` with these authorizations (for ``ttl`` seconds, default the
        server's)."""
        with self._lock:
            self._secrets[secret] = [dict(a) for a in authorizations]
            self._replies.pop(secret, None)
            if ttl is None:
                self._ttls.pop(secret, None)
            else:
                self._ttls[secret] = ttl

    def set_reply(self, secret: str, status: int, body: Any) -> None:
        """Answer ``secret`` with ``status`` and ``body`` as they are: a ``str`` as plain text,
        anything else as JSON (e.g. a 500, a 403, or a reply missing fields)."""
        with self._lock:
            self._replies[secret] = (status, body)

    def remove_secret(self, secret: str) -> None:
        with self._lock:
            self._secrets.pop(secret, None)
            self._replies.pop(secret, None)
            self._ttls.pop(secret, None)

    # -- what happened --

    @property
    def requests(self) -> list[AuthRequest]:
        """A copy of every query received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[AuthRequest]:
        """Block until at least ``count`` queries arrived; returns them. TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"auth server got {len(self._requests)} queries, wanted {count}"
                    )
                self._changed.wait(remaining)
            return list(self._requests)

    # -- the answer --

    def answer(self, request: AuthRequest) -> tuple[int, bytes, str]:
        """(status, body, content type) for one query; records it."""
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()
            auths = self._secrets.get(request.secret)
            fixed = self._replies.get(request.secret)
            ttl = self._ttls.get(request.secret, self.ttl)
        if fixed is not None:
            status, body = fixed
            if isinstance(body, str):
                return status, body.encode(), "text/plain"
            return status, json.dumps(body).encode(), "application/json"
        if auths is None and self.unknown_secret == "forbidden":
            return 403, b"forbidden: unknown secret\n", "text/plain"
        reply = {
            "ttl": ttl,
            "identity": request.secret if auths is not None else "",
            "identity_url": self.identity_url,
            "authorizations": auths or [],
        }
        return 200, json.dumps(reply).encode(), "application/json"

    # -- life cycle --

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("AuthServer is not started")
        port: int = self._server.server_address[1]
        return port

    @property
    def address(self) -> str:
        """``"127.0.0.1:port"``, the value for nsqd's ``--auth-http-address``."""
        return f"{self._host}:{self.port}"

    def start(self) -> None:
        if self._server is not None:
            return
        server = ThreadingHTTPServer((self._host, self._port), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="auth-server"
        )
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(5)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _make_handler(owner: AuthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "nsqclient-dev-auth/1"

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/ping":
                self._send(200, b"OK", "text/plain")
                return
            if url.path != "/auth":
                self._send(404, b'{"message":"NOT_FOUND"}', "application/json")
                return
            query = urllib.parse.parse_qs(url.query, keep_blank_values=True)

            def one(name: str) -> str:
                return query.get(name, [""])[0]

            request = AuthRequest(
                secret=one("secret"),
                remote_ip=one("remote_ip"),
                tls=one("tls") == "true",
                common_name=one("common_name"),
                path=self.path,
                accept=self.headers.get("Accept", ""),
            )
            self._send(*owner.answer(request))

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            if owner.verbose:
                sys.stderr.write(f"auth_server: {self.address_string()} {format % args}\n")

    return Handler


def parse_secret_spec(spec: str) -> tuple[str, Authorization]:
    """``SECRET[:TOPIC[:CHANNEL[:PERMS]]]`` -> (secret, authorization entry)."""
    parts = spec.split(":")
    if not parts[0] or len(parts) > 4:
        raise ValueError(f"bad --secret {spec!r}: want SECRET[:TOPIC[:CHANNEL[:PERMS]]]")
    parts += [""] * (4 - len(parts))
    secret, topic, channel, perms = parts
    permissions = [p for p in perms.split(",") if p] or ["subscribe", "publish"]
    for p in permissions:
        if p not in ("subscribe", "publish"):
            raise ValueError(f"bad permission {p!r} in --secret {spec!r}")
    return secret, {
        "permissions": permissions,
        "topic": topic or ".*",
        "channels": [channel or ".*"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4181)
    parser.add_argument("--ttl", type=int, default=3600, help="seconds nsqd caches an answer")
    parser.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="SECRET[:TOPIC[:CHANNEL[:PERMS]]]",
        help="a known secret and one authorization (repeatable)",
    )
    parser.add_argument(
        "--unknown-secret",
        choices=["forbidden", "empty"],
        default="forbidden",
        help="forbidden: 403 (nsqd: E_AUTH_FAILED); empty: no authorizations (E_UNAUTHORIZED)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    secrets: dict[str, list[Authorization]] = {}
    for spec in args.secret:
        try:
            secret, auth = parse_secret_spec(spec)
        except ValueError as exc:
            parser.error(str(exc))
        secrets.setdefault(secret, []).append(auth)
    server = AuthServer(
        secrets,
        ttl=args.ttl,
        unknown_secret=args.unknown_secret,
        host=args.host,
        port=args.port,
        verbose=args.verbose,
    )
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    print(f"auth server listening on {server.address} (secrets: {', '.join(secrets) or 'none'})")
    sys.stdout.flush()
    while not stopping.wait(0.5):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
