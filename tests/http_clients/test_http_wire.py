"""The HTTP helpers' own keep-alive publish path (``nsqclient.http._wire``).

The response parser is pure, so it gets unit and property tests (any split of the bytes gives the
same answer). The clients' publish calls run against real nsqd in both flavours: reuse of one
kept-alive connection, percent-encoded names, TLS, and a server that drops idle connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import threading
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqclient.errors import ConfigError, HTTPConnectError, HTTPTimeoutError
from nsqclient.http import NsqdHTTPClient, SyncNsqdHTTPClient
from nsqclient.http import _wire as _wire_module
from nsqclient.http._wire import ResponseParser, WireResponse, request_target
from nsqclient.testing.certs import CertBundle

from .test_http import consume, find_topic, flavour, open_nsqd

__all__ = ["flavour"]  # the fixture, shared with test_http

pytestmark = pytest.mark.timeout(60)

OK_V1 = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"X-Nsq-Content-Type: nsq; version=1.0\r\nContent-Length: 2\r\n\r\nOK"
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n"
)
CLOSE_DELIMITED = b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nhello world"


def parse(raw: bytes, cuts: list[int] = ()) -> WireResponse | None:  # type: ignore[assignment]
    parser = ResponseParser()
    response = None
    last = 0
    for cut in [*sorted(cuts), len(raw)]:
        if response is None:
            response = parser.feed(raw[last:cut])
        last = cut
    return response if response is not None else parser.feed_eof()


def test_content_length_answer() -> None:
    r = parse(OK_V1)
    assert r is not None
    assert (r.status, r.body, r.keep_alive) == (200, b"OK", True)
    assert r.headers["x-nsq-content-type"] == "nsq; version=1.0"


def test_chunked_answer_with_extension_and_trailer() -> None:
    r = parse(CHUNKED)
    assert r is not None and (r.body, r.keep_alive) == (b"Wikipedia", True)


def test_close_delimited_answer_needs_eof_and_is_not_kept() -> None:
    parser = ResponseParser()
    assert parser.feed(CLOSE_DELIMITED) is None
    r = parser.feed_eof()
    assert r is not None and (r.body, r.keep_alive) == (b"hello world", False)


def test_interim_answer_is_skipped_and_connection_close_is_honoured() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + OK_V1.replace(
        b"Content-Length", b"Connection: close\r\nContent-Length"
    )
    r = parse(raw)
    assert r is not None and (r.status, r.body, r.keep_alive) == (200, b"OK", False)


def test_incomplete_answer_at_eof_is_none() -> None:
    parser = ResponseParser()
    assert parser.feed(OK_V1[:-1]) is None
    assert parser.started
    assert parser.feed_eof() is None


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno-colon-here\r\n\r\n",
        OK_V1 + b"extra",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nabc\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
    ],
)
def test_malformed_answers_raise_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        ResponseParser().feed(raw)


@given(
    raw=st.sampled_from([OK_V1, CHUNKED, CLOSE_DELIMITED]),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
)
def test_any_split_gives_the_same_answer(raw: bytes, cuts: list[int]) -> None:
    whole = parse(raw)
    split = parse(raw, [min(c, len(raw)) for c in cuts])
    assert whole is not None and split is not None
    assert (split.status, split.headers, split.body, split.keep_alive) == (
        whole.status,
        whole.headers,
        whole.body,
        whole.keep_alive,
    )


async def test_concurrent_publishes_share_a_bounded_set_of_connections(
    nsqd: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_wire_module, "MAX_CONNECTIONS", 3)
    topic = f"w_{uuid.uuid4().hex[:12]}"
    async with NsqdHTTPClient(nsqd.http_address) as http:
        await asyncio.gather(*(http.pub(topic, b"m%d" % i) for i in range(40)))
        assert http._wire is not None and http._wire.opened == 3
        found = find_topic(await http.stats(topic=topic), topic)
    assert found is not None and found["message_count"] == 40


@pytest.mark.parametrize(
    "headers",
    [{"X-Evil": "a\r\nX-Injected: 1"}, {"Bad Name": "x"}, {"X-Uni": "\u2603"}],
)
@pytest.mark.parametrize("cls", [NsqdHTTPClient, SyncNsqdHTTPClient])
def test_headers_that_cannot_be_sent_are_refused(cls: Any, headers: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="cannot be sent"):
        cls("127.0.0.1:4151", headers=headers)


def test_request_target_percent_encodes_values() -> None:
    assert request_target("/pub", ()) == "/pub"
    assert request_target("/pub", (("topic", "t#ephemeral"), ("defer", "5"))) == (
        "/pub?topic=t%23ephemeral&defer=5"
    )


# -- against nsqd ------------------------------------------------------------------------------


def _wire(client: Any) -> Any:
    return client.client._wire


async def test_publishes_reuse_one_kept_alive_connection(flavour: str, nsqd: Any) -> None:
    http = open_nsqd(flavour, nsqd.http_address)
    topic = f"w_{uuid.uuid4().hex[:12]}"
    try:
        for i in range(20):
            await http.pub(topic, b"m%d" % i)
        await http.mpub(topic, [b"a", b"b"])
        assert _wire(http).opened == 1  # one connection, kept alive across all 21 requests
        found = find_topic(await http.stats(topic=topic), topic)
        assert found is not None and found["message_count"] == 22
    finally:
        await http.close()


async def test_ephemeral_topic_name_is_encoded(flavour: str, nsqd: Any) -> None:
    http = open_nsqd(flavour, nsqd.http_address)
    topic = f"w_{uuid.uuid4().hex[:12]}#ephemeral"
    try:
        await http.create_topic(topic)
        await http.create_channel(topic, "c#ephemeral")
        await http.pub(topic, b"hello")
    finally:
        await http.close()
    assert await consume(nsqd.tcp_address, topic, "c#ephemeral", 1) == [b"hello"]


async def test_silent_server_publish_is_a_timeout(flavour: str) -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        http = open_nsqd(flavour, f"127.0.0.1:{listener.getsockname()[1]}", timeout=0.2)
        try:
            with pytest.raises(HTTPTimeoutError) as info:
                await http.pub("t", b"x")
        finally:
            await http.close()
    assert isinstance(info.value, TimeoutError) and "/pub?topic=t" in info.value.url


async def test_https_publish(flavour: str, nsqd_tls_required: Any, tls_certs: CertBundle) -> None:
    https = f"https://{nsqd_tls_required.https_address}"
    http = open_nsqd(flavour, https, verify=str(tls_certs.ca_cert))
    try:
        await http.pub("tls_topic", b"x")
        await http.pub("tls_topic", b"y")
        assert _wire(http).opened == 1
    finally:
        await http.close()
    http = open_nsqd(flavour, https, verify=False)  # no check at all: development only
    try:
        await http.pub("tls_topic", b"z")
    finally:
        await http.close()
    http = open_nsqd(flavour, https)  # the default CAs do not know our test CA
    try:
        with pytest.raises(HTTPConnectError, match="verify=") as info:
            await http.pub("tls_topic", b"x")
    finally:
        await http.close()
    assert info.value.sent is False


class OneShot:
    def __init__(self, address: str) -> None:
        self.address = address
        self.accepted = 0
        self.closed = threading.Event()  # set after each close


async def test_a_connection_in_use_when_the_client_closes_is_closed_after_its_answer(
    nsqd: Any,
) -> None:
    http = NsqdHTTPClient(nsqd.http_address, timeout=5)
    wire = http._wire
    assert wire is not None
    real_encode = wire._origin.encode

    def encode_then_close(*args: Any) -> bytes:
        wire.close()  # what aclose() does, while this request is under way
        return real_encode(*args)

    wire._origin.encode = encode_then_close  # type: ignore[method-assign]
    await http.pub(f"w_{uuid.uuid4().hex[:12]}", b"x")  # it still gets its answer
    assert wire.opened == 1 and wire._idle == []  # and its connection was not kept
    await http.aclose()


def test_a_sync_socket_in_use_when_the_client_closes_is_closed_after_its_answer(
    one_shot_server: OneShot,
) -> None:
    http = SyncNsqdHTTPClient(one_shot_server.address, timeout=5)
    wire = http._wire
    assert wire is not None
    real_connect = wire._connect

    def connect_then_close(timeout: float, url: str) -> socket.socket:
        sock = real_connect(timeout, url)
        http.close()  # another thread closing the client mid-request
        return sock

    wire._connect = connect_then_close  # type: ignore[method-assign]
    http.pub("t", b"x")
    assert not wire._idle


def test_an_async_client_used_under_successive_event_loops_starts_afresh(nsqd: Any) -> None:
    http = NsqdHTTPClient(nsqd.http_address, timeout=5)
    topic = f"w_{uuid.uuid4().hex[:12]}"
    with warnings.catch_warnings():
        # the first loop's idle connection is shut down, its transport collected later
        warnings.simplefilter("ignore", ResourceWarning)
        asyncio.run(http.pub(topic, b"first loop"))
        asyncio.run(http.pub(topic, b"second loop"))  # would wait on the dead loop otherwise
        asyncio.run(http.aclose())
        gc.collect()
    assert http._wire is not None and http._wire.opened == 2
    with SyncNsqdHTTPClient(nsqd.http_address) as check:
        found = find_topic(check.stats(topic=topic), topic)
    assert found is not None and found["message_count"] == 2


@pytest.fixture
def one_shot_server() -> Iterator[OneShot]:
    """Answers one request per connection, then closes it (as a server's idle timeout would)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    server = OneShot(f"127.0.0.1:{listener.getsockname()[1]}")

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            server.accepted += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data or not data.endswith(b"x"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(OK_V1)  # keep-alive promised, then closed anyway
            server.closed.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        # close() alone does not wake a thread blocked in accept() on Linux; shutdown() does
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
        assert not thread.is_alive(), "the one-shot server's thread did not stop"


def test_sync_idle_connection_closed_by_the_server_is_not_reused(one_shot_server: OneShot) -> None:
    with SyncNsqdHTTPClient(one_shot_server.address, timeout=5) as http:
        http.pub("t", b"x")
        assert one_shot_server.closed.wait(5)
        http.pub("t", b"x")  # must open a new connection, not fail on the dead one
    assert one_shot_server.accepted == 2


async def test_async_idle_connection_closed_by_the_server_is_not_reused(
    one_shot_server: OneShot,
) -> None:
    async with NsqdHTTPClient(one_shot_server.address, timeout=5) as http:
        await http.pub("t", b"x")
        assert await asyncio.to_thread(one_shot_server.closed.wait, 5)
        await http.pub("t", b"x")  # the loop may not have seen the close yet: still a new one
    assert one_shot_server.accepted == 2


def test_publishing_on_uvloop_reuses_and_replaces_connections(
    nsqd: Any, one_shot_server: OneShot, tls_certs: CertBundle, nsqd_tls_required: Any
) -> None:
    """uvloop's transports are not asyncio.Transport subclasses and may report connection_made
    a turn late: keep-alive, a server-closed idle connection and HTTPS work on it too."""
    import uvloop

    topic = f"w_{uuid.uuid4().hex[:12]}"

    async def main() -> tuple[int, int, int]:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        async with NsqdHTTPClient(nsqd.http_address) as http:
            for i in range(10):
                await http.pub(topic, b"u%d" % i)
            assert http._wire is not None
            kept = http._wire.opened
        https = f"https://{nsqd_tls_required.https_address}"
        async with NsqdHTTPClient(https, verify=str(tls_certs.ca_cert)) as secure:
            await secure.pub("tls_topic", b"a")
            await secure.pub("tls_topic", b"b")
            assert secure._wire is not None
            tls = secure._wire.opened
        async with NsqdHTTPClient(one_shot_server.address, timeout=5) as http:
            await http.pub("t", b"x")
            assert await asyncio.to_thread(one_shot_server.closed.wait, 5)
            await http.pub("t", b"x")
            assert http._wire is not None
            replaced = http._wire.opened
        return kept, tls, replaced

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(main()) == (1, 1, 2)
    with SyncNsqdHTTPClient(nsqd.http_address) as check:
        found = find_topic(check.stats(topic=topic), topic)
    assert found is not None and found["message_count"] == 10
