"""The FaultProxy itself: forwarding, each fault and its undo, frame damage, counters, threads.

The upstream here is a tiny TCP server of the test's own (what it received, and a way to send
to each client), because these tests are about the proxy's bytes, not about NSQ; the frame
cursor gets property tests over arbitrary chunkings. The proxy in front of real nsqd, with the
library's clients, is exercised by the fault suites (tests/aio/test_faults_*.py, tests/sync).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import time
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqclient.protocol.frames import encode_frame, encode_response
from nsqclient.testing import FaultProxy
from nsqclient.testing.faults.frames import FrameCursor, FrameOp

DEADLINE = 5.0


class Upstream:
    """Accepts connections; remembers each writer and everything it received."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.received = bytearray()
        self.got_data = asyncio.Event()
        self.got_client = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.got_client.set()
        while data := await reader.read(65536):
            self.received += data
            self.got_data.set()

    async def wait_received(self, n: int) -> bytes:
        async with asyncio.timeout(DEADLINE):
            while len(self.received) < n:
                self.got_data.clear()
                await self.got_data.wait()
        return bytes(self.received)

    async def wait_clients(self, n: int) -> None:
        async with asyncio.timeout(DEADLINE):
            while len(self.writers) < n:
                self.got_client.clear()
                await self.got_client.wait()

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    server = Upstream()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def proxy(upstream: Upstream) -> AsyncIterator[FaultProxy]:
    assert upstream.server is not None
    port = upstream.server.sockets[0].getsockname()[1]
    async with FaultProxy(("127.0.0.1", port)) as p:
        yield p


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(proxy.host, proxy.port)


async def read_exactly(reader: asyncio.StreamReader, n: int) -> bytes:
    return await asyncio.wait_for(reader.readexactly(n), DEADLINE)


# ---------------------------------------------------------------- forwarding


async def test_forwards_both_ways_and_counts(proxy: FaultProxy, upstream: Upstream) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"  V2hello")
    assert await upstream.wait_received(9) == b"  V2hello"
    await upstream.wait_clients(1)
    upstream.writers[0].write(encode_response(b"OK"))
    assert await read_exactly(reader, 10) == encode_response(b"OK")
    counters = proxy.counters()
    assert counters.connections_accepted == 1 and proxy.connections == 1
    assert counters.bytes_up == 9 and counters.bytes_down == 10 and counters.frames_down == 1
    writer.close()


@pytest.mark.parametrize("rst", [False, True])
async def test_cut_closes_every_connection_with_fin_or_rst(
    proxy: FaultProxy, upstream: Upstream, rst: bool
) -> None:
    conns = [await connect(proxy) for _ in range(2)]
    for _, writer in conns:
        writer.write(b"x")
    await upstream.wait_received(2)
    assert proxy.cut(rst=rst) == 2
    for reader, writer in conns:
        if rst:
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(1), DEADLINE)
        else:
            assert await asyncio.wait_for(reader.read(1), DEADLINE) == b""
        writer.close()
    assert proxy.counters().connections_cut == 2
    # new connections are accepted as usual
    reader, writer = await connect(proxy)
    writer.write(b"again")
    assert (await upstream.wait_received(7)).endswith(b"again")
    writer.close()


async def test_stall_forwards_nothing_until_undone(proxy: FaultProxy, upstream: Upstream) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"a")
    await upstream.wait_received(1)
    with proxy.stall():
        writer.write(b"b")
        upstream.writers[0].write(b"c")
        with pytest.raises(TimeoutError):  # nothing gets through, either way
            await asyncio.wait_for(reader.read(1), 0.3)
        assert bytes(upstream.received) == b"a"
    assert await upstream.wait_received(2) == b"ab"
    assert await read_exactly(reader, 1) == b"c"
    writer.close()


async def test_stall_of_new_connections(proxy: FaultProxy, upstream: Upstream) -> None:
    fault = proxy.stall(new_connections=True)
    _reader, writer = await connect(proxy)  # the kernel accepts: a black hole, not a refusal
    writer.write(b"later")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(upstream.wait_received(5), 0.3)
    fault.undo()
    assert await upstream.wait_received(5) == b"later"
    writer.close()


