"""Differential: nsqd's HTTP API. A sequence of requests goes to real nsqd and to the embedded
one; status, the headers clients look at, and the body (JSON with volatile values masked) must
be equal. Steps build on each other (create, publish, stats, pause, empty, delete)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from nsqclient.testing.daemons import NsqdProcess
from nsqclient.testing.embedded import ThreadedEmbeddedNsqd
from tests.rawconn_support import RawClient

from .conftest import start_embedded, start_real

pytestmark = pytest.mark.timeout(60)

OPTIONS = {"max_msg_size": 100, "max_body_size": 300, "max_req_timeout": 10_000}
VOLATILE = {
    "start_time",
    "connect_ts",
    "remote_address",
    "http_port",
    "tcp_port",
    "https_port",
    "memory",
    "hostname",
}
HEADERS = ("content-type", "x-nsq-content-type", "allow", "location")


def binary(*bodies: bytes, count: int | None = None) -> bytes:
    n = len(bodies) if count is None else count
    return struct.pack(">I", n) + b"".join(struct.pack(">I", len(b)) + b for b in bodies)


# (method, path, query, body, extra headers)
Step = tuple[str, str, dict[str, str] | str | None, bytes | None, dict[str, str] | None]

STEPS: list[Step] = [
    ("GET", "/ping", None, None, None),
    ("GET", "/info", None, None, None),
    ("HEAD", "/ping", None, None, None),
    ("GET", "/nope", None, None, None),
    ("GET", "/pub", None, None, None),
    ("OPTIONS", "/pub", None, None, None),
    ("DELETE", "/stats", None, None, None),
    ("GET", "/ping/", None, None, None),
    ("GET", "/PING", None, None, None),
    ("POST", "/topic/create/", "topic=x", None, None),
    ("GET", "/put", None, None, None),
    ("POST", "/create_topic", "topic=x", None, None),
    # /pub
    ("POST", "/pub", {"topic": "h_pub"}, b"hello", None),
    ("POST", "/pub", {"topic": "h_pub"}, b"", None),
    ("POST", "/pub", None, b"x", None),
    ("POST", "/pub", {"topic": "bad!"}, b"x", None),
    ("POST", "/pub", {"topic": "h_pub"}, b"x" * 101, None),
    ("POST", "/pub", {"topic": "h_pub"}, b"x" * 100, None),
    ("POST", "/pub", {"topic": "h_pub", "defer": "9000"}, b"later", None),
    ("POST", "/pub", {"topic": "h_pub", "defer": "x"}, b"later", None),
    ("POST", "/pub", {"topic": "h_pub", "defer": "-1"}, b"later", None),
    ("POST", "/pub", {"topic": "h_pub", "defer": "10001"}, b"later", None),
    ("POST", "/pub", {"topic": "h_pub", "defer": "10000"}, b"later", None),
    ("POST", "/pub", "topic=h_pub&topic=other", b"first wins", None),
    ("POST", "/pub", "topic=h%zz", b"x", None),
    ("POST", "/pub", "topic=h_pub;x=1", b"x", None),
    ("POST", "/pub", "topic=h%5Fpub2", b"escaped", None),
    ("POST", "/pub", {"topic": "h_defer_topic", "defer": "x"}, b"x", None),
    ("GET", "/stats", {"format": "json", "topic": "h_defer_topic"}, None, None),
    # /mpub
    ("POST", "/mpub", {"topic": "h_mpub"}, b"one\ntwo\n\nthree", None),
    ("POST", "/mpub", {"topic": "h_mpub"}, b"", None),
    ("POST", "/mpub", {"topic": "h_mpub"}, b"a\r\nb\n", None),
    ("POST", "/mpub", {"topic": "h_mpub"}, b"ok\n" + b"y" * 101 + b"\n", None),
    ("POST", "/mpub", {"topic": "h_mpub"}, b"z" * 301, None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "true"}, binary(b"b1", b"b2"), None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "1"}, binary(b"b1", count=0), None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "1"}, binary(b"b1", count=2), None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "1"}, binary(b"b1", b""), None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "1"}, binary(b"x" * 101), None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "1"}, b"\x00\x00", None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "maybe"}, binary(b"b3"), None),
    ("POST", "/mpub", {"topic": "h_mpub", "binary": "false"}, b"t1\nt2", None),
    ("POST", "/mpub", {"topic": "bad topic"}, b"x", None),
    ("POST", "/mpub", None, b"x", None),
    # topics and channels
    ("POST", "/topic/create", {"topic": "h_t"}, None, None),
    ("POST", "/topic/create", {"topic": "h_t"}, None, None),
    ("POST", "/topic/create", None, None, None),
    ("POST", "/topic/create", {"topic": "!"}, None, None),
    ("POST", "/channel/create", {"topic": "h_t", "channel": "c1"}, None, None),
    ("POST", "/channel/create", {"topic": "h_t", "channel": "c2#ephemeral"}, None, None),
    ("POST", "/channel/create", {"topic": "h_nope", "channel": "c"}, None, None),
    ("POST", "/channel/create", {"topic": "h_t"}, None, None),
    ("POST", "/channel/create", {"channel": "c"}, None, None),
    ("POST", "/channel/create", {"topic": "h_t", "channel": "!"}, None, None),
    ("POST", "/channel/create", {"topic": "!", "channel": "c"}, None, None),
    ("POST", "/pub", {"topic": "h_t"}, b"m1", None),
    ("POST", "/topic/pause", {"topic": "h_t"}, None, None),
    ("POST", "/pub", {"topic": "h_t"}, b"m2", None),
    ("GET", "/stats", {"format": "json", "topic": "h_t"}, None, None),
    ("POST", "/topic/unpause", {"topic": "h_t"}, None, None),
    ("POST", "/topic/pause", {"topic": "h_nope"}, None, None),
    ("POST", "/topic/pause", None, None, None),
    ("POST", "/channel/pause", {"topic": "h_t", "channel": "c1"}, None, None),
    ("POST", "/channel/pause", {"topic": "h_t", "channel": "c9"}, None, None),
    ("GET", "/stats", {"format": "json", "topic": "h_t", "channel": "c1"}, None, None),
    ("POST", "/channel/unpause", {"topic": "h_t", "channel": "c1"}, None, None),
    ("POST", "/channel/empty", {"topic": "h_t", "channel": "c1"}, None, None),
    ("POST", "/channel/empty", {"topic": "h_t", "channel": "c9"}, None, None),
    ("POST", "/topic/empty", {"topic": "h_t"}, None, None),
    ("POST", "/topic/empty", {"topic": "!"}, None, None),
    ("POST", "/topic/empty", {"topic": "h_nope"}, None, None),
    ("GET", "/stats", {"format": "json", "topic": "h_t"}, None, None),
    ("POST", "/channel/delete", {"topic": "h_t", "channel": "c1"}, None, None),
    ("POST", "/channel/delete", {"topic": "h_t", "channel": "c1"}, None, None),
    ("POST", "/topic/delete", {"topic": "h_t"}, None, None),
    ("POST", "/topic/delete", {"topic": "h_t"}, None, None),
    ("POST", "/topic/delete", {"topic": "not valid!"}, None, None),
    ("POST", "/topic/delete", None, None, None),
    # stats
    ("GET", "/stats", {"format": "json", "topic": "h_missing"}, None, None),
    ("GET", "/stats", {"format": "json", "topic": "h_pub", "channel": "nope"}, None, None),
    ("GET", "/stats", {"format": "json", "include_clients": "false"}, None, None),
    ("GET", "/stats", {"format": "json", "include_mem": "0", "topic": "h_mpub"}, None, None),
    ("GET", "/stats", {"format": "json", "include_mem": "maybe", "topic": "h_mpub"}, None, None),
    ("GET", "/stats", "format=json&topic=%zz", None, None),
    # config
    ("GET", "/config/msg_timeout", None, None, None),
    ("GET", "/config/max_msg_size", None, None, None),
    ("GET", "/config/nsqlookupd_tcp_addresses", None, None, None),
    ("GET", "/config/log_level", None, None, None),
    ("GET", "/config/snappy", None, None, None),
    ("GET", "/config/tls_cert", None, None, None),
    ("GET", "/config/tls_required", None, None, None),
    ("GET", "/config/max_req_timeout", None, None, None),
    ("GET", "/config/nope", None, None, None),
    ("PUT", "/config/log_level", None, b"warn", None),
    ("GET", "/config/log_level", None, None, None),
    ("PUT", "/config/log_level", None, b"loud", None),
    ("PUT", "/config/log_level", None, b"", None),
    ("PUT", "/config/log_level", None, b"info", None),
    ("PUT", "/config/msg_timeout", None, b"5", None),
    ("PUT", "/config/nsqlookupd_tcp_addresses", None, b"nope", None),
    ("PUT", "/config/nsqlookupd_tcp_addresses", None, b"[]", None),
    ("POST", "/pub", {"topic": "h_chunked"}, None, {"transfer-encoding": "chunked"}),
]


def mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<masked>" if k in VOLATILE else mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def normalize(response: httpx.Response) -> tuple[Any, ...]:
    headers = {h: response.headers.get(h) for h in HEADERS}
    body: Any = response.content
    if response.headers.get("content-type", "").startswith("application/json") and body:
        body = mask(response.json())
    return response.status_code, headers, body


async def run(server: Any) -> list[tuple[Any, ...]]:
    results = []
    async with httpx.AsyncClient(base_url=f"http://{server.http_address}", timeout=10) as client:
        for method, path, query, body, headers in STEPS:
            content: Any = body
            if headers and headers.get("transfer-encoding") == "chunked":

                async def chunks() -> Any:
                    yield b"chunk one "
                    yield b"chunk two"

                content = chunks()
            url = path + ("?" + query if isinstance(query, str) else "")
            params = query if isinstance(query, dict) else None
            response = await client.request(method, url, params=params, content=content)
            results.append((method, path, query, *normalize(response)))
    return results


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[NsqdProcess, ThreadedEmbeddedNsqd]]:
    real = start_real(**OPTIONS)
    embedded = start_embedded(**OPTIONS)
    yield real, embedded
    real.stop()
    embedded.stop()


async def test_http_api_matches(pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd]) -> None:
    real, embedded = pair
    # a TCP publisher and a subscriber so that /stats has clients and producers to show
    clients = []
    try:
        for server in (real, embedded):
            sub = await RawClient.connect(server.tcp_address)
            clients.append(sub)
            await sub.setup(
                client_id="sub", hostname="h", user_agent="ua", heartbeat_interval=60_000
            )
            await sub.sub("h_pub", "c", 0)
            await sub.pub("h_pub", b"tcp")
        # deferred messages are never due during the run: nsqd scans a new channel's deferred
        # queue only after up to 5 s, the embedded one is on time
        expected = await run(real)
        got = await run(embedded)
        for want, have in zip(expected, got, strict=True):
            assert have == want
    finally:
        for client in clients:
            await client.close()


async def test_keep_alive_serves_many_requests_on_one_connection(
    pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd],
) -> None:
    _, embedded = pair
    limits = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(base_url=f"http://{embedded.http_address}", limits=limits) as c:
        for i in range(50):
            response = await c.post("/pub", params={"topic": "h_keepalive"}, content=b"%d" % i)
            assert response.status_code == 200 and response.text == "OK"
    stats = embedded.stats("h_keepalive")
    assert stats["topics"][0]["message_count"] == 50


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(b"  V2IDENTIFY\n" + struct.pack(">i", 2) + b"{}", id="tcp-handshake"),
        pytest.param(b"  V2PUB t\n", id="tcp-command"),
        pytest.param(b"GET\r\n\r\n", id="short-request-line"),
    ],
)
def test_tcp_protocol_on_the_http_port_gets_400_and_a_close(
    pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd], wrong: bytes
) -> None:
    """A client pointed at the HTTP port by mistake hears at once (as from Go's net/http),
    rather than waiting for its own timeout."""
    answers = []
    for server in pair:
        host, _, port = server.http_address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(wrong)
            data = b""
            while chunk := sock.recv(4096):  # until the server closes (the timeout fails it)
                data += chunk
        answers.append(data)
    real, embedded = answers
    assert real.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert embedded == real
