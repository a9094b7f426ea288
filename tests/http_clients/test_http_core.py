"""The HTTP helpers' I/O-free core, without servers: response formats, request shapes, validation.

Real nsqd/nsqlookupd behaviour is tested in test_http_nsqd.py and test_http_lookupd.py. Here
httpx.MockTransport stands in only for response *formats* no server in this repo emits (the
pre-1.0 ``status_code/data`` wrapper, an unhealthy ``/ping``) and to prove that invalid input
never reaches the network.
"""

from __future__ import annotations

import inspect
import json
import struct
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from nsqclient.errors import (
    ClosedError,
    ConfigError,
    ConnectError,
    EmptyMessageError,
    HTTPConnectError,
    HTTPError,
    HTTPProtocolError,
    HTTPTimeoutError,
    InvalidArgumentError,
    InvalidBodyTypeError,
    InvalidChannelError,
    InvalidTopicError,
    MessageTooLargeError,
    NSQError,
    NSQTimeoutError,
    ProtocolError,
)
from nsqclient.http import (
    LookupdHTTPClient,
    LookupResult,
    Node,
    NsqdHTTPClient,
    Producer,
    SyncLookupdHTTPClient,
    SyncNsqdHTTPClient,
)
from nsqclient.http._core import ACCEPT, NsqdCalls, decode_response
from nsqclient.protocol import commands

pytestmark = pytest.mark.timeout(10)

V1 = {"X-NSQ-Content-Type": "nsq; version=1.0"}
JSON = {"Content-Type": "application/json; charset=utf-8"}
URL = "http://127.0.0.1:4151/x"

Handler = Callable[[httpx.Request], httpx.Response]


def nsqd_with(handler: Handler, **kwargs: object) -> NsqdHTTPClient:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return NsqdHTTPClient("127.0.0.1:4151", client=client, **kwargs)  # type: ignore[arg-type]


def lookupd_with(handler: Handler) -> LookupdHTTPClient:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return LookupdHTTPClient("127.0.0.1:4161", client=client)


def must_not_send(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"invalid input reached the network: {request.url}")


def legacy(status: int, txt: str, data: object) -> httpx.Response:
    """A pre-1.0 nsqd/nsqlookupd answer: wrapped JSON, no X-NSQ-Content-Type header."""
    body = json.dumps({"status_code": status, "status_txt": txt, "data": data})
    return httpx.Response(status, content=body.encode(), headers=JSON)


# -- decode_response: both formats ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "content", "expected"),
    [
        (200, {**V1, **JSON}, b'{"version":"1.3.0"}', {"version": "1.3.0"}),
        (200, {**V1, **JSON}, b"[1, 2]", [1, 2]),
        (200, {**V1, **JSON}, b"1048576", 1048576),
        (200, V1, b"OK", "OK"),
        (200, V1, b"", {}),
        (200, {}, b"OK", "OK"),  # /ping: plain text, no V1 header
        (200, JSON, b'{"status_code":200,"status_txt":"OK","data":{"a":1}}', {"a": 1}),
        (200, JSON, b'{"status_code":200,"status_txt":"OK","data":null}', {}),
        # pre-1.0 servers did not always label JSON: a wrapper is recognised by its shape
        (200, {}, b'{"status_code":200,"status_txt":"OK","data":{"b":2}}', {"b": 2}),
        # a V1 payload that happens to have those keys is not unwrapped
        (200, {**V1, **JSON}, b'{"status_code":1,"data":2}', {"status_code": 1, "data": 2}),
    ],
)
def test_decode_response_payloads(
    status: int, headers: dict[str, str], content: bytes, expected: object
) -> None:
    assert decode_response(status, httpx.Headers(headers), content, URL) == expected