async def test_slow_limits_bytes_per_second(proxy: FaultProxy, upstream: Upstream) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"x")
    await upstream.wait_clients(1)
    with proxy.slow(down=2000):
        start = time.monotonic()
        upstream.writers[0].write(b"y" * 1000)
        assert await read_exactly(reader, 1000) == b"y" * 1000
        elapsed = time.monotonic() - start
    assert elapsed > 0.3  # 1000 bytes at 2000 B/s: about 0.5 s (a lower bound, with margin)
    writer.close()


async def test_drop_discards_the_next_bytes_in_one_direction(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    _reader, writer = await connect(proxy)
    writer.write(b"x")
    await upstream.wait_clients(1)
    await upstream.wait_received(1)
    with proxy.drop(3, "up"):
        writer.write(b"abcdef")
        assert await upstream.wait_received(4) == b"xdef"
    assert proxy.counters().bytes_dropped == 3
    writer.close()


@pytest.mark.parametrize("mode", ["refuse", "reset", "close"])
async def test_refuse_turns_new_connections_away_until_undone(
    proxy: FaultProxy, upstream: Upstream, mode: str
) -> None:
    _reader, writer = await connect(proxy)  # already open: left alone
    with proxy.refuse(mode):  # type: ignore[arg-type]
        if mode == "refuse":
            with pytest.raises(ConnectionRefusedError):
                await connect(proxy)
        else:
            r2, w2 = await connect(proxy)
            try:
                data = await asyncio.wait_for(r2.read(1), DEADLINE)
                assert data == b"" and mode == "close"
            except ConnectionResetError:
                assert mode == "reset"
            w2.close()
        writer.write(b"still")
        assert await upstream.wait_received(5) == b"still"
    _r3, w3 = await connect(proxy)
    w3.write(b"new")
    assert (await upstream.wait_received(8)).endswith(b"new")
    assert proxy.counters().connections_refused == (0 if mode == "refuse" else 1)
    writer.close()
    w3.close()


# ---------------------------------------------------------------- frame damage


async def test_frame_damage_toward_the_client(proxy: FaultProxy, upstream: Upstream) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"  V2")
    await upstream.wait_clients(1)
    server = upstream.writers[0]
    identify = encode_response(b'{"max_rdy_count":2500}')
    server.write(identify)
    assert await read_exactly(reader, len(identify)) == identify
    ok = encode_response(b"OK")
    heartbeat = encode_response(b"_heartbeat_")

    with proxy.change_frame_size(+1000, frame="response"):
        server.write(heartbeat + ok)  # heartbeats match only frame="heartbeat"
        got = await read_exactly(reader, len(heartbeat) + len(ok))
        assert got == heartbeat + struct.pack(">i", 6 + 1000) + ok[4:]
    proxy.duplicate_next_frame()
    server.write(ok)
    assert await read_exactly(reader, 2 * len(ok)) == ok + ok
    proxy.drop_next_frame()
    proxy.replace_next_frame(b"KO")
    server.write(ok + ok + ok)
    assert await read_exactly(reader, 2 * len(ok)) == encode_response(b"KO") + ok
    assert proxy.inject_frame(1, b"E_INVALID injected") == 1
    assert await read_exactly(reader, 26) == encode_frame(1, b"E_INVALID injected")
    assert proxy.inject_bytes(b"\xff\xfe") == 1
    assert await read_exactly(reader, 2) == b"\xff\xfe"
    counters = proxy.counters()
    assert (counters.frames_resized, counters.frames_duplicated, counters.frames_dropped) == (
        1,
        1,
        1,
    )
    assert counters.frames_replaced == 1 and counters.frames_injected == 2
    writer.close()


