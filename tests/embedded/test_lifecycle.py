"""Running the embedded servers: in the test's own loop, on a thread, restart/kill/stop (what
survives, compared with ``NsqdProcess`` on real nsqd), logs, and ``python -m nsqclient.testing``."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import pytest

from nsqclient.testing.daemons import NsqDaemonError, NsqdProcess
from nsqclient.testing.embedded import (
    EmbeddedLookupd,
    EmbeddedNsqd,
    ThreadedEmbeddedCluster,
    ThreadedEmbeddedLookupd,
    ThreadedEmbeddedNsqd,
)
from tests.rawconn_support import Closed, RawClient
from tests.support import wait_for

from .conftest import start_embedded, start_real
from .support import channel_stats, http, stats

pytestmark = pytest.mark.timeout(90)


async def test_runs_inside_the_current_loop() -> None:
    async with (
        EmbeddedLookupd() as lookupd,
        EmbeddedNsqd(
            lookupd_tcp_addresses=[lookupd.tcp_address], lookupd_ping_interval=100
        ) as nsqd,
    ):
        sub = await RawClient.connect(nsqd.tcp_address)
        await sub.setup()
        await sub.sub("loop", "c", 1)
        response = await http(
            nsqd, "POST", "/pub", params={"topic": "loop"}, content=b"in the same loop"
        )
        assert response.text == "OK"
        assert bytes((await sub.message()).body) == b"in the same loop"
        lookup = await wait_for(
            lambda: http(lookupd, "GET", "/lookup", params={"topic": "loop"}),
            until=lambda r: r.status_code == 200 and r.json()["producers"],
        )
        producer = lookup.json()["producers"][0]
        assert producer["tcp_port"] == nsqd.tcp_port
        assert producer["broadcast_address"] == "127.0.0.1"
        await sub.close()
    assert not nsqd.running and "TCP: listening" in nsqd.logs()


async def _scenario(server: Any) -> None:
    """Topic with a paused channel, an ephemeral one, a message in flight, one deferred."""
    sub = await RawClient.connect(server.tcp_address)
    await sub.setup(heartbeat_interval=60_000)
    await sub.sub("keep", "c", 2)
    eph = await RawClient.connect(server.tcp_address)
    await eph.setup(heartbeat_interval=60_000)
    await eph.sub("keep", "e#ephemeral", 0)
    for body in (b"1", b"2", b"3"):
        await http(server, "POST", "/pub", params={"topic": "keep"}, content=body)
    _first, second = await sub.messages(2)
    sub.send(b"REQ " + second.id + b" 60000\n")
    await sub.sync()
    await http(server, "POST", "/channel/pause", params={"topic": "keep", "channel": "c"})
    await http(server, "POST", "/topic/create", params={"topic": "other"})
    await http(server, "POST", "/topic/create", params={"topic": "gone#ephemeral"})
    for client in (sub, eph):
        client.writer.transport.abort()  # the server's shutdown must not wait for us


async def _survivors(server: Any) -> dict[str, Any]:
    doc = await stats(server)
    view: dict[str, Any] = {
        t["topic_name"]: {c["channel_name"]: (c["depth"], c["paused"]) for c in t["channels"]}
        for t in doc["topics"] or []
    }
    attempts: list[int] = []
    if (await channel_stats(server, "keep", "c") or {}).get("depth"):
        await http(server, "POST", "/channel/unpause", params={"topic": "keep", "channel": "c"})
        sub = await RawClient.connect(server.tcp_address)
        await sub.setup()
        await sub.sub("keep", "c", 10)
        attempts = sorted(m.attempts for m in await sub.messages(view["keep"]["c"][0]))
        await sub.close()
    view["attempts"] = attempts
    return view


async def _persisted(real: NsqdProcess) -> None:
    """Wait until real nsqd wrote its metadata (topics, pause flags) to disk."""

    async def metadata() -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((real.data_dir / "nsqd.dat").read_text())
        except (OSError, ValueError):
            return {}
        return data

    await wait_for(
        metadata,
        until=lambda m: any(
            c.get("paused") for t in m.get("topics") or [] for c in t.get("channels") or []
        ),
    )


async def test_restart_keeps_topics_and_messages_like_nsqd() -> None:
    views = []
    for start in (start_real, start_embedded):
        server: Any = start()
        try:
            ports = (server.tcp_port, server.http_port)
            await _scenario(server)
            server.restart()
            assert (server.tcp_port, server.http_port) == ports
            views.append(await _survivors(server))
        finally:
            server.stop()
    assert views[1] == views[0]
    # all three had been delivered once (one deferred, two in flight): each comes back
    assert views[0]["keep"] == {"c": (3, True)} and views[0]["attempts"] == [2, 2, 2]


async def test_kill_keeps_topics_but_loses_messages_like_nsqd() -> None:
    views = []
    for start in (start_real, start_embedded):
        server: Any = start()
        try:
            await _scenario(server)
            if isinstance(server, NsqdProcess):
                await _persisted(server)
            server.kill()
            server.restart()
            views.append(await _survivors(server))
        finally:
            server.stop()
    assert views[1] == views[0]
    assert views[0]["keep"] == {"c": (0, True)}


async def test_stop_then_start_is_a_fresh_nsqd() -> None:
    views = []
    for start in (start_real, start_embedded):
        server: Any = start()
        try:
            await _scenario(server)
            server.stop()
            server.start()
            views.append(await _survivors(server))
        finally:
            server.stop()
    assert views[1] == views[0] == {"attempts": []}


async def test_kill_drops_connections_abruptly() -> None:
    server = ThreadedEmbeddedNsqd().start()
    client = await RawClient.connect(server.tcp_address)
    await client.setup()
    await client.sub("k", "c", 1)
    server.kill()
    assert not server.running
    with pytest.raises(Closed):
        await client.event()
    server.stop()  # idempotent after kill


def test_threaded_wrappers_are_context_managers() -> None:
    with (
        ThreadedEmbeddedLookupd() as lookupd,
        ThreadedEmbeddedNsqd(lookupd_tcp_addresses=[lookupd.tcp_address]) as nsqd,
    ):
        mark = nsqd.log_size()
        nsqd.pub("sync_api", b"hello")
        assert nsqd.stats("sync_api")["topics"][0]["depth"] == 1
        assert "TOPIC(sync_api): created" in nsqd.logs(since=mark)
        assert "TCP: listening" not in nsqd.logs(since=mark)
        assert nsqd.http_post("/topic/create", params={"topic": "x"}) == b""
        with pytest.raises(NsqDaemonError, match="404"):
            nsqd.http_post("/topic/delete", params={"topic": "missing"})
        lookupd.wait_for_nodes([nsqd.tcp_address])
        assert lookupd.lookup("sync_api")["producers"][0]["tcp_port"] == nsqd.tcp_port
        assert "LOOKUPD" in nsqd.logs() and "IDENTIFY" in lookupd.logs()
        assert repr(nsqd).startswith("<ThreadedEmbeddedNsqd tcp=127.0.0.1:")
    assert not nsqd.running and not lookupd.running


def test_blocking_call_from_the_server_thread_is_refused() -> None:
    with ThreadedEmbeddedNsqd() as nsqd:

        async def reenter() -> None:
            nsqd.restart()

        with pytest.raises(RuntimeError, match="own thread"):
            nsqd.run(reenter())


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="max-deflate-level"):
        EmbeddedNsqd(max_deflate_level=10)
    with pytest.raises(ValueError, match="without TLS key and cert"):
        EmbeddedNsqd(tls_required=True)
    with pytest.raises(TypeError):
        EmbeddedNsqd(no_such_option=1)


async def _line(stream: asyncio.StreamReader) -> str:
    return (await asyncio.wait_for(stream.readline(), 20)).decode().strip()


async def test_command_line_runs_until_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nsqclient.testing",
        "--tcp-address",
        "127.0.0.1:0",
        "--http-address",
        "127.0.0.1:0",
        "--lookupd",
        "--lookupd-tcp-listen",
        "127.0.0.1:0",
        "--lookupd-http-listen",
        "127.0.0.1:0",
        "--msg-timeout",
        "2s",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        lines = [await _line(proc.stdout) for _ in range(4)]
        addresses = dict(line.rsplit(None, 1) for line in lines)
        assert (await _line(proc.stdout)).startswith("ready")
        nsqd_tcp = addresses["nsqd TCP"]
        client = await RawClient.connect(nsqd_tcp)
        reply = await client.identify(feature_negotiation=True)
        assert isinstance(reply, dict) and reply["msg_timeout"] == 2000
        await client.close()

        class Lookupd:
            http_address = addresses["nsqlookupd HTTP"]

        await wait_for(
            lambda: http(Lookupd, "GET", "/nodes"), until=lambda r: len(r.json()["producers"]) == 1
        )
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert await _line(proc.stdout) == "stopping"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_shipped_fixtures(
    embedded_cluster: ThreadedEmbeddedCluster,
    embedded_nsqd: ThreadedEmbeddedNsqd,
    embedded_lookupd: ThreadedEmbeddedLookupd,
) -> None:
    assert len(embedded_cluster.nsqd_tcp_addresses) == 3
    nodes = embedded_cluster.lookupd.nodes()
    assert sorted(f"127.0.0.1:{n['tcp_port']}" for n in nodes) == sorted(
        embedded_cluster.nsqd_tcp_addresses
    )
    assert embedded_nsqd.running and embedded_lookupd.running
    assert (await http(embedded_nsqd, "GET", "/ping")).text == "OK"


def test_nsqd_flags_are_understood() -> None:
    opts = EmbeddedNsqd(
        extra_args=[
            "--msg-timeout=1m30s",
            "--max-rdy-count",
            "7",
            "--snappy=false",
            "--lookupd-tcp-address=127.0.0.1:1",
            "--data-path=/nowhere",
            "--max-req-timeout=1.5s",
            "--log-level=warn",
        ],
        lookupd_tcp_addresses=["127.0.0.1:2"],
        tcp_port=4150,
        data_dir="/ignored",
    ).options
    assert (opts.msg_timeout, opts.max_rdy_count, opts.snappy, opts.max_req_timeout) == (
        90_000,
        7,
        False,
        1500,
    )
    assert opts.lookupd_tcp_addresses == ("127.0.0.1:2", "127.0.0.1:1")
    assert opts.tcp_address == "127.0.0.1:4150" and opts.log_level == 3
    with pytest.raises(ValueError, match="not supported"):
        EmbeddedNsqd(extra_args=["--no-such-flag=1"])
    lookupd = EmbeddedLookupd(
        extra_args=[
            "--inactive-producer-timeout=2s",
            "--tombstone-lifetime",
            "1s",
            "--broadcast-address=example",
        ]
    )
    assert (lookupd.inactive_producer_timeout, lookupd.tombstone_lifetime) == (2.0, 1.0)
    assert lookupd.broadcast_address == "example"
