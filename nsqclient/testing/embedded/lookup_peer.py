"""nsqd's side of nsqlookupd: register topics and channels, ping, and ask for channels.

Copies ``nsqd/lookup.go`` and ``lookup_peer.go``: connect lazily (at start, then again on the next
command after a failure), send ``"  V1"`` and IDENTIFY, then ``REGISTER`` every topic without
channels and every topic/channel pair; afterwards REGISTER/UNREGISTER as they come and go, and
``PING`` every 15 s (configurable here). Every command waits for its size-prefixed reply.
A peer sees its nsqd through :class:`PeerNsqd` (a protocol: nsqd makes the peers).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from .options import split_address

if TYPE_CHECKING:
    from .options import NsqdOptions
    from .topic import Broker

__all__ = ["LookupPeer", "PeerNsqd", "lookupd_channels"]

_TIMEOUT = 1.0  # nsqd's dial, read and write deadline for lookupd


def register(topic: str, channel: str | None, *, on: bool) -> bytes:
    words = [b"REGISTER" if on else b"UNREGISTER", topic.encode()]
    if channel:
        words.append(channel.encode())
    return b" ".join(words) + b"\n"


class PeerNsqd(Protocol):
    """What a lookupd peer uses of its nsqd (:class:`~.nsqd.EmbeddedNsqd`): what it tells
    lookupd in IDENTIFY, the topics and channels it registers, the body limit, the log."""

    options: NsqdOptions
    version: str

    @property
    def broadcast_address(self) -> str: ...

    @property
    def broadcast_tcp_port(self) -> int: ...

    @property
    def broadcast_http_port(self) -> int: ...

    @property
    def broker(self) -> Broker: ...

    def log(self, level: str, text: str) -> None: ...


class LookupPeer:
    """One lookupd connection, driven by a queue of commands on its own task."""

    def __init__(self, nsqd: PeerNsqd, address: str) -> None:
        self.nsqd = nsqd
        self.address = address
        self.info: dict[str, Any] = {}
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def http_address(self) -> str | None:
        host = self.info.get("broadcast_address")
        port = self.info.get("http_port")
        if not host or not port:
            return None
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def command(self, cmd: bytes) -> None:
        self._queue.put_nowait(cmd)

    async def stop(self) -> None:
        self._queue.put_nowait(None)
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 2.0)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
        self._close()

    def abort(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._writer is not None:
            self._writer.transport.abort()
        self._reader = self._writer = None

    async def _run(self) -> None:
        await self._send(None)  # connect and register at once, like nsqd's Command(nil)
        while (cmd := await self._queue.get()) is not None:
            await self._send(cmd)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def _send(self, cmd: bytes | None) -> None:
        if self._writer is None:
            self.nsqd.log("INFO", f"LOOKUP connecting to {self.address}")
            try:
                host, port = split_address(self.address)
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), _TIMEOUT
                )
                writer.write(b"  V1")
                self._reader, self._writer = reader, writer
            except (TimeoutError, OSError) as exc:
                self._close()
                self.nsqd.log("ERROR", f"LOOKUPD({self.address}): {cmd!r} - {exc}")
                return
            if not await self._on_connect():
                self._close()
                return
        if cmd is None:
            return
        try:
            await self._roundtrip(cmd)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            self.nsqd.log("ERROR", f"LOOKUPD({self.address}): {cmd!r} - {exc}")
            self._close()

    async def _roundtrip(self, cmd: bytes) -> bytes:
        assert self._reader is not None and self._writer is not None
        self._writer.write(cmd)
        await asyncio.wait_for(self._writer.drain(), _TIMEOUT)
        head = await asyncio.wait_for(self._reader.readexactly(4), _TIMEOUT)
        (size,) = struct.unpack(">i", head)
        if size > self.nsqd.options.max_body_size or size < 0:
            raise ValueError(f"response body size ({size}) is greater than limit")
        return await asyncio.wait_for(self._reader.readexactly(size), _TIMEOUT)

    async def _on_connect(self) -> bool:
        nsqd = self.nsqd
        body = json.dumps(
            {
                "broadcast_address": nsqd.broadcast_address,
                "hostname": socket.gethostname(),
                "http_port": nsqd.broadcast_http_port,
                "tcp_port": nsqd.broadcast_tcp_port,
                "version": nsqd.version,
            },
            separators=(",", ":"),
        ).encode()
        try:
            reply = await self._roundtrip(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
            if reply == b"E_INVALID":
                return False
            self.info = json.loads(reply)
            info = self.info if isinstance(self.info, dict) else {}
            shown = " ".join(
                f"{name}:{info.get(key, '')}"
                for name, key in (
                    ("TCPPort", "tcp_port"),
                    ("HTTPPort", "http_port"),
                    ("Version", "version"),
                    ("BroadcastAddress", "broadcast_address"),
                )
            )
            self.nsqd.log("INFO", f"LOOKUPD({self.address}): peer info {{{shown}}}")
            commands = []
            for topic in list(nsqd.broker.topics.values()):
                if not topic.channels:
                    commands.append(register(topic.name, None, on=True))
                commands.extend(register(topic.name, c, on=True) for c in topic.channels)
            for cmd in commands:
                await self._roundtrip(cmd)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            self.nsqd.log("ERROR", f"LOOKUPD({self.address}): connect - {exc}")
            return False
        return True


async def lookupd_channels(addresses: list[str], topic: str) -> list[str]:
    """The union of ``/channels?topic=`` over lookupds; raises if every one failed."""
    timeout = httpx.Timeout(5.0, connect=2.0)
    names: list[str] = []
    failures = 0
    async with httpx.AsyncClient(timeout=timeout) as client:
        for address in addresses:
            try:
                response = await client.get(
                    f"http://{address}/channels",
                    params={"topic": topic},
                    headers={"Accept": "application/vnd.nsq; version=1.0"},
                )
                response.raise_for_status()
                found = response.json().get("channels") or []
            except (httpx.HTTPError, ValueError, AttributeError):
                failures += 1
                continue
            names.extend(n for n in found if isinstance(n, str) and n not in names)
    if addresses and failures == len(addresses):
        raise OSError(f"failed to query any nsqlookupd for channels of {topic}")
    return names
