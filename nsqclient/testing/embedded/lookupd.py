""":class:`EmbeddedLookupd`: an in-process nsqlookupd 1.3.0 (TCP registration + HTTP API).

The TCP side speaks ``lookup_protocol_v1.go`` so that embedded *and real* nsqd can register:
magic ``"  V1"``, then text commands answered with ``[int32 size][data]`` (errors too, and they
close the connection). When an nsqd's connection drops, its producer entries go, but the
registration keys stay (an ``#ephemeral`` key goes with its last producer on UNREGISTER).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Final

from ...protocol.names import is_valid_name
from .httpserver import HttpServer, stop_accepting
from .listen import WILDCARD_HOSTS, backlog, bound_address, listen_socket, peer_address
from .logs import LogBuffer
from .lookupd_db import PeerInfo, RegistrationDB
from .lookupd_http import LookupdHttpApi
from .options import parse_flags, split_address

__all__ = ["EmbeddedLookupd"]

VERSION: Final = "1.3.0"
_FLAGS: Final = frozenset(
    {
        "tcp_address",
        "http_address",
        "broadcast_address",
        "inactive_producer_timeout",
        "tombstone_lifetime",
        "log_level",
        "log_prefix",
    }
)


class _LookupError(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class EmbeddedLookupd:
    """nsqlookupd on the running loop. Timeouts in ms, as nsqlookupd's flags."""

    version = VERSION

    def __init__(
        self,
        tcp_address: str = "127.0.0.1:0",
        http_address: str = "127.0.0.1:0",
        *,
        broadcast_address: str | None = None,
        inactive_producer_timeout: int = 300_000,
        tombstone_lifetime: int = 45_000,
        tcp_port: int | None = None,
        http_port: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: object = None,
        binary: object = None,
    ) -> None:
        """Arguments follow nsqlookupd's flags and ``NsqlookupdProcess``'s; ``extra_args``
        takes the flags themselves; ``log_path`` and ``binary`` have no effect."""
        flags = parse_flags(extra_args, _FLAGS, {"config"})
        tcp_address = flags.get("tcp_address", tcp_address)
        http_address = flags.get("http_address", http_address)
        broadcast_address = flags.get("broadcast_address", broadcast_address)
        inactive_producer_timeout = flags.get(
            "inactive_producer_timeout", inactive_producer_timeout
        )
        tombstone_lifetime = flags.get("tombstone_lifetime", tombstone_lifetime)
        if tcp_port is not None:
            tcp_address = _join(split_address(tcp_address)[0], tcp_port)
        if http_port is not None:
            http_address = _join(split_address(http_address)[0], http_port)
        self.options_tcp_address = tcp_address
        self.options_http_address = http_address
        listen_host = split_address(tcp_address)[0]
        wildcard = listen_host in WILDCARD_HOSTS
        self.broadcast_address = broadcast_address or (
            socket.gethostname() if wildcard else listen_host
        )
        self.inactive_producer_timeout = inactive_producer_timeout / 1000
        self.tombstone_lifetime = tombstone_lifetime / 1000
        self.db = RegistrationDB()
        self.log = LogBuffer("nsqlookupd")
        self.log.level = flags.get("log_level", 2)
        self.log.prefix = flags.get("log_prefix", self.log.prefix)
        self.tcp_port = split_address(tcp_address)[1]
        self.http_port = split_address(http_address)[1]
        self.running = False
        self._tcp: asyncio.Server | None = None
        self._tcp_bound = ""
        self._http: HttpServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @staticmethod
    def now() -> float:
        """The clock lookupd ages registrations by (``time.monotonic()``, seconds)."""
        return time.monotonic()

    @property
    def tcp_address(self) -> str:
        """``host:port`` nsqd registers at (the real port once started, if it was 0)."""
        return _join(split_address(self.options_tcp_address)[0], self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP API clients query (the real port once started)."""
        return _join(split_address(self.options_http_address)[0], self.http_port)

    def logs(self, since: int = 0) -> str:
        """Recent log lines, from offset ``since`` (see :meth:`log_size`)."""
        return self.log.text(since)

    def log_size(self) -> int:
        """Bytes logged so far: pass it to ``logs(since=...)`` later to see only what came after."""
        return self.log.size()

    async def start(self) -> EmbeddedLookupd:
        """Listen (TCP for nsqd, HTTP for clients) on the running loop; returns itself.

        A no-op when running. Call from a coroutine; the server then lives on that loop (use
        ``ThreadedEmbeddedLookupd`` from blocking code). OSError if a port is taken.
        """
        if self.running:
            return self
        self.log("INFO", f"nsqlookupd v{VERSION} (built w/nsqclient embedded)")
        sock = listen_socket(split_address(self.options_tcp_address)[0], self.tcp_port)
        self._tcp_bound = bound_address(sock)
        self._tcp = await asyncio.start_server(self._serve, sock=sock, backlog=backlog())
        self.tcp_port = sock.getsockname()[1]
        self._http = HttpServer(LookupdHttpApi(self), body_limit=1 << 20)
        self.http_port = await self._http.start(
            split_address(self.options_http_address)[0], self.http_port
        )
        self.log("INFO", f"HTTP: listening on {self._http.bound}")
        self.log("INFO", f"TCP: listening on {self._tcp_bound}")
        self.running = True
        return self

    async def stop(self) -> None:
        """Close cleanly: stop listening and close every connection. Idempotent."""
        await self._shutdown(abort=False)

    async def kill(self) -> None:
        """Like SIGKILL: stop listening and drop every connection abruptly."""
        await self._shutdown(abort=True)

    async def restart(self) -> None:
        """nsqlookupd keeps nothing on disk: the registry starts empty; nsqds re-register."""
        await self.stop()
        await self.start()

    def drop_everything(self) -> None:
        """Synchronously stop listening and abort every socket (the first half of ``kill()``)."""
        if not self.running:
            return
        if self._tcp is not None:
            self._tcp.close()
        if self._http is not None:
            self._http.close(abort=True)
        for writer in list(self._writers):
            writer.transport.abort()

    async def _shutdown(self, *, abort: bool) -> None:
        if not self.running:
            return
        self.running = False
        assert self._tcp is not None and self._http is not None
        self.log("INFO", f"TCP: closing {self._tcp_bound}")
        self.log("INFO", f"HTTP: closing {self._http.bound}")
        await stop_accepting(self._tcp, self._http.server)
        self._tcp.close()
        self._http.close(abort=abort)
        for writer in list(self._writers):
            writer.transport.abort() if abort else writer.close()
        if self._handlers:  # each sees its connection end and unregisters that nsqd
            await asyncio.wait(list(self._handlers), timeout=2.0)
        await self._tcp.wait_closed()
        await self._http.wait_closed()
        self.db = RegistrationDB()
        self._http = None

    async def __aenter__(self) -> EmbeddedLookupd:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- TCP protocol V1 --

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self._handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        peer_name = peer_address(writer.get_extra_info("peername"))
        remote = peer_name[1] if peer_name is not None else "?"
        peer: PeerInfo | None = None
        self.log("INFO", f"TCP: new client({remote})")
        try:
            magic = await reader.readexactly(4)
            self.log(
                "INFO", f"CLIENT({remote}): desired protocol magic '{magic.decode('latin-1')}'"
            )
            if magic != b"  V1":
                writer.write(_frame(b"E_BAD_PROTOCOL"))
                return
            while True:
                line = await reader.readuntil(b"\n")
                params = line.decode("utf-8", "surrogateescape").strip().split(" ")
                try:
                    reply, peer = await self._exec(params, reader, remote, peer)
                except _LookupError as exc:
                    writer.write(_frame(exc.text.encode("utf-8", "surrogateescape")))
                    break
                writer.write(_frame(reply))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # server shutdown: end quietly (3.11 logs a cancelled stream handler as an error)
        finally:
            self._handlers.discard(asyncio.current_task())
            self._writers.discard(writer)
            self.log("INFO", f"PROTOCOL(V1): [{remote}] exiting ioloop")
            if peer is not None:
                for r in self.db.lookup_registrations(peer.id):
                    if self.db.remove_producer(r, peer.id)[0]:
                        self._db_log(peer, "UNREGISTER", r)
            writer.close()

    async def _exec(
        self,
        params: list[str],
        reader: asyncio.StreamReader,
        remote: str,
        peer: PeerInfo | None,
    ) -> tuple[bytes, PeerInfo | None]:
        cmd = params[0]
        if cmd == "PING":
            if peer is not None:
                now = self.now()
                self.log(
                    "INFO", f"CLIENT({peer.id}): pinged (last ping {now - peer.last_update:.3f}s)"
                )
                peer.last_update = now
            return b"OK", peer
        if cmd == "IDENTIFY":
            return await self._identify(reader, remote, peer)
        if cmd in ("REGISTER", "UNREGISTER"):
            if peer is None:
                raise _LookupError("E_INVALID client must IDENTIFY")
            topic, channel = _topic_channel(cmd, params[1:])
            if cmd == "REGISTER":
                self._register(peer, topic, channel)
            else:
                self._unregister(peer, topic, channel)
            return b"OK", peer
        raise _LookupError(f"E_INVALID invalid command {cmd}")

    async def _identify(
        self, reader: asyncio.StreamReader, remote: str, peer: PeerInfo | None
    ) -> tuple[bytes, PeerInfo]:
        if peer is not None:
            raise _LookupError("E_INVALID cannot IDENTIFY again")
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
        except asyncio.IncompleteReadError:
            raise _LookupError("E_BAD_BODY IDENTIFY failed to read body size") from None
        try:
            body = await reader.readexactly(max(size, 0))
        except asyncio.IncompleteReadError:
            raise _LookupError("E_BAD_BODY IDENTIFY failed to read body") from None
        try:
            info = json.loads(body)
            assert isinstance(info, dict)
            new = PeerInfo(
                id=remote,
                remote_address=remote,
                hostname=str(info.get("hostname") or ""),
                broadcast_address=str(info.get("broadcast_address") or ""),
                tcp_port=int(info.get("tcp_port") or 0),
                http_port=int(info.get("http_port") or 0),
                version=str(info.get("version") or ""),
            )
        except (ValueError, AssertionError, TypeError):
            raise _LookupError("E_BAD_BODY IDENTIFY failed to decode JSON body") from None
        if not (new.broadcast_address and new.tcp_port and new.http_port and new.version):
            raise _LookupError("E_BAD_BODY IDENTIFY missing fields")
        self.log(
            "INFO",
            f"CLIENT({remote}): IDENTIFY Address:{new.broadcast_address} "
            f"TCP:{new.tcp_port} HTTP:{new.http_port} Version:{new.version}",
        )
        if self.db.add_producer(("client", "", ""), new):
            self._db_log(new, "REGISTER", ("client", "", ""))
        reply = json.dumps(
            {
                "broadcast_address": self.broadcast_address,
                "hostname": socket.gethostname(),
                "http_port": self.http_port,
                "tcp_port": self.tcp_port,
                "version": self.version,
            },
            separators=(",", ":"),
        ).encode()
        return reply, new

    def _db_log(self, peer: PeerInfo, verb: str, key: tuple[str, str, str]) -> None:
        category, name, sub = key
        self.log(
            "INFO", f"DB: client({peer.id}) {verb} category:{category} key:{name} subkey:{sub}"
        )

    def _register(self, peer: PeerInfo, topic: str, channel: str) -> None:
        keys = [("channel", topic, channel)] if channel else []
        for key in (*keys, ("topic", topic, "")):
            if self.db.add_producer(key, peer):
                self._db_log(peer, "REGISTER", key)

    def _unregister(self, peer: PeerInfo, topic: str, channel: str) -> None:
        if channel:
            key = ("channel", topic, channel)
            removed, left = self.db.remove_producer(key, peer.id)
            if removed:
                self._db_log(peer, "UNREGISTER", key)
            if left == 0 and channel.endswith("#ephemeral"):
                self.db.remove_registration(key)
            return
        for r in self.db.find_registrations("channel", topic, "*"):
            self.db.remove_producer(r, peer.id)
        key = ("topic", topic, "")
        removed, left = self.db.remove_producer(key, peer.id)
        if removed:
            self._db_log(peer, "UNREGISTER", key)
        if left == 0 and topic.endswith("#ephemeral"):
            self.db.remove_registration(key)


def _topic_channel(cmd: str, params: list[str]) -> tuple[str, str]:
    if not params:
        raise _LookupError(f"E_INVALID {cmd} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else ""
    if not is_valid_name(topic.encode("utf-8", "surrogateescape")):
        raise _LookupError(f"E_BAD_TOPIC {cmd} topic name '{topic}' is not valid")
    if channel and not is_valid_name(channel.encode("utf-8", "surrogateescape")):
        raise _LookupError(f"E_BAD_CHANNEL {cmd} channel name '{channel}' is not valid")
    return topic, channel


def _frame(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def _join(host: str, port: int) -> str:
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