@pytest.mark.parametrize(
    ("status", "headers", "content", "code", "message"),
    [
        (404, {**V1, **JSON}, b'{"message":"TOPIC_NOT_FOUND"}', 404, "TOPIC_NOT_FOUND"),
        (413, {**V1, **JSON}, b'{"message":"MSG_TOO_BIG"}', 413, "MSG_TOO_BIG"),
        (500, {}, b"NOK - disk full", 500, "NOK - disk full"),
        (
            500,
            JSON,
            b'{"status_code":500,"status_txt":"TOPIC_NOT_FOUND","data":null}',
            500,
            "TOPIC_NOT_FOUND",
        ),
        (502, {}, b"", 502, "UNKNOWN_ERROR"),
        (400, {**V1, **JSON}, b"not json", 400, "not json"),
    ],
)
def test_decode_response_errors(
    status: int, headers: dict[str, str], content: bytes, code: int, message: str
) -> None:
    with pytest.raises(HTTPError) as info:
        decode_response(status, httpx.Headers(headers), content, URL)
    assert (info.value.status_code, info.value.message, info.value.url) == (code, message, URL)
    assert type(info.value) is HTTPError


def test_decode_response_bad_json_on_success_is_a_protocol_error() -> None:
    with pytest.raises(HTTPProtocolError) as info:
        decode_response(200, httpx.Headers({**V1, **JSON}), b"{oops", URL)
    assert isinstance(info.value, ProtocolError)


def test_error_messages_say_what_to_do() -> None:
    text = str(HTTPError("MSG_TOO_BIG", url=URL, status_code=413))
    assert "HTTP 413 MSG_TOO_BIG" in text and "--max-msg-size" in text and URL in text
    assert "--max-req-timeout" in str(HTTPError("INVALID_DEFER", url=URL, status_code=400))


def test_error_tree() -> None:
    connect = HTTPConnectError("no response", url=URL, address="127.0.0.1:1")
    for kind in (HTTPError, ConnectError, ConnectionError, NSQError):
        assert isinstance(connect, kind)
    assert connect.address == "127.0.0.1:1" and connect.status_code is None
    timeout = HTTPTimeoutError("timed out", url=URL)
    assert all(isinstance(timeout, k) for k in (HTTPError, NSQTimeoutError, TimeoutError))
    assert isinstance(HTTPProtocolError("x", url=URL), ProtocolError)


# -- the pre-1.0 format through the real clients -----------------------------------------------


async def test_legacy_lookup_unwraps_data_and_reads_old_address_field() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Accept"] == ACCEPT
        producer = {"address": "10.0.0.5", "tcp_port": 4150, "http_port": 4151, "version": "0.2.2"}
        return legacy(200, "OK", {"channels": ["c"], "producers": [producer]})

    async with lookupd_with(handler) as lookupd:
        result = await lookupd.lookup("t")
    assert result.channels == ("c",)
    assert [p.tcp_address for p in result.producers] == ["10.0.0.5:4150"]


async def test_legacy_unknown_topic_lookup_is_empty_but_other_errors_raise() -> None:
    answers = iter([legacy(500, "TOPIC_NOT_FOUND", None), legacy(500, "INVALID_REQUEST", None)])
    async with lookupd_with(lambda request: next(answers)) as lookupd:
        assert await lookupd.lookup("t") == LookupResult()
        with pytest.raises(HTTPError) as info:
            await lookupd.lookup("t")
    assert (info.value.status_code, info.value.message) == (500, "INVALID_REQUEST")


async def test_legacy_stats_and_admin() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/stats":
            return legacy(200, "OK", {"topics": [{"topic_name": "t", "channels": None}]})
        return legacy(200, "OK", None)

    async with nsqd_with(handler) as nsqd:
        stats = await nsqd.stats()
        await nsqd.create_topic("t")
    assert stats["topics"] == [{"topic_name": "t", "channels": []}]
    assert stats["producers"] == []


async def test_unhealthy_ping_raises() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=b"NOK - failed to write")

    async with nsqd_with(handler) as nsqd:
        with pytest.raises(HTTPError) as info:
            await nsqd.ping()
    assert (info.value.status_code, info.value.message) == (500, "NOK - failed to write")


