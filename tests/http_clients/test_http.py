"""The HTTP helpers against real nsqd and nsqlookupd processes, in both flavours.

Each test that takes ``flavour`` runs once with the async client and once with the blocking one,
through :class:`Either`, so the two cannot drift apart. Every effect is checked where nsqd shows
it (``/stats``, lookupd's registry, or a raw TCP consumer), with deadline loops for what nsqd
does asynchronously (copying to channels, registering with lookupd).
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from nsqclient.errors import (
    ConnectError,
    HTTPConnectError,
    HTTPError,
    HTTPTimeoutError,
    InvalidArgumentError,
    InvalidInputError,
    MessageTooLargeError,
)
from nsqclient.http import (
    LookupdHTTPClient,
    LookupResult,
    NsqdHTTPClient,
    Producer,
    SyncLookupdHTTPClient,
    SyncNsqdHTTPClient,
)
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import free_port
from tests.support import unique, wait_for

pytestmark = pytest.mark.timeout(60)

DEADLINE = 10.0  # seconds to wait for nsqd's asynchronous work


class Either:
    """Awaitable view of either flavour: ``await view.pub(...)`` works for both."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return call

    async def close(self) -> None:
        if isinstance(self.client, NsqdHTTPClient | LookupdHTTPClient):
            await self.client.aclose()
        else:
            self.client.close()


def open_nsqd(flavour: str, address: str, **kwargs: Any) -> Either:
    cls = NsqdHTTPClient if flavour == "async" else SyncNsqdHTTPClient
    return Either(cls(address, **kwargs))


def open_lookupd(flavour: str, address: str, **kwargs: Any) -> Either:
    cls = LookupdHTTPClient if flavour == "async" else SyncLookupdHTTPClient
    return Either(cls(address, **kwargs))


