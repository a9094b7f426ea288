"""nsqlookupd: the embedded one against the real one, and nsqd (real or embedded) registering.

The same nsqd registers with a real and an embedded lookupd at once; after each change both
lookupds must show the same registry (``/lookup``, ``/topics``, ``/channels``, ``/nodes``). The
V1 TCP protocol is compared with raw transcripts, and nsqd's channel pre-creation from lookupd is
compared between real and embedded nsqd.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from nsqclient.testing.daemons import NsqlookupdProcess
from nsqclient.testing.embedded import ThreadedEmbeddedLookupd
from tests.rawconn_support import RawClient, host_port
from tests.support import wait_for

from .conftest import start_embedded, start_real
from .support import channel_stats, http

pytestmark = pytest.mark.timeout(90)

VOLATILE = {"remote_address", "hostname", "tcp_port", "http_port", "id", "last_update"}


def mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<masked>" if k in VOLATILE else mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def canonical(doc: Any) -> Any:
    """Masked, with the lists whose order is Go map order sorted."""
    doc = mask(doc)
    if isinstance(doc, dict):
        for key in ("topics", "channels"):
            if isinstance(doc.get(key), list) and all(isinstance(v, str) for v in doc[key]):
                doc[key] = sorted(doc[key])
    return doc


@pytest.fixture
def lookupds() -> Iterator[tuple[NsqlookupdProcess, ThreadedEmbeddedLookupd]]:
    real = NsqlookupdProcess()
    real.start()
    embedded = ThreadedEmbeddedLookupd().start()
    yield real, embedded
    real.stop()
    embedded.stop()


async def get(server: Any, path: str, **params: str) -> tuple[int, Any]:
    response = await http(server, "GET", path, params=params)
    body: Any = response.json() if response.content.startswith((b"{", b"[")) else response.text
    return response.status_code, canonical(body)


async def same_view(lookupds: tuple[Any, Any], path: str, **params: str) -> tuple[int, Any]:
    """Wait until both lookupds answer ``path`` the same way; return that answer."""
    real, embedded = lookupds

    async def both() -> tuple[tuple[int, Any], tuple[int, Any]]:
        return await get(real, path, **params), await get(embedded, path, **params)

    a, _ = await wait_for(both, until=lambda pair: pair[0] == pair[1])
    return a


@pytest.mark.parametrize("nsqd_kind", ["real", "embedded"])
async def test_registrations_look_the_same(
    lookupds: tuple[NsqlookupdProcess, ThreadedEmbeddedLookupd], nsqd_kind: str
) -> None:
    real_l, emb_l = lookupds
    start = start_real if nsqd_kind == "real" else start_embedded
    nsqd = start(lookupd_tcp_addresses=[real_l.tcp_address, emb_l.tcp_address])
    try:
        real_l.wait_for_nodes([nsqd.tcp_address])
        emb_l.wait_for_nodes([nsqd.tcp_address])
        for path, params in [
            ("/ping", {}),
            ("/info", {}),
            ("/topics", {}),
            ("/nodes", {}),
            ("/lookup", {"topic": "none"}),
            ("/lookup", {}),
            ("/channels", {"topic": "none"}),
            ("/channels", {}),
        ]:
            await same_view(lookupds, path, **params)
        await http(nsqd, "POST", "/topic/create", params={"topic": "solo"})
        await http(nsqd, "POST", "/topic/create", params={"topic": "lk"})
        await http(nsqd, "POST", "/channel/create", params={"topic": "lk", "channel": "c1"})
        await http(nsqd, "POST", "/channel/create", params={"topic": "lk", "channel": "c2"})
        status, doc = await same_view(lookupds, "/lookup", topic="lk")
        assert status == 200 and doc["channels"] == ["c1", "c2"] and len(doc["producers"]) == 1
        assert (await same_view(lookupds, "/topics"))[1]["topics"] == ["lk", "solo"]
        nodes = (await same_view(lookupds, "/nodes"))[1]["producers"]
        assert len(nodes) == 1 and sorted(nodes[0]["topics"]) == ["lk", "solo"]
        # a deleted channel loses its producer but keeps its key
        await http(nsqd, "POST", "/channel/delete", params={"topic": "lk", "channel": "c1"})
        assert (await same_view(lookupds, "/channels", topic="lk"))[1]["channels"] == ["c1", "c2"]
        # an ephemeral channel's key goes with its last producer
        sub = await RawClient.connect(nsqd.tcp_address)
        await sub.setup()
        await sub.sub("lk", "e#ephemeral")
        await wait_for(
            lambda: get(emb_l, "/channels", topic="lk"),
            until=lambda r: "e#ephemeral" in r[1]["channels"],
        )
        await same_view(lookupds, "/channels", topic="lk")
        await sub.close()
        await wait_for(
            lambda: get(emb_l, "/channels", topic="lk"),
            until=lambda r: "e#ephemeral" not in r[1]["channels"],
        )
        await same_view(lookupds, "/channels", topic="lk")
        await http(nsqd, "POST", "/topic/delete", params={"topic": "solo"})
        await wait_for(
            lambda: get(emb_l, "/lookup", topic="solo"), until=lambda r: r[1]["producers"] == []
        )
        await same_view(lookupds, "/lookup", topic="solo")
        # tombstoning hides the producer from /lookup, not from /nodes
        node = f"127.0.0.1:{nsqd.http_address.rpartition(':')[2]}"
        for lookupd in lookupds:
            response = await http(
                lookupd, "POST", "/topic/tombstone", params={"topic": "lk", "node": node}
            )
            assert response.status_code == 200
        assert (await same_view(lookupds, "/lookup", topic="lk"))[1]["producers"] == []
        nodes = (await same_view(lookupds, "/nodes"))[1]["producers"]
        assert nodes[0]["tombstones"] == [t == "lk" for t in nodes[0]["topics"]]
    finally:
        nsqd.stop()
    # the nsqd left: producers go, the keys stay
    status, doc = await same_view(lookupds, "/lookup", topic="lk")
    assert status == 200 and doc["producers"] == []
    assert (await same_view(lookupds, "/nodes"))[1] == {"producers": []}


async def test_lookupd_http_edits(
    lookupds: tuple[NsqlookupdProcess, ThreadedEmbeddedLookupd],
) -> None:
    steps = [
        ("POST", "/topic/create", {"topic": "x"}),
        ("POST", "/topic/create", {}),
        ("POST", "/topic/create", {"topic": "bad!"}),
        ("POST", "/channel/create", {"topic": "x", "channel": "c"}),
        ("POST", "/channel/create", {"topic": "y", "channel": "c"}),
        ("POST", "/channel/create", {"topic": "y"}),
        ("POST", "/channel/create", {"topic": "y", "channel": "bad!"}),
        ("GET", "/lookup", {"topic": "x"}),
        ("GET", "/channels", {"topic": "y"}),
        ("GET", "/topics", {}),
        ("POST", "/channel/delete", {"topic": "x", "channel": "nope"}),
        ("POST", "/channel/delete", {"topic": "x", "channel": "c"}),
        ("POST", "/topic/delete", {"topic": "y"}),
        ("POST", "/topic/delete", {"topic": "never"}),
        ("POST", "/topic/delete", {}),
        ("POST", "/topic/tombstone", {"topic": "x"}),
        ("POST", "/topic/tombstone", {"node": "n"}),
        ("GET", "/topics", {}),
        ("GET", "/lookup", {"topic": "y"}),
        ("GET", "/nope", {}),
        ("GET", "/lookup/", {"topic": "x"}),
        ("POST", "/lookup", {"topic": "x"}),
        ("GET", "/lookup", "topic=%zz"),
    ]
    results = []
    for server in lookupds:
        seen = []
        async with httpx.AsyncClient(base_url=f"http://{server.http_address}") as client:
            for method, path, params in steps:
                url = path + (f"?{params}" if isinstance(params, str) else "")
                response = await client.request(
                    method, url, params=params if isinstance(params, dict) else None
                )
                body = response.content
                parsed = canonical(json.loads(body)) if body.startswith(b"{") else body
                seen.append(
                    (
                        method,
                        path,
                        response.status_code,
                        response.headers.get("content-type"),
                        parsed,
                    )
                )
        results.append(seen)
    assert results[1] == results[0]


async def transcript_v1(address: str, *chunks: bytes) -> list[Any]:
    host, port = host_port(address)
    reader, writer = await asyncio.open_connection(host, port)
    for chunk in chunks:
        writer.write(chunk)
    seen: list[Any] = []
    try:
        while True:
            head = await asyncio.wait_for(reader.readexactly(4), 5)
            (size,) = struct.unpack(">i", head)
            data = await asyncio.wait_for(reader.readexactly(size), 5)
            seen.append(canonical(json.loads(data)) if data.startswith(b"{") else data)
            if len(seen) >= len(chunks) - 1:  # one reply per command after the magic
                break
    except asyncio.IncompleteReadError:
        seen.append("closed")
    writer.close()
    return seen


def identify_v1(**fields: Any) -> bytes:
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + struct.pack(">I", len(body)) + body


PEER = {
    "broadcast_address": "127.0.0.1",
    "tcp_port": 1,
    "http_port": 2,
    "version": "1.3.0",
    "hostname": "h",
}
V1_SCRIPTS: dict[str, tuple[bytes, ...]] = {
    "bad magic": (b"  V2",),
    "unknown": (b"  V1", b"NOPE\n"),
    "ping anonymous": (b"  V1", b"PING\n"),
    "register first": (b"  V1", b"REGISTER t\n"),
    "identify": (b"  V1", identify_v1(**PEER)),
    "identify missing": (b"  V1", identify_v1(broadcast_address="x", tcp_port=1)),
    "identify bad json": (b"  V1", b"IDENTIFY\n\x00\x00\x00\x02{x"),
    "identify twice": (b"  V1", identify_v1(**PEER), identify_v1(**PEER)),
    "register": (b"  V1", identify_v1(**PEER), b"REGISTER t c\n", b"REGISTER t\n", b"PING\n"),
    "register none": (b"  V1", identify_v1(**PEER), b"REGISTER\n"),
    "register bad": (b"  V1", identify_v1(**PEER), b"REGISTER t! c\n"),
    "register bad channel": (b"  V1", identify_v1(**PEER), b"REGISTER t c!\n"),
    "unregister": (b"  V1", identify_v1(**PEER), b"UNREGISTER t c\n", b"UNREGISTER t\n"),
    "trailing spaces": (b"  V1", b"  PING  \r\n"),
}


@pytest.mark.parametrize("name", list(V1_SCRIPTS))
async def test_lookupd_tcp_protocol(
    lookupds: tuple[NsqlookupdProcess, ThreadedEmbeddedLookupd], name: str
) -> None:
    script = V1_SCRIPTS[name]
    real, embedded = lookupds
    expected = await transcript_v1(real.tcp_address, *script)
    assert await transcript_v1(embedded.tcp_address, *script) == expected


async def test_inactive_producers_are_filtered(make_lookupd: Callable[..., Any]) -> None:
    lookupd = make_lookupd(inactive_producer_timeout=1000)
    nsqd = start_embedded(lookupd_tcp_addresses=[lookupd.tcp_address])
    try:
        await http(nsqd, "POST", "/topic/create", params={"topic": "idle"})
        await wait_for(
            lambda: get(lookupd, "/lookup", topic="idle"),
            until=lambda r: len(r[1].get("producers", [])) == 1,
        )
        # no PING within 1 s: filtered from /lookup and /nodes, the topic stays listed
        await wait_for(
            lambda: get(lookupd, "/lookup", topic="idle"), until=lambda r: r[1]["producers"] == []
        )
        assert (await get(lookupd, "/nodes"))[1] == {"producers": []}
        assert (await get(lookupd, "/topics"))[1] == {"topics": ["idle"]}
    finally:
        nsqd.stop()


async def test_pings_keep_an_embedded_nsqd_active(make_lookupd: Callable[..., Any]) -> None:
    lookupd = make_lookupd(inactive_producer_timeout=1500)
    nsqd = start_embedded(lookupd_tcp_addresses=[lookupd.tcp_address], lookupd_ping_interval=200)
    try:
        await http(nsqd, "POST", "/topic/create", params={"topic": "alive"})

        async def pings() -> int:
            return int(lookupd.logs().count("pinged"))

        await wait_for(pings, until=lambda n: n >= 12)  # over 2 s, more than the inactivity window
        assert len((await get(lookupd, "/lookup", topic="alive"))[1]["producers"]) == 1
    finally:
        nsqd.stop()


async def test_channels_known_to_lookupd_are_precreated(
    lookupds: tuple[NsqlookupdProcess, ThreadedEmbeddedLookupd],
) -> None:
    real_l, _ = lookupds
    await http(real_l, "POST", "/channel/create", params={"topic": "pre", "channel": "known"})
    await http(
        real_l, "POST", "/channel/create", params={"topic": "pre", "channel": "skip#ephemeral"}
    )
    seen = []
    for start in (start_real, start_embedded):
        nsqd = start(lookupd_tcp_addresses=[real_l.tcp_address])
        try:
            real_l.wait_for_nodes([nsqd.tcp_address])
            response = await http(nsqd, "POST", "/pub", params={"topic": "pre"}, content=b"x")
            assert response.status_code == 200
            channel = await channel_stats(nsqd, "pre", "known")
            seen.append((channel or {}).get("depth"))
            seen.append(await channel_stats(nsqd, "pre", "skip#ephemeral"))
        finally:
            nsqd.stop()
    assert seen == [1, None, 1, None]