async def test_unexpected_shape_is_a_protocol_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"producers": [{"tcp_port": 4150}]}, headers=V1)

    async with lookupd_with(handler) as lookupd:
        with pytest.raises(HTTPProtocolError, match="broadcast_address"):
            await lookupd.nodes()


# -- request shapes ------------------------------------------------------------------------------


async def test_requests_use_query_params_raw_bodies_and_the_accept_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"OK", headers=V1)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    nsqd = NsqdHTTPClient(
        "http://nsqd.example:4151", client=client, headers={"X-Extra": "1", "accept": "nope"}
    )
    await nsqd.pub("t", "héllo", defer_ms=0)
    await nsqd.mpub("t", [b"a", bytearray(b"\n\x00"), memoryview(b"ccc")])
    await nsqd.mpub("t", ["x", b"y"], binary=False)
    await nsqd.aclose()
    assert not client.is_closed  # a client passed in belongs to the caller
    await client.aclose()

    pub, mpub_binary, mpub_text = seen
    for request in seen:
        assert request.method == "POST"
        assert request.headers.get_list("Accept") == [ACCEPT]
        assert request.headers["X-Extra"] == "1"
        assert request.headers["User-Agent"].startswith("nsqclient/")
    assert str(pub.url) == "http://nsqd.example:4151/pub?topic=t&defer=0"
    assert pub.content == "héllo".encode()
    assert mpub_binary.url.params["binary"] == "true"
    assert mpub_binary.content == struct.pack(">I", 3) + b"".join(
        struct.pack(">I", len(b)) + b for b in (b"a", b"\n\x00", b"ccc")
    )
    assert "binary" not in mpub_text.url.params  # nsqd's default is text mode
    assert mpub_text.content == b"x\ny"


async def test_stats_params() -> None:
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, json={"topics": None, "producers": None}, headers=V1)

    async with nsqd_with(handler) as nsqd:
        stats = await nsqd.stats(topic="t", channel="c#ephemeral", include_clients=False)
    assert dict(seen[0].params) == {
        "format": "json",
        "topic": "t",
        "channel": "c#ephemeral",
        "include_clients": "false",
        "include_mem": "true",
    }
    assert stats == {"topics": [], "producers": []}


@pytest.mark.parametrize(
    ("node", "sent"),
    [
        ("10.0.0.1:4151", "10.0.0.1:4151"),
        ("[::1]:4151", "::1:4151"),  # lookupd's key is Sprintf("%s:%d"), never bracketed
        (Producer(broadcast_address="::1", tcp_port=4150, http_port=4151), "::1:4151"),
    ],
)
async def test_tombstone_node_ids(node: str | Producer, sent: str) -> None:
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, headers=V1)

    async with lookupd_with(handler) as lookupd:
        await lookupd.tombstone_topic_producer("t", node)
    assert seen[0].path == "/topic/tombstone"
    assert dict(seen[0].params) == {"topic": "t", "node": sent}


def test_producer_addresses() -> None:
    v4 = Producer(broadcast_address="10.0.0.1", tcp_port=4150, http_port=4151)
    v6 = Producer(broadcast_address="fd00::1", tcp_port=4150, http_port=4151)
    assert (v4.tcp_address, v4.http_address) == ("10.0.0.1:4150", "10.0.0.1:4151")
    assert (v6.tcp_address, v6.http_address) == ("[fd00::1]:4150", "[fd00::1]:4151")
    node = Node.from_json(
        {
            "broadcast_address": "h",
            "tcp_port": 1,
            "http_port": 2,
            "topics": ["a", "b"],
            "tombstones": [False, True],
        }
    )
    assert node.is_tombstoned("b") and not node.is_tombstoned("a")
    assert hash(LookupResult.from_json({"channels": [], "producers": None})) == hash(LookupResult())


# -- validation before any request ---------------------------------------------------------------