async def test_an_undone_frame_operation_releases_what_it_held(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"  V2")
    await upstream.wait_clients(1)
    server = upstream.writers[0]
    server.write(encode_response(b"{}"))
    await read_exactly(reader, 10)
    fault = proxy.drop_next_frame(frame="error")
    ok = encode_response(b"OK")
    server.write(ok + ok[:5])  # a whole frame passes; a partial one waits for its end
    assert await read_exactly(reader, len(ok)) == ok
    await asyncio.sleep(0.05)  # let the partial frame reach the proxy (no event to wait on)
    fault.undo()
    assert await read_exactly(reader, 5) == ok[:5]
    writer.close()


async def test_tls_or_compression_makes_a_connection_opaque(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    _reader, writer = await connect(proxy)
    body = b'{"snappy":true}'
    writer.write(b"  V2IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    await upstream.wait_received(4 + 9 + 4 + len(body))
    proxy.drop_next_frame()
    assert proxy.inject_frame(0, b"OK") == 0
    assert proxy.counters().frame_ops_skipped == 2
    writer.close()


_FRAMES = st.lists(
    st.tuples(st.sampled_from([0, 1, 2]), st.binary(max_size=40)), min_size=1, max_size=12
)


@settings(max_examples=200, deadline=None)
@given(frames=_FRAMES, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_cursor_forwards_unchanged_and_counts_frames_over_any_chunking(
    frames: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(encode_frame(k, p) for k, p in frames)
    cursor = FrameCursor()
    out = b"".join(cursor.process(chunk) for chunk in _chunks(stream, cuts))
    assert out == stream and cursor.frames == len(frames) and cursor.at_boundary


@settings(max_examples=200, deadline=None)
@given(
    frames=_FRAMES,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    arm_after=st.integers(min_value=0, max_value=400),
)
def test_cursor_drops_exactly_the_next_whole_frame_after_arming(
    frames: list[tuple[int, bytes]], cuts: list[int], arm_after: int
) -> None:
    stream = b"".join(encode_frame(k, p) for k, p in frames)
    arm_after = min(arm_after, len(stream))
    cursor = FrameCursor()
    out = cursor.process(stream[:arm_after])
    cursor.ops.append(FrameOp("drop"))
    out += b"".join(cursor.process(chunk) for chunk in _chunks(stream[arm_after:], cuts))
    # the frame dropped is the first one that starts at or after the arming point
    starts, pos = [], 0
    for k, p in frames:
        starts.append((pos, len(encode_frame(k, p))))
        pos += len(encode_frame(k, p))
    later = [(s, n) for s, n in starts if s >= arm_after]
    if later:
        s, n = later[0]
        assert out == stream[:s] + stream[s + n :]
    else:
        assert out == stream and cursor.ops


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(data)})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


# ---------------------------------------------------------------- on its own thread


def test_threaded_proxy_from_blocking_code() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    with FaultProxy(("127.0.0.1", port)) as proxy:
        client = socket.create_connection((proxy.host, proxy.port), timeout=DEADLINE)
        server, _ = listener.accept()
        server.settimeout(DEADLINE)
        client.sendall(b"ping")
        assert server.recv(4) == b"ping"
        server.sendall(b"pong")
        assert client.recv(4) == b"pong"
        assert proxy.cut(rst=True) == 1
        with pytest.raises(ConnectionResetError):
            client.recv(1)
        assert proxy.counters().connections_cut == 1
        client.close()
        server.close()
    listener.close()
    assert proxy.connections == 0


async def test_heal_undoes_every_fault_at_once(proxy: FaultProxy, upstream: Upstream) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"  V2")
    await upstream.wait_received(4)
    proxy.stall()
    proxy.slow(up=10)
    proxy.drop(100, "up")
    proxy.drop_next_frame()
    proxy.refuse()
    with pytest.raises(ConnectionRefusedError):
        await connect(proxy)
    proxy.heal()
    writer.write(b"healed")
    assert await upstream.wait_received(10) == b"  V2healed"  # full speed, nothing dropped
    upstream.writers[0].write(encode_response(b"OK"))
    assert await read_exactly(reader, 10) == encode_response(b"OK")  # no frame dropped
    _r2, w2 = await asyncio.wait_for(connect(proxy), DEADLINE)  # accepting again
    w2.close()
    writer.close()
