"""Helpers for the asyncio-core tests against real nsqd: deadlines, freezing nsqd, /stats, raw
consumers.

Every wait is a condition polled until a deadline (``wait_for``), never a bare sleep. A frozen
nsqd (``nsqd.freeze()``: SIGSTOP, or the embedded server's parked loop thread) is the honest way
to make a daemon go silent: the kernel keeps accepting its TCP traffic, but nothing is read,
answered or heartbeated until ``thaw()``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from nsqclient.aio import Reader
from nsqclient.aio.connection import Connection
from nsqclient.config import Config
from nsqclient.errors import ResponseFailedError
from nsqclient.http import NsqdHTTPClient
from nsqclient.message import Message
from nsqclient.protocol.identify import IdentifyOptions
from nsqclient.testing.daemons import NsqdProcess
from tests.support import frozen as frozen
from tests.support import unique as unique
from tests.support import wait_for as wait_for  # for tests/aio/test_writer*, test_publish*

DEADLINE = 15.0  # seconds any condition may take before the test fails


class Stats:
    """``/stats`` of several nsqd through the library's async HTTP client."""

    def __init__(self) -> None:
        self._clients: dict[str, NsqdHTTPClient] = {}

    def http(self, nsqd: NsqdProcess) -> NsqdHTTPClient:
        """The (cached) async HTTP client of ``nsqd``."""
        client = self._clients.get(nsqd.http_address)
        if client is None:
            client = self._clients[nsqd.http_address] = NsqdHTTPClient(nsqd.http_address)
        return client

    async def raw(self, nsqd: NsqdProcess, topic: str | None = None) -> dict[str, Any]:
        return await self.http(nsqd).stats(topic=topic)

    async def topic(self, nsqd: NsqdProcess, topic: str) -> dict[str, Any] | None:
        """The topic's entry, or None if nsqd does not have it."""
        stats = await self.raw(nsqd, topic)
        for entry in stats["topics"]:
            if entry["topic_name"] == topic:
                return dict(entry)
        return None

    async def message_count(self, nsqd: NsqdProcess, topic: str) -> int:
        entry = await self.topic(nsqd, topic)
        return 0 if entry is None else int(entry["message_count"])

    async def channel(self, nsqd: NsqdProcess, topic: str, channel: str) -> dict[str, Any]:
        entry = await self.topic(nsqd, topic)
        assert entry is not None, f"topic {topic} missing on {nsqd!r}"
        for chan in entry["channels"]:
            if chan["channel_name"] == channel:
                return dict(chan)
        raise AssertionError(f"channel {channel} missing on {nsqd!r}")

    async def clients(self, nsqd: NsqdProcess) -> list[dict[str, Any]]:
        """Every TCP client nsqd knows: producers and channel subscribers."""
        stats = await self.raw(nsqd)
        found = list(stats.get("producers") or [])
        for topic in stats["topics"]:
            for chan in topic["channels"]:
                found.extend(chan.get("clients") or [])
        return found

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()


@pytest.fixture
async def stats() -> AsyncIterator[Stats]:
    s = Stats()
    try:
        yield s
    finally:
        await s.aclose()


class Collector:
    """A ConnectionOwner that keeps what it hears (messages are FINed unless ``auto_fin=False``)."""

    _watch_fin = True  # hear about every FIN too

    def __init__(self, *, auto_fin: bool = True) -> None:
        self.auto_fin = auto_fin
        self.messages: list[Message] = []
        self.response_errors: list[ResponseFailedError] = []
        self.lost: list[BaseException | None] = []

    def _on_messages(self, conn: Connection, messages: list[Message]) -> None:
        self.messages.extend(messages)
        if self.auto_fin:
            for msg in messages:
                msg.fin()

    def _on_message_result(self, conn: Connection, msg: Message, fin: bool, backoff: bool) -> None:
        pass

    def _on_response_error(self, conn: Connection, error: ResponseFailedError) -> None:
        self.response_errors.append(error)

    def _on_connection_lost(self, conn: Connection, exc: BaseException | None) -> None:
        self.lost.append(exc)

    def _on_fatal_error(self, conn: Connection, error: Any, unexecuted: list[Any]) -> bool:
        return False


def make_connection(
    nsqd: NsqdProcess | None,
    owner: Collector | None = None,
    *,
    address: tuple[str, int] | None = None,
    **options: Any,
) -> Connection:
    """An unconnected Connection to ``nsqd`` built the way Reader and Writer build theirs."""
    from nsqclient.aio.tls import make_ssl_context

    config = Config.from_options(**options)
    if address is None:
        assert nsqd is not None
        address = ("127.0.0.1", nsqd.tcp_port)
    host, port = address
    return Connection(
        host,
        port,
        config=config,
        identify=IdentifyOptions.from_config(config),
        owner=owner,
        ssl_context=make_ssl_context(config),
    )


@contextlib.asynccontextmanager
async def connected(
    nsqd: NsqdProcess, owner: Collector | None = None, **options: Any
) -> AsyncIterator[Connection]:
    conn = make_connection(nsqd, owner, **options)
    await conn.connect()
    try:
        yield conn
    finally:
        conn.close()
        try:
            await asyncio.wait_for(conn.wait_closed(), 5.0)
        except TimeoutError:
            conn.abort()
            await asyncio.wait_for(conn.wait_closed(), DEADLINE)


async def consume(
    nsqd: NsqdProcess, topic: str, channel: str, count: int, **options: Any
) -> list[Message]:
    """Read (and FIN) ``count`` messages from one nsqd with a raw subscribed Connection."""
    owner = Collector()
    async with connected(nsqd, owner, **options) as conn:
        await conn.subscribe(topic, channel)
        conn.send_rdy(min(count, conn.max_rdy_count) or 1)
        await wait_for(lambda: len(owner.messages) >= count, what=f"{count} messages")
        assert not owner.lost
    return owner.messages


# -- Reader tests (tests/aio/test_reader_*.py; their other helpers are in reader_support.py) --


@pytest.fixture
async def make_reader() -> AsyncIterator[Callable[..., Reader]]:
    """``make_reader(topic, channel, **options)`` builds a Reader that is closed at teardown,
    even when the test failed half-way (no socket or task outlives the test)."""
    made: list[Reader] = []

    def make(*args: Any, **kwargs: Any) -> Reader:
        reader = Reader(*args, **kwargs)
        made.append(reader)
        return reader

    try:
        yield make
    finally:
        for reader in made:
            await reader.close()