BAD_CALLS = [
    ("pub", ("bad topic", b"x"), {}, InvalidTopicError),
    ("pub", ("t", b""), {}, EmptyMessageError),
    ("pub", ("t", b"x" * 11), {}, MessageTooLargeError),
    ("pub", ("t", 42), {}, InvalidBodyTypeError),
    ("pub", ("t", b"x"), {"defer_ms": -1}, InvalidArgumentError),
    ("pub", ("t", b"x"), {"defer_ms": 1001}, InvalidArgumentError),
    ("pub", ("t", b"x"), {"defer_ms": 1.5}, InvalidArgumentError),
    ("mpub", ("t", b"single body"), {}, InvalidArgumentError),
    ("mpub", ("t", []), {}, InvalidArgumentError),
    ("mpub", ("t", [b"x" * 11]), {}, MessageTooLargeError),
    ("mpub", ("t", [b"x" * 10] * 3), {}, MessageTooLargeError),  # 4 + 3 * 14 > 40
    ("mpub", ("t", [b"a", b"b\nc"]), {"binary": False}, InvalidArgumentError),
    ("mpub", ("t", [b"x" * 10] * 4), {"binary": False}, MessageTooLargeError),  # 43 > 40
    ("mpub", ("t", [b"ok", None]), {}, InvalidBodyTypeError),
    ("stats", (), {"topic": "x" * 65}, InvalidTopicError),
    ("stats", (), {"channel": "a b"}, InvalidChannelError),
    ("create_topic", ("",), {}, InvalidTopicError),
    ("delete_topic", ("a/b",), {}, InvalidTopicError),
    ("pause_channel", ("t", "ch#ephemeral#ephemeral"), {}, InvalidChannelError),
    ("create_channel", ("t", ""), {}, InvalidChannelError),
    ("config", ("../stats",), {}, InvalidArgumentError),
    ("set_config", ("log_level", ""), {}, InvalidArgumentError),
    ("set_config", ("nsqlookupd_tcp_addresses", [1]), {}, InvalidArgumentError),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "error"), BAD_CALLS)
async def test_invalid_input_never_reaches_nsqd(
    method: str, args: tuple[object, ...], kwargs: dict[str, object], error: type[Exception]
) -> None:
    limits: dict[str, Any] = {"max_msg_size": 10, "max_body_size": 40, "max_defer_ms": 1000}
    async with nsqd_with(must_not_send, **limits) as nsqd:
        with pytest.raises(error):
            await getattr(nsqd, method)(*args, **kwargs)
    with (
        SyncNsqdHTTPClient(
            client=httpx.Client(transport=httpx.MockTransport(must_not_send)), **limits
        ) as sync_nsqd,
        pytest.raises(error),
    ):
        getattr(sync_nsqd, method)(*args, **kwargs)


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("lookup", ("",)),
        ("channels", ("bad topic",)),
        ("create_channel", ("t", "bad channel")),
        ("tombstone_topic_producer", ("t", "")),
        ("tombstone_topic_producer", ("t", 4151)),
    ],
)
async def test_invalid_lookupd_input_never_reaches_lookupd(
    method: str, args: tuple[object, ...]
) -> None:
    async with lookupd_with(must_not_send) as lookupd:
        with pytest.raises((InvalidTopicError, InvalidChannelError, InvalidArgumentError)):
            await getattr(lookupd, method)(*args)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": True},
        {"max_msg_size": 0},
        {"max_body_size": -1},
        {"max_defer_ms": "1"},
        {"verify": "/nonexistent/ca.pem"},
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SyncNsqdHTTPClient(**kwargs)  # type: ignore[arg-type]


def test_bad_address_and_verify_with_client() -> None:
    with pytest.raises(ConfigError):
        SyncNsqdHTTPClient("127.0.0.1:99999")
    with httpx.Client() as client, pytest.raises(ConfigError, match="verify"):
        SyncNsqdHTTPClient(client=client, verify=False)


