""":class:`EmbeddedNsqd`: an in-process nsqd 1.3.0 on the running asyncio loop.

It listens on TCP (the V2 protocol, :mod:`.connection`), HTTP (:mod:`.nsqd_http`) and, with a
certificate, HTTPS; registers with the lookupds it is given; and keeps topics in memory
(:mod:`.topic`). The API mirrors the ``NsqdProcess`` test helper with coroutines;
:class:`~.threaded.ThreadedEmbeddedNsqd` offers it with blocking calls.

What survives, mirroring ``NsqdProcess`` (whose data folder lives from construction to ``stop()``):
``restart()`` is a clean nsqd exit and start on the same ports, so topics, channels, pause flags
and messages survive (in-flight and deferred ones back in the queue, attempts kept; ``#ephemeral``
ones are gone); ``kill()`` is SIGKILL, so after the next ``start()`` the topics, channels and
pause flags are back (nsqd's metadata file) but every message is lost; ``stop()`` ends it all and
a later ``start()`` is a fresh nsqd.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import socket
import ssl
import time
import warnings
from collections.abc import Awaitable, Sequence
from types import TracebackType
from typing import Any, Final

from .auth import AuthState, query_any
from .connection import ClientConnection
from .httpserver import HttpServer, stop_accepting
from .listen import WILDCARD_HOSTS, backlog, bound_address, listen_socket
from .logs import LogBuffer
from .lookup_peer import LookupPeer, lookupd_channels, register
from .nsqd_http import NsqdHttpApi
from .options import TLS_MIN_VERSIONS, NsqdOptions, parse_flags, split_address
from .queuescan import QueueScanner
from .topic import Broker

__all__ = ["EmbeddedNsqd"]

VERSION: Final = "1.3.0"
_FLAG_NAMES: Final = frozenset(f.name for f in dataclasses.fields(NsqdOptions))
_IGNORED_FLAGS: Final = frozenset(  # nsqd flags with no effect on an in-memory server
    {
        "data_path",
        "max_bytes_per_file",
        "sync_every",
        "sync_timeout",
        "statsd_address",
        "statsd_prefix",
        "statsd_interval",
        "statsd_mem_stats",
        "statsd_udp_packet_size",
        "statsd_exclude_ephemeral",
        "e2e_processing_latency_percentile",
        "e2e_processing_latency_window_time",
        "config",
    }
)


def _addresses(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if not value:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


class EmbeddedNsqd:
    """An nsqd that our client cannot tell from the real one. Durations are milliseconds."""

    version = VERSION

    def __init__(
        self,
        tcp_address: str = "127.0.0.1:0",
        http_address: str = "127.0.0.1:0",
        *,
        lookupd_tcp_addresses: str | Sequence[str] = (),
        msg_timeout: int = 60_000,
        max_msg_timeout: int = 900_000,
        max_rdy_count: int = 2500,
        max_msg_size: int = 1_048_576,
        max_body_size: int = 5_242_880,
        max_req_timeout: int = 3_600_000,
        max_heartbeat_interval: int = 60_000,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        tls_required: bool | str = False,
        auth_http_address: str | Sequence[str] | None = None,
        snappy: bool = True,
        deflate: bool = True,
        max_deflate_level: int = 6,
        mem_queue_size: int = 10_000,
        tcp_port: int | None = None,
        http_port: int | None = None,
        https_port: int | None = None,
        tls_root_ca: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        data_dir: object = None,
        log_path: object = None,
        binary: object = None,
        **more: Any,
    ) -> None:
        """Keyword names follow nsqd's flags and ``NsqdProcess``'s arguments; ``extra_args``
        takes nsqd flags too (``["--msg-timeout=1s"]``) and wins. ``data_dir``, ``log_path``
        and ``binary`` are accepted for compatibility and have no effect."""
        options: dict[str, Any] = {
            "tcp_address": tcp_address,
            "http_address": http_address,
            "msg_timeout": msg_timeout,
            "max_msg_timeout": max_msg_timeout,
            "max_rdy_count": max_rdy_count,
            "max_msg_size": max_msg_size,
            "max_body_size": max_body_size,
            "max_req_timeout": max_req_timeout,
            "max_heartbeat_interval": max_heartbeat_interval,
            "tls_cert": os.fspath(tls_cert) if tls_cert else None,
            "tls_key": os.fspath(tls_key) if tls_key else None,
            "tls_required": tls_required,
            "snappy": snappy,
            "deflate": deflate,
            "max_deflate_level": max_deflate_level,
            "mem_queue_size": mem_queue_size,
            **more,
        }
        if tls_root_ca is not None:
            options["tls_root_ca_file"] = os.fspath(tls_root_ca)
        flags = parse_flags(extra_args, _FLAG_NAMES, _IGNORED_FLAGS)
        options["lookupd_tcp_addresses"] = (
            *_addresses(lookupd_tcp_addresses),
            *flags.pop("lookupd_tcp_addresses", ()),
        )
        options["auth_http_addresses"] = (
            *_addresses(auth_http_address),
            *flags.pop("auth_http_addresses", ()),
        )
        options.update(flags)
        host = split_address(options["tcp_address"])[0]
        if tcp_port is not None:
            options["tcp_address"] = _join(host, tcp_port)
        http_host = split_address(options["http_address"])[0]
        if http_port is not None:
            options["http_address"] = _join(http_host, http_port)
        if https_port is not None:
            options["https_address"] = _join(http_host, https_port)
        self.options = NsqdOptions(**options)
        self.log = LogBuffer("nsqd")
        self.log.level = self.options.log_level
        self.log.prefix = self.options.log_prefix
        self.tls_context = self._tls_context() if self.options.tls_cert else None
        self.conns: set[ClientConnection] = set()
        self._client_ids = itertools.count(1)
        self._broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tcp: asyncio.Server | None = None
        self._tcp_bound = ""
        self._http: HttpServer | None = None
        self._https: HttpServer | None = None
        self._peers: dict[str, LookupPeer] = {}
        self._ping_task: asyncio.Task[None] | None = None
        self._all_closed: asyncio.Event | None = None
        self.tcp_port = split_address(self.options.tcp_address)[1]
        self.http_port = split_address(self.options.http_address)[1]
        self.https_port: int | None = None
        self.start_time = time.time()
        self.running = False

    # -- addresses (valid once started; ports stay the same across restarts) --

    @property
    def host(self) -> str:
        """The host clients connect to (``127.0.0.1`` when listening on all interfaces)."""
        host = split_address(self.options.tcp_address)[0]
        return "127.0.0.1" if host in WILDCARD_HOSTS else host

    @property
    def tcp_address(self) -> str:
        """``host:port`` for TCP clients (the real port once started, if it was 0)."""
        return _join(self.host, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP API (the real port once started)."""
        return _join(split_address(self.options.http_address)[0], self.http_port)

    @property
    def https_address(self) -> str | None:
        """``host:port`` of the HTTPS API, or None when TLS is not configured."""
        if self.https_port is None:
            return None
        return _join(split_address(self.options.http_address)[0], self.https_port)

    @property
    def broadcast_address(self) -> str:
        """What this nsqd tells lookupd to hand out to clients, as ``--broadcast-address``."""
        if self.options.broadcast_address:
            return self.options.broadcast_address
        host = split_address(self.options.tcp_address)[0]
        return socket.gethostname() if host in WILDCARD_HOSTS else host

    @property
    def broadcast_tcp_port(self) -> int:
        """The TCP port registered with lookupd: ``--broadcast-tcp-port``, else the real one."""
        return self.options.broadcast_tcp_port or self.tcp_port

    @property
    def broadcast_http_port(self) -> int:
        """The HTTP port registered with lookupd: ``--broadcast-http-port``, else the real one."""
        return self.options.broadcast_http_port or self.http_port

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop it runs on. AssertionError before :meth:`start`."""
        assert self._loop is not None, "EmbeddedNsqd is not running"
        return self._loop

    @property
    def broker(self) -> Broker:
        """Its topics and channels (the state behind the protocol); AssertionError before start."""
        assert self._broker is not None, "EmbeddedNsqd is not running"
        return self._broker

    @property
    def tls_required(self) -> bool:
        """True when clients must upgrade to TLS (``tls_required``), as ``--tls-required``."""
        return bool(self.options.tls_required)

    @property
    def auth_enabled(self) -> bool:
        """True when AUTH is required (``auth_http_addresses`` given), as nsqd's flag."""
        return bool(self.options.auth_http_addresses)

    def next_client_id(self) -> int:
        """A new client id (nsqd numbers its connections from 1). For the server's connections."""
        return next(self._client_ids)

    def forget(self, conn: ClientConnection) -> None:
        """A connection is gone (called from ``connection_lost``)."""
        self.conns.discard(conn)
        if not self.conns and self._all_closed is not None:
            self._all_closed.set()

    def logs(self, since: int = 0) -> str:
        """Recent log lines, from offset ``since`` (see :meth:`log_size`)."""
        return self.log.text(since)

    def log_size(self) -> int:
        """Bytes logged so far: pass it to ``logs(since=...)`` later to see only what came after."""
        return self.log.size()

    # -- lifecycle --

    async def start(self) -> EmbeddedNsqd:
        """Listen (TCP, HTTP, HTTPS if configured) on the running loop and register with lookupd.

        Returns itself; a no-op when running. Call from a coroutine; the server then lives on that
        loop (use ``ThreadedEmbeddedNsqd`` from blocking code). OSError if a port is taken.
        """
        if self.running:
            return self
        loop = self._loop = asyncio.get_running_loop()
        opts = self.options
        if self._broker is None:
            self._broker = Broker(
                loop,
                mem_queue_size=opts.mem_queue_size,
                max_channel_consumers=opts.max_channel_consumers,
                max_msg_timeout=opts.max_msg_timeout / 1000,
                node_id=opts.node_id,
                log=self.log,
            )
            self._broker.notify = self._notify
            self._broker.precreate = self._precreate
        else:
            self._broker.rebind(loop)
        if not opts.precise_timeouts:
            broker = self._broker
            self._broker.scanner = QueueScanner(
                loop,
                lambda: [c for t in list(broker.topics.values()) for c in t.channels.values()],
                interval=opts.queue_scan_interval / 1000,
                refresh_interval=opts.queue_scan_refresh_interval / 1000,
                selection_count=opts.queue_scan_selection_count,
                dirty_percent=opts.queue_scan_dirty_percent,
            )
        self.log("INFO", f"nsqd v{VERSION} (built w/nsqclient embedded)")
        self.log("INFO", f"ID: {opts.node_id}")
        self.start_time = time.time()
        host = split_address(opts.tcp_address)[0]
        sock = listen_socket(host, self.tcp_port)
        self._tcp_bound = bound_address(sock)
        self._tcp = await loop.create_server(
            lambda: ClientConnection(self), sock=sock, backlog=backlog()
        )
        self.tcp_port = sock.getsockname()[1]
        limit = max(opts.max_body_size, opts.max_msg_size) + 1
        self._http = HttpServer(NsqdHttpApi(self, https=False), body_limit=limit)
        http_host = split_address(opts.http_address)[0]
        self.http_port = await self._http.start(http_host, self.http_port)
        if self.tls_context is not None:
            self._https = HttpServer(NsqdHttpApi(self, https=True), body_limit=limit)
            wanted = split_address(opts.https_address)[1] if opts.https_address else 0
            self.https_port = await self._https.start(
                http_host, self.https_port or wanted, self.tls_context
            )
        self.running = True
        if self._broker.scanner is not None:
            self._broker.scanner.start()
        self.set_lookupd_addresses(list(opts.lookupd_tcp_addresses))
        self.log("INFO", f"TCP: listening on {self._tcp_bound}")
        self.log("INFO", f"HTTP: listening on {self._http.bound}")
        if self._https is not None:
            self.log("INFO", f"HTTPS: listening on {self._https.bound}")
        self._ping_task = loop.create_task(self._ping_loop())
        return self

    async def stop(self) -> None:
        """Clean exit; nothing is kept for a later ``start()``."""
        await self._shutdown(abort=False, keep="nothing")

    async def kill(self) -> None:
        """Like SIGKILL: connections dropped abruptly; only topics/channels survive."""
        await self._shutdown(abort=True, keep="metadata")

    async def restart(self) -> None:
        """Clean exit and start on the same ports, messages and topics kept."""
        await self._shutdown(abort=False, keep="messages")
        await self.start()

    def drop_everything(self) -> None:
        """Synchronously stop listening and abort every socket: the first half of ``kill()``,
        for a caller already on the loop thread that must not let anything else run first."""
        if not self.running:
            return
        if self._tcp is not None:
            self._tcp.close()
        for server in (self._http, self._https):
            if server is not None:
                server.close(abort=True)
        for peer in self._peers.values():
            peer.abort()
        for conn in list(self.conns):
            conn.abort()

    async def _shutdown(self, *, abort: bool, keep: str) -> None:
        if not self.running:
            if keep == "nothing":
                self._broker = None
            return
        self.running = False
        if abort:
            self.log("INFO", "NSQ: killed")
        if self._ping_task is not None:
            self._ping_task.cancel()
        assert self._tcp is not None
        self.log("INFO", f"TCP: closing {self._tcp_bound}")
        for name, listener in (("HTTP", self._http), ("HTTPS", self._https)):
            if listener is not None:
                self.log("INFO", f"{name}: closing {listener.bound}")
        await stop_accepting(self._tcp, *(s.server for s in (self._http, self._https) if s))
        self._tcp.close()
        for server in (self._http, self._https):
            if server is not None:
                server.close(abort=abort)
        for peer in self._peers.values():
            if abort:
                peer.abort()
            else:
                await peer.stop()
        self._peers.clear()
        for conn in list(self.conns):
            conn.abort() if abort else conn.close_by_server()
        self.log("INFO", "NSQ: closing topics")
        if self.broker.scanner is not None:
            self.broker.scanner.stop()
            self.broker.scanner = None
        self.broker.shutdown(keep)
        if keep == "nothing":
            self._broker = None
        self.log("INFO", "NSQ: stopping subsystems")
        self.log("INFO", "LOOKUP: closing")
        self.log("INFO", "QUEUESCAN: closing")
        await self._tcp.wait_closed()
        for server in (self._http, self._https):
            if server is not None:
                await server.wait_closed()
        if self.conns:  # let the connection_lost callbacks run
            self._all_closed = asyncio.Event()
            try:
                await asyncio.wait_for(self._all_closed.wait(), 5.0)
            except TimeoutError:
                self.log("WARN", f"{len(self.conns)} connections did not close")
            self._all_closed = None
        self.log("INFO", "NSQ: bye")

    async def __aenter__(self) -> EmbeddedNsqd:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- lookupd --

    def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """Connect to new lookupds, drop removed ones (``PUT /config/nsqlookupd_tcp_addresses``)."""
        self.options.lookupd_tcp_addresses = tuple(addresses)
        if not self.running:
            return
        for address in [a for a in self._peers if a not in addresses]:
            self.loop.create_task(self._peers.pop(address).stop())
        for address in addresses:
            if address not in self._peers:
                self.log("INFO", f"LOOKUP({address}): adding peer")
                peer = self._peers[address] = LookupPeer(self, address)
                peer.start()

    def _notify(self, topic: str, channel: str | None, registered: bool) -> None:
        cmd = register(topic, channel, on=registered)
        verb = "REGISTER" if registered else "UNREGISTER"
        what = f"channel {verb} {topic} {channel}" if channel else f"topic {verb} {topic}"
        for address, peer in self._peers.items():
            self.log("INFO", f"LOOKUPD({address}): {what}")
            peer.command(cmd)

    def _precreate(self, topic: str) -> Awaitable[list[str]] | None:
        addresses = [a for p in self._peers.values() if (a := p.http_address)]
        if not addresses:
            if self._peers:
                self.log("ERROR", f"no available nsqlookupd to query for channels of {topic}")
            return None
        return lookupd_channels(addresses, topic)

    async def _ping_loop(self) -> None:
        interval = self.options.lookupd_ping_interval / 1000
        while True:
            await asyncio.sleep(interval)
            for peer in self._peers.values():
                peer.command(b"PING\n")

    # -- TLS and auth --

    def _tls_context(self) -> ssl.SSLContext:
        opts = self.options
        assert opts.tls_cert and opts.tls_key
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(opts.tls_cert, opts.tls_key)
        minimum = TLS_MIN_VERSIONS[opts.tls_min_version][0]
        if minimum < ssl.TLSVersion.TLSv1_2:
            # nsqd 1.3.0 accepts TLS 1.0 by default; OpenSSL 3 refuses below 1.2 at its default
            # security level 1+, so drop to level 0 (a test server: old clients must connect)
            context.set_ciphers("DEFAULT:@SECLEVEL=0")
        with warnings.catch_warnings():  # TLSv1 / TLSv1_1 are deprecated names since 3.10
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = minimum
        if opts.tls_root_ca_file:
            context.load_verify_locations(opts.tls_root_ca_file)
        if opts.tls_client_auth_policy:
            if not opts.tls_root_ca_file:
                raise ValueError("tls_client_auth_policy needs tls_root_ca_file here")
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    async def query_auth(
        self, remote_ip: str, tls: bool, common_name: str, secret: str
    ) -> AuthState:
        """Ask the configured auth server(s) about ``secret``, as nsqd's AUTH does."""
        opts = self.options
        verify: ssl.SSLContext | bool = True
        if opts.tls_root_ca_file:
            verify = ssl.create_default_context(cafile=opts.tls_root_ca_file)
        return await query_any(
            opts.auth_http_addresses,
            remote_ip=remote_ip,
            tls=tls,
            common_name=common_name,
            secret=secret,
            connect_timeout=opts.http_client_connect_timeout / 1000,
            request_timeout=opts.http_client_request_timeout / 1000,
            verify=verify,
        )


def _join(host: str, port: int) -> str:
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