@pytest.fixture(params=["async", "sync"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def http(flavour: str, nsqd: Any) -> AsyncIterator[Either]:
    client = open_nsqd(flavour, nsqd.http_address)
    yield client
    await client.close()


def find_topic(stats: dict[str, Any], topic: str) -> dict[str, Any] | None:
    return next((t for t in stats["topics"] if t["topic_name"] == topic), None)


def find_channel(stats: dict[str, Any], topic: str, channel: str) -> dict[str, Any] | None:
    found = find_topic(stats, topic)
    if found is None:
        return None
    return next((c for c in found["channels"] if c["channel_name"] == channel), None)


async def channel_stats(http: Either, topic: str, channel: str) -> dict[str, Any] | None:
    return find_channel(await http.stats(topic=topic), topic, channel)


# -- a raw TCP consumer, independent of the client library ---------------------------------------


async def subscribe(
    tcp_address: str, topic: str, channel: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = tcp_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"  V2" + f"SUB {topic} {channel}\n".encode())
    frame_type, data = await read_frame(reader)
    assert (frame_type, data) == (0, b"OK"), data
    return reader, writer


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    async with asyncio.timeout(DEADLINE):
        (size,) = struct.unpack(">I", await reader.readexactly(4))
        frame = await reader.readexactly(size)
    return struct.unpack(">I", frame[:4])[0], frame[4:]


async def consume(tcp_address: str, topic: str, channel: str, count: int) -> list[bytes]:
    """Receive and FIN ``count`` messages from a channel."""
    reader, writer = await subscribe(tcp_address, topic, channel)
    writer.write(b"RDY %d\n" % count)
    bodies: list[bytes] = []
    try:
        while len(bodies) < count:
            frame_type, data = await read_frame(reader)
            if frame_type == 2:  # message: ts(8) attempts(2) id(16) body
                bodies.append(data[26:])
                writer.write(b"FIN " + data[10:26] + b"\n")
            elif frame_type == 1:
                raise AssertionError(f"nsqd error frame: {data!r}")
            elif data == b"_heartbeat_":
                writer.write(b"NOP\n")
    finally:
        writer.close()
        await writer.wait_closed()
    return bodies


# == nsqd ========================================================================================


async def test_ping_and_info(http: Either, nsqd: Any) -> None:
    assert await http.ping() is None
    info = await http.info()
    assert info["tcp_port"] == int(nsqd.tcp_address.rsplit(":", 1)[1])
    assert info["http_port"] == int(nsqd.http_address.rsplit(":", 1)[1])
    assert isinstance(info["version"], str)


async def test_stats_filters_and_client_lists(http: Either, nsqd: Any) -> None:
    topic, other, channel = unique(), unique(), unique("c")
    await http.create_topic(topic)
    await http.create_topic(other)
    await http.create_channel(topic, channel)
    _, writer = await subscribe(nsqd.tcp_address, topic, channel)
    try:
        everything = await http.stats()
        assert find_topic(everything, topic) and find_topic(everything, other)
        assert "memory" in everything

        only = await http.stats(topic=topic, include_mem=False)
        assert [t["topic_name"] for t in only["topics"]] == [topic]
        assert "memory" not in only
        assert (await http.stats(topic=unique()))["topics"] == []

        with_clients = await http.stats(topic=topic, channel=channel)
        found = find_channel(with_clients, topic, channel)
        assert found is not None and len(found["clients"]) == found["client_count"] == 1

        # nsqd sends "clients": null and "producers": null here; we hand back empty lists
        without = await http.stats(topic=topic, channel=channel, include_clients=False)
        found = find_channel(without, topic, channel)
        assert found is not None and found["clients"] == [] and found["client_count"] == 1
        assert without["producers"] == []
    finally:
        writer.close()
        await writer.wait_closed()


async def test_pub_and_deferred_pub(http: Either, nsqd: Any) -> None:
    topic, channel = unique(), unique("c")
    await http.create_topic(topic)
    await http.create_channel(topic, channel)

    await http.pub(topic, b"now")
    await http.pub(topic, "later", defer_ms=600_000)
    found = await wait_for(
        lambda: channel_stats(http, topic, channel),
        until=lambda c: c is not None and c["depth"] == 1 and c["deferred_count"] == 1,
    )
    assert found["message_count"] == 2
    assert await consume(nsqd.tcp_address, topic, channel, 1) == [b"now"]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
async def test_mpub_round_trip(http: Either, nsqd: Any, binary: bool) -> None:
    topic, channel = unique(), unique("c")
    await http.create_topic(topic)
    await http.create_channel(topic, channel)
    bodies: list[Any] = [b"one", "tw\u00f6", bytearray(b"three\r"), memoryview(b"\x00four")]
    if binary:
        bodies.append(b"line\nbreak")  # binary framing carries newlines
    await http.mpub(topic, bodies)
    expected = sorted(b.encode() if isinstance(b, str) else bytes(b) for b in bodies)
    received = await consume(nsqd.tcp_address, topic, channel, len(bodies))
    assert sorted(received) == expected


SINGLE_BODIES = ["abc", b"abc", bytearray(b"abc"), memoryview(b"abc")]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
@pytest.mark.parametrize("single", SINGLE_BODIES, ids=lambda b: type(b).__name__)
async def test_mpub_refuses_a_single_body_before_sending(
    http: Either, nsqd: Any, binary: bool, single: Any
) -> None:
    """A bare str or bytes is one body, not a batch (it used to be split per character)."""
    topic = unique()
    await http.create_topic(topic)
    with pytest.raises(InvalidInputError, match="wrap it in a list") as info:
        await http.mpub(topic, single, binary=binary)
    assert info.value.sent is False
    await http.mpub(topic, [b"one"], binary=binary, timeout=5)  # the list form, a call timeout
    stats = await http.stats(topic=topic)
    assert stats["topics"][0]["message_count"] == 1  # the refused call stored nothing


@pytest.mark.parametrize("timeout", [-1, -0.001, float("nan"), "1"])
async def test_negative_or_bad_call_timeout_is_refused(http: Either, timeout: Any) -> None:
    topic = unique()
    await http.create_topic(topic)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await http.pub(topic, b"x", timeout=timeout)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await http.mpub(topic, [b"x"], timeout=timeout)
    stats = await http.stats(topic=topic)
    assert stats["topics"][0]["message_count"] == 0


async def test_topic_admin_effects(http: Either) -> None:
    topic = unique()

    async def topic_stats() -> dict[str, Any] | None:
        return find_topic(await http.stats(topic=topic), topic)

    await http.create_topic(topic)
    created = await topic_stats()
    assert created is not None and created["paused"] is False

    await http.pause_topic(topic)
    assert (await topic_stats() or {}).get("paused") is True
    await http.unpause_topic(topic)
    assert (await topic_stats() or {}).get("paused") is False

    await http.mpub(topic, [b"a", b"b"])  # no channel yet: they wait at the topic
    await wait_for(topic_stats, until=lambda t: t is not None and t["depth"] == 2)
    await http.empty_topic(topic)
    await wait_for(topic_stats, until=lambda t: t is not None and t["depth"] == 0)

    await http.delete_topic(topic)
    assert await topic_stats() is None
    with pytest.raises(HTTPError) as info:
        await http.delete_topic(topic)
    assert (info.value.status_code, info.value.message) == (404, "TOPIC_NOT_FOUND")


async def test_channel_admin_effects(http: Either) -> None:
    topic, channel = unique(), unique("c")
    await http.create_topic(topic)
    await http.create_channel(topic, channel)
    assert await channel_stats(http, topic, channel) is not None

    await http.pause_channel(topic, channel)
    assert (await channel_stats(http, topic, channel) or {}).get("paused") is True
    await http.unpause_channel(topic, channel)
    assert (await channel_stats(http, topic, channel) or {}).get("paused") is False

    await http.mpub(topic, [b"1", b"2", b"3"])
    await wait_for(
        lambda: channel_stats(http, topic, channel), until=lambda c: c and c["depth"] == 3
    )
    await http.empty_channel(topic, channel)
    await wait_for(
        lambda: channel_stats(http, topic, channel), until=lambda c: c and c["depth"] == 0
    )

    await http.delete_channel(topic, channel)
    assert await channel_stats(http, topic, channel) is None
    with pytest.raises(HTTPError) as info:
        await http.delete_channel(topic, channel)
    assert (info.value.status_code, info.value.message) == (404, "CHANNEL_NOT_FOUND")


async def test_server_errors_are_typed(http: Either) -> None:
    missing = unique()
    cases: list[tuple[Callable[[], Awaitable[Any]], int, str]] = [
        (lambda: http.create_channel(missing, "c"), 404, "TOPIC_NOT_FOUND"),
        (lambda: http.empty_topic(missing), 404, "TOPIC_NOT_FOUND"),
        (lambda: http.pause_topic(missing), 404, "TOPIC_NOT_FOUND"),
        (lambda: http.config("no_such_option"), 400, "INVALID_OPTION"),
        (lambda: http.set_config("max_msg_size", "5"), 400, "INVALID_OPTION"),
        (lambda: http.set_config("log_level", "loudest"), 400, "INVALID_VALUE"),
    ]
    for call, status, message in cases:
        with pytest.raises(HTTPError) as info:
            await call()
        assert (info.value.status_code, info.value.message) == (status, message)
        assert info.value.url.startswith("http://127.0.0.1:")


async def test_config(http: Either) -> None:
    assert await http.config("max_msg_size") == 1_048_576
    assert await http.config("msg_timeout") == 60 * 10**9  # durations come in nanoseconds
    assert isinstance(await http.set_config("log_level", "info"), int)


async def test_nsqd_limits_beyond_ours_map_to_typed_errors(flavour: str, nsqd_factory: Any) -> None:
    """Our limits are larger than this nsqd's, so nsqd itself refuses, with typed errors."""
    small = nsqd_factory(
        extra_args=["--max-msg-size=100", "--max-body-size=1000", "--max-req-timeout=1s"]
    )
    http = open_nsqd(flavour, small.http_address)  # nsqd's default limits: larger
    topic = unique()
    try:
        cases: list[tuple[Callable[[], Awaitable[Any]], int, str, str]] = [
            (lambda: http.pub(topic, b"x" * 200), 413, "MSG_TOO_BIG", "--max-msg-size"),
            (lambda: http.mpub(topic, [b"x" * 200]), 413, "BAD_MESSAGE", "--max-msg-size"),
            (lambda: http.mpub(topic, [b"x" * 200], binary=False), 413, "MSG_TOO_BIG", ""),
            (lambda: http.mpub(topic, [b"x" * 90] * 20), 413, "BODY_TOO_BIG", "--max-body-size"),
            (lambda: http.pub(topic, b"x", defer_ms=5_000), 400, "INVALID_DEFER", "max_defer_ms"),
        ]
        for call, status, message, advice in cases:
            with pytest.raises(HTTPError) as info:
                await call()
            assert (info.value.status_code, info.value.message) == (status, message)
            assert advice in str(info.value)
        await http.pub(topic, b"x" * 100, defer_ms=1_000)  # at the limits: accepted
    finally:
        await http.close()

    matched = open_nsqd(flavour, small.http_address, max_msg_size=100)
    try:
        with pytest.raises(MessageTooLargeError):  # now refused locally, before sending
            await matched.pub(topic, b"x" * 200)
    finally:
        await matched.close()


async def test_set_lookupd_addresses_registers_nsqd(
    flavour: str, nsqd_factory: Any, nsqlookupd: Any
) -> None:
    lone = nsqd_factory()  # starts without a lookupd
    http = open_nsqd(flavour, lone.http_address)
    lookupd = open_lookupd(flavour, nsqlookupd.http_address)
    try:
        assert await http.config("nsqlookupd_tcp_addresses") == []
        assert await http.set_config("nsqlookupd_tcp_addresses", [nsqlookupd.tcp_address]) == [
            nsqlookupd.tcp_address
        ]
        await wait_for(
            lookupd.nodes, until=lambda nodes: lone.tcp_address in {n.tcp_address for n in nodes}
        )
    finally:
        await http.close()
        await lookupd.close()


async def test_unreachable_nsqd_is_a_connect_error(flavour: str) -> None:
    http = open_nsqd(flavour, f"127.0.0.1:{free_port()}")
    try:
        with pytest.raises(HTTPConnectError) as info:
            await http.pub("t", b"x")
    finally:
        await http.close()
    assert isinstance(info.value, ConnectError | ConnectionError)
    assert info.value.status_code is None and "/pub" in info.value.url


async def test_lookupds_tcp_port_given_as_its_http_address_is_named(
    flavour: str, nsqlookupd: Any
) -> None:
    """nsqlookupd's TCP port answers an HTTP GET with a non-HTTP reply: the error asks whether
    this is a TCP port and says a GET is safe to repeat (not 'may or may not have been
    applied')."""
    lookupd = open_lookupd(flavour, nsqlookupd.tcp_address)
    try:
        with pytest.raises(HTTPConnectError) as info:
            await lookupd.lookup("t")
    finally:
        await lookupd.close()
    text = str(info.value)
    assert "did not answer in HTTP" in text and "4160" in text and "4161" in text
    assert "safe to repeat" in text and "may or may not" not in text


async def test_silent_server_is_a_timeout(flavour: str) -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        http = open_nsqd(flavour, f"127.0.0.1:{listener.getsockname()[1]}", timeout=0.2)
        try:
            with pytest.raises(HTTPTimeoutError) as info:
                await http.ping()
        finally:
            await http.close()
    assert isinstance(info.value, TimeoutError)


async def test_https(flavour: str, nsqd_tls_required: Any, tls_certs: CertBundle) -> None:
    secure = nsqd_tls_required
    https = f"https://{secure.https_address}"
    for verify in (str(tls_certs.ca_cert), ssl.create_default_context(cafile=tls_certs.ca_cert)):
        http = open_nsqd(flavour, https, verify=verify)
        try:
            await http.ping()
        finally:
            await http.close()

    http = open_nsqd(flavour, https)  # system CAs do not know our test CA
    try:
        with pytest.raises(HTTPConnectError, match="verify="):
            await http.ping()
    finally:
        await http.close()

    http = open_nsqd(flavour, secure.http_address)  # plain HTTP is refused by --tls-required
    try:
        with pytest.raises(HTTPError) as info:
            await http.ping()
    finally:
        await http.close()
    assert (info.value.status_code, info.value.message) == (403, "TLS_REQUIRED")
    assert f"https_port={secure.https_address.rsplit(':', 1)[1]}" in str(info.value)


def test_sync_client_needs_no_event_loop(nsqd: Any) -> None:
    topic = unique()
    with SyncNsqdHTTPClient(nsqd.http_address) as http:
        http.pub(topic, b"hello")
        found = find_topic(http.stats(topic=topic), topic)
    assert found is not None and found["message_count"] == 1


# == nsqlookupd ==================================================================================


@pytest.fixture
async def lookupd(flavour: str, nsq_cluster: Any) -> AsyncIterator[Either]:
    client = open_lookupd(flavour, nsq_cluster.lookupd.http_address)
    yield client
    await client.close()


def producers_of(result: LookupResult) -> set[str]:
    return {p.tcp_address for p in result.producers}


async def test_lookupd_ping_and_info(lookupd: Either) -> None:
    assert await lookupd.ping() is None
    assert isinstance((await lookupd.info())["version"], str)


async def test_lookup_of_unknown_topic_is_empty(lookupd: Either) -> None:
    result = await lookupd.lookup(unique())
    assert result == LookupResult() and not result.producers and not result.channels


async def test_lookup_other_errors_raise(flavour: str, nsq_cluster: Any) -> None:
    wrong = open_lookupd(flavour, nsq_cluster.nsqds[0].http_address)  # nsqd has no /lookup
    try:
        with pytest.raises(HTTPError) as info:
            await wrong.lookup("t")
    finally:
        await wrong.close()
    assert (info.value.status_code, info.value.message) == (404, "NOT_FOUND")


async def test_lookup_lists_producer_after_pub(lookupd: Either, nsq_cluster: Any) -> None:
    nsqd = nsq_cluster.nsqds[0]
    topic, channel = unique(), unique("c")
    with SyncNsqdHTTPClient(nsqd.http_address) as http:
        http.pub(topic, b"x")
        result = await wait_for(
            lambda: lookupd.lookup(topic), until=lambda r: bool(producers_of(r))
        )
        assert producers_of(result) == {nsqd.tcp_address}
        (producer,) = result.producers
        assert producer.broadcast_address == "127.0.0.1"
        assert producer.http_address == nsqd.http_address
        assert producer.version and producer.remote_address and producer.hostname

        assert topic in await lookupd.topics()
        http.create_channel(topic, channel)
    assert await wait_for(lambda: lookupd.channels(topic), until=lambda c: channel in c)
    assert channel in (await lookupd.lookup(topic)).channels


async def test_nodes(lookupd: Either, nsq_cluster: Any) -> None:
    nodes = await lookupd.nodes()
    assert {n.tcp_address for n in nodes} >= set(nsq_cluster.nsqd_tcp_addresses)
    topic, nsqd = unique(), nsq_cluster.nsqds[1]
    with SyncNsqdHTTPClient(nsqd.http_address) as http:
        http.create_topic(topic)

    def has_topic(nodes: list[Any]) -> bool:
        return any(n.tcp_address == nsqd.tcp_address and topic in n.topics for n in nodes)

    nodes = await wait_for(lookupd.nodes, until=has_topic)
    assert not any(n.is_tombstoned(topic) for n in nodes)


async def test_lookupd_registry_admin(lookupd: Either) -> None:
    topic, channel = unique(), unique("c")
    assert await lookupd.channels(topic) == []  # unknown topic: empty, not an error

    await lookupd.create_topic(topic)
    assert topic in await lookupd.topics()
    assert await lookupd.lookup(topic) == LookupResult()  # known now, but nobody produces it

    await lookupd.create_channel(topic, channel)
    assert await lookupd.channels(topic) == [channel]
    await lookupd.delete_channel(topic, channel)
    assert await lookupd.channels(topic) == []
    with pytest.raises(HTTPError) as info:
        await lookupd.delete_channel(topic, channel)
    assert (info.value.status_code, info.value.message) == (404, "CHANNEL_NOT_FOUND")

    await lookupd.delete_topic(topic)
    assert topic not in await lookupd.topics()
    await lookupd.delete_topic(topic)  # lookupd deletes idempotently


@pytest.mark.parametrize("by", ["producer", "string"])
async def test_tombstone_hides_producer_from_lookup(
    lookupd: Either, nsq_cluster: Any, by: str
) -> None:
    topic = unique()
    first, second = nsq_cluster.nsqds[:2]
    for nsqd in (first, second):
        with SyncNsqdHTTPClient(nsqd.http_address) as http:
            http.create_topic(topic)
    wanted = {first.tcp_address, second.tcp_address}
    result = await wait_for(
        lambda: lookupd.lookup(topic), until=lambda r: producers_of(r) == wanted
    )

    producer = next(p for p in result.producers if p.tcp_address == first.tcp_address)
    node: Producer | str = producer if by == "producer" else first.http_address
    await lookupd.tombstone_topic_producer(topic, node)

    assert producers_of(await lookupd.lookup(topic)) == {second.tcp_address}
    nodes = {n.tcp_address: n for n in await lookupd.nodes()}
    assert nodes[first.tcp_address].is_tombstoned(topic)
    assert not nodes[second.tcp_address].is_tombstoned(topic)