def test_default_ports() -> None:
    with SyncNsqdHTTPClient("10.1.2.3") as nsqd, SyncLookupdHTTPClient(("::1", 80)) as lookupd:
        assert nsqd.base_url == "http://10.1.2.3:4151"
        assert lookupd.base_url == "http://[::1]:80"
    with SyncLookupdHTTPClient("https://lookupd.example") as lookupd:
        assert lookupd.base_url == "https://lookupd.example:4161"


async def test_use_after_close() -> None:
    nsqd = NsqdHTTPClient()
    await nsqd.aclose()
    await nsqd.aclose()  # twice is fine
    with pytest.raises(ClosedError):
        await nsqd.ping()
    sync_lookupd = SyncLookupdHTTPClient()
    sync_lookupd.close()
    with pytest.raises(ClosedError):
        sync_lookupd.topics()


# -- the two flavours stay twins -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("async_cls", "sync_cls"),
    [(NsqdHTTPClient, SyncNsqdHTTPClient), (LookupdHTTPClient, SyncLookupdHTTPClient)],
)
def test_sync_and_async_clients_have_the_same_methods(async_cls: type, sync_cls: type) -> None:
    def api(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member).replace(return_annotation=inspect.Signature.empty)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and name not in ("aclose", "close")
        }

    async_api, sync_api = api(async_cls), api(sync_cls)
    assert sync_api.keys() == async_api.keys()
    for name, signature in async_api.items():
        params = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
        sync_params = [p.replace(annotation=p.empty) for p in sync_api[name].parameters.values()]
        assert params == sync_params, name
        assert getattr(sync_cls, name).__doc__ == getattr(async_cls, name).__doc__, name
    assert list(inspect.signature(async_cls).parameters) == list(
        inspect.signature(sync_cls).parameters
    )


def test_publish_command_is_the_http_twin_of_an_encoded_publish() -> None:
    calls = NsqdCalls()
    pub = calls.publish_command(commands.pub("t", b"body\n"))
    assert (pub.method, pub.path, pub.params, pub.content) == (
        "POST", "/pub", (("topic", "t"),), b"body\n"
    )  # fmt: skip
    dpub = calls.publish_command(commands.dpub("t#ephemeral", 1500, b"x"))
    assert (dpub.path, dpub.params, dpub.content) == (
        "/pub", (("topic", "t#ephemeral"), ("defer", "1500")), b"x"
    )  # fmt: skip
    mpub = calls.publish_command(commands.mpub("t", [b"a", b"bc"]))
    assert (mpub.path, mpub.params) == ("/mpub", (("topic", "t"), ("binary", "true")))
    assert mpub.content == calls.mpub("t", [b"a", b"bc"], True).content
    assert mpub.content == b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x02bc"


@pytest.mark.parametrize(
    "data",
    [b"", b"FIN 0123456789abcdef\n", b"PUB t\n\x00\x00", b"PUB\n\x00\x00\x00\x00",
     b"DPUB t soon\n\x00\x00\x00\x01x", b"PUB a b\n\x00\x00\x00\x01x", b"PUB t"],
)  # fmt: skip
def test_publish_command_refuses_anything_else(data: bytes) -> None:
    with pytest.raises(InvalidArgumentError, match="not an encoded"):
        NsqdCalls().publish_command(data)


def test_a_connection_broken_after_sending_is_marked_sent() -> None:
    """The Writer's HTTP fallback moves on to another nsqd only when nothing was sent: a
    request that broke mid-way may have been applied, and sending it elsewhere would duplicate."""
    from nsqclient.http._errors import error_from_transport

    request = httpx.Request("POST", "http://127.0.0.1:4151/pub?topic=t")
    refused = error_from_transport(httpx.ConnectError("refused", request=request), "u")
    broken = error_from_transport(httpx.ReadError("reset", request=request), "u")
    assert isinstance(refused, HTTPConnectError) and refused.sent is False
    assert isinstance(broken, HTTPConnectError) and broken.sent is True
    assert "may or may not" in str(broken) and "may or may not" not in str(refused)
