"""nsqclient.aio.Writer against real nsqd: acknowledged means stored, never a silent loss, never a
hang, bounded memory, typed errors, asyncnsq compatibility."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nsqclient.aio import Writer
from nsqclient.aio.connection import Connection, ConnectionState
from nsqclient.compat import create_writer
from nsqclient.errors import (
    AuthRequiredError,
    BadMessageError,
    ClosedError,
    ConfigError,
    ConnectError,
    ConnectionClosedError,
    EmptyMessageError,
    InvalidArgumentError,
    InvalidBodyTypeError,
    InvalidTopicError,
    MessageTooLargeError,
    NoConnectionsError,
    NSQTimeoutError,
    ServerAuthError,
    TLSError,
    TransportError,
)
from nsqclient.protocol import commands
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import NsqCluster, NsqdProcess, free_port

from .conftest import DEADLINE, Stats, consume, frozen, unique, wait_for

pytestmark = pytest.mark.timeout(60)

# quick background reconnects keep the tests short; the defaults are 1 s .. 60 s
FAST_RECONNECT = {"reconnect_delay": 50, "max_reconnect_delay": 300}


def only_connection(writer: Writer) -> Connection:
    [conn] = writer.connections
    return conn


@pytest.fixture
def track_max() -> Iterator[Callable[[Callable[[], int]], list[int]]]:
    """Sample a value once per event-loop iteration; ``result[0]`` is the largest seen."""
    handles: list[asyncio.Handle] = []

    def start(probe: Callable[[], int]) -> list[int]:
        loop = asyncio.get_running_loop()
        seen = [probe()]

        def sample() -> None:
            seen[0] = max(seen[0], probe())
            handles.append(loop.call_soon(sample))

        handles.append(loop.call_soon(sample))
        return seen

    yield start
    for handle in handles:
        handle.cancel()


# ---------------------------------------------------------------- acknowledged means stored


async def test_pub_mpub_dpub_resolve_once_nsqd_stored_them(nsqd: NsqdProcess, stats: Stats) -> None:
    topic, channel = unique(), unique("c")
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.pub(topic, b"bytes")  # creates the topic
        assert await stats.message_count(nsqd, topic) == 1  # acknowledged => in nsqd, no wait
        await stats.http(nsqd).create_channel(topic, channel)

        await writer.pub(topic, "str")
        await writer.pub(topic, bytearray(b"bytearray"))
        await writer.pub(topic, memoryview(b"memoryview"))
        assert await stats.message_count(nsqd, topic) == 4

        await writer.mpub(topic, [b"a", b"b", "c"])  # a list
        await writer.mpub(topic, (b"d", b"e"))  # a tuple
        await writer.mpub(topic, (b for b in [b"f", b"g"]))  # any iterable
        await writer.mpub(topic, [b"h"])  # one body, in a list
        assert await stats.message_count(nsqd, topic) == 4 + 3 + 2 + 2 + 1

        await writer.dpub(topic, 60_000, b"later")
        assert await stats.message_count(nsqd, topic) == 13

        async def settled() -> dict[str, Any] | None:
            chan = await stats.channel(nsqd, topic, channel)
            return chan if chan["message_count"] == 13 and chan["deferred_count"] == 1 else None

        # the topic kept "bytes" until the channel existed; the DPUB is held back
        chan = await wait_for(settled, what="13 copied to the channel, 1 of them deferred")
        assert chan["depth"] == 12
        assert writer.stats()["published"] == 13 == writer.stats()["published"]
        assert writer.stats()["failed"] == 0


async def test_invalid_input_is_refused_before_anything_is_sent(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address], max_msg_size=100, max_body_size=300) as writer:
        conn = only_connection(writer)
        with pytest.raises(InvalidTopicError):
            await writer.pub("bad topic!", b"x")
        with pytest.raises(InvalidTopicError):
            await writer.pub("x" * 65, b"x")
        with pytest.raises(InvalidBodyTypeError):
            await writer.pub(topic, 123)
        with pytest.raises(InvalidBodyTypeError):
            await writer.pub(topic, {"a": 1})
        with pytest.raises(EmptyMessageError):
            await writer.pub(topic, b"")
        with pytest.raises(MessageTooLargeError):
            await writer.pub(topic, b"x" * 101)
        with pytest.raises(InvalidBodyTypeError):
            await writer.mpub(topic, 123)
        with pytest.raises(InvalidBodyTypeError):
            await writer.mpub(topic, [b"ok", None])
        with pytest.raises(InvalidArgumentError):
            await writer.mpub(topic, [])
        with pytest.raises(MessageTooLargeError):
            await writer.mpub(topic, [b"x" * 100] * 3)  # each fits, the batch does not
        with pytest.raises(InvalidArgumentError):
            await writer.dpub(topic, -1, b"x")
        with pytest.raises(InvalidArgumentError):
            await writer.dpub(topic, 3_600_001, b"x")
        # nothing reached nsqd: no topic, and the connection never got an error frame
        assert (await stats.raw(nsqd))["topics"] == []
        assert writer.connections == [conn] and conn.is_open
        assert writer.outstanding == 0


# ---------------------------------------------------------------- never a hang


async def test_publish_to_a_frozen_nsqd_times_out(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address]) as writer:
        conn = only_connection(writer)
        with frozen(nsqd):
            with pytest.raises(NSQTimeoutError) as info:
                await asyncio.wait_for(writer.pub(topic, b"late", timeout=0.3), DEADLINE)
            assert info.value.address == nsqd.tcp_address
            assert writer.stats()["failed"] == 1 and writer.outstanding == 0
        # the late reply is consumed in order; the same connection keeps working
        await writer.pub(topic, b"after", timeout=DEADLINE)
        assert writer.connections == [conn]
        # the timed-out message may or may not have been stored: here nsqd did store it
        assert await stats.message_count(nsqd, topic) == 2


@pytest.mark.one_backend
async def test_frozen_nsqd_is_dropped_after_two_heartbeats_and_the_writer_recovers(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topic = unique()
    async with Writer(
        [nsqd.tcp_address], heartbeat_interval=1000, publish_timeout=60_000, **FAST_RECONNECT
    ) as writer:
        first = only_connection(writer)
        with frozen(nsqd):
            with pytest.raises(ConnectionClosedError) as info:
                await asyncio.wait_for(writer.pub(topic, b"never acknowledged"), DEADLINE)
            assert isinstance(info.value.__cause__, NSQTimeoutError)
            assert first.state is ConnectionState.CLOSED
        await writer.pub(topic, b"after recovery", timeout=DEADLINE)
        assert only_connection(writer) is not first


@pytest.mark.one_backend
async def test_idle_writer_answers_heartbeats(nsqd: NsqdProcess, stats: Stats) -> None:
    async with Writer([nsqd.tcp_address], heartbeat_interval=1000) as writer:
        conn = only_connection(writer)
        # nsqd drops a client silent for 2 intervals; 3 heartbeats later it is still connected
        await wait_for(lambda: conn.heartbeats_received >= 3, what="three heartbeats")
        await writer.pub(unique(), b"still connected")
        assert writer.connections == [conn] and conn.is_open
        producers = (await stats.raw(nsqd)).get("producers") or []
        assert len(producers) == 1


async def test_no_nsqd_reachable(nsqd_factory: Any, stats: Stats) -> None:
    """The startup rule: start() does not fail while nsqd is not up yet (it is retried in the
    background); a publish waits up to its timeout, then raises NoConnectionsError (a
    TransportError); once nsqd appears, publishing works without anything being done."""
    port = free_port()
    topic = unique()
    writer = Writer([f"127.0.0.1:{port}"], **FAST_RECONNECT)
    try:
        await writer.start()
        assert writer.is_started and not writer.is_closed and writer.connections == []

        with pytest.raises(NoConnectionsError) as info:
            await asyncio.wait_for(writer.pub(topic, b"x", timeout=0.3), DEADLINE)
        assert isinstance(info.value, TransportError)
        assert f"127.0.0.1:{port}" in str(info.value)
        assert isinstance(info.value.__cause__, ConnectError)
        assert info.value.__cause__.address == f"127.0.0.1:{port}"
        assert writer.stats()["failed"] == 1

        # nsqd appears on that port: the background reconnect finds it
        nsqd = nsqd_factory(tcp_port=port)
        await writer.pub(topic, b"y", timeout=DEADLINE)
        assert await stats.message_count(nsqd, topic) == 1
    finally:
        await writer.close()


async def test_publish_after_nsqd_died_raises_no_connections(nsqd: NsqdProcess) -> None:
    async with Writer([nsqd.tcp_address], **FAST_RECONNECT) as writer:
        conn = only_connection(writer)
        nsqd.kill()
        await asyncio.wait_for(conn.wait_closed(), DEADLINE)
        with pytest.raises(NoConnectionsError):
            await asyncio.wait_for(writer.pub(unique(), b"x", timeout=0.3), DEADLINE)
        with pytest.raises(NoConnectionsError):
            await writer.wait_ready(timeout=0.1)


async def test_writer_started_before_its_nsqd_comes_up_by_itself(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    """docker-compose order: the service starts, then nsqd; nothing needs restarting."""
    nsqd.stop()
    writer = Writer([nsqd.tcp_address], **FAST_RECONNECT)
    try:
        await writer.start()
        nsqd.start()
        topic = unique()
        await writer.pub(topic, b"x", timeout=DEADLINE)
        assert await stats.message_count(nsqd, topic) == 1
    finally:
        await writer.close()


# ---------------------------------------------------------------- errors from nsqd


async def test_error_frame_fails_exactly_its_publish_and_the_writer_reconnects(
    nsqd_factory: Any, stats: Stats
) -> None:
    nsqd = nsqd_factory(extra_args=["--max-msg-size=1000"])
    topic = unique()
    async with Writer([nsqd.tcp_address], max_msg_size=5000, **FAST_RECONNECT) as writer:
        first = only_connection(writer)
        results = await asyncio.gather(
            writer.pub(topic, b"ok"),
            writer.pub(topic, b"x" * 2000),
            *(writer.pub(topic, b"pipelined %d" % i) for i in range(5)),
            return_exceptions=True,
        )
        # nsqd executed the first, refused the second and closed; the five pipelined behind it
        # never ran, so they were sent again on a fresh connection: one failure, one error
        assert results[0] is None
        assert isinstance(results[1], BadMessageError), results[1]
        assert results[2:] == [None] * 5
        counts = writer.stats()
        assert counts["failed"] == 1 and counts["published"] == 6 and counts["resent"] == 5
        await writer.pub(topic, b"after reconnect", timeout=DEADLINE)
        assert only_connection(writer) is not first
    assert await stats.message_count(nsqd, topic) == 7


@pytest.fixture
def nsqd_tls_auth(nsqd_factory: Any, tls_certs: CertBundle, auth_server: Any) -> NsqdProcess:
    nsqd: NsqdProcess = nsqd_factory(
        tls_cert=tls_certs.server_cert,
        tls_key=tls_certs.server_key,
        tls_root_ca=tls_certs.ca_cert,
        auth_http_address=auth_server.address,
    )
    return nsqd


async def test_writer_over_tls_with_auth_and_compression(
    nsqd_tls_auth: NsqdProcess, tls_certs: CertBundle, stats: Stats
) -> None:
    topic = unique()
    options = {"tls_v1": True, "tls_ca_file": str(tls_certs.ca_cert), "deflate": True}
    async with Writer(nsqd_tls_auth.tcp_address, auth_secret="s3cret", **options) as writer:
        conn = only_connection(writer)
        resp = conn.identify_response
        assert resp is not None and resp.tls_v1 and resp.deflate and resp.auth_required
        await writer.pub(topic, b"secure")
        await writer.mpub(topic, [b"a", b"b"])
    assert await stats.message_count(nsqd_tls_auth, topic) == 3

    with pytest.raises(ServerAuthError):
        await Writer(nsqd_tls_auth.tcp_address, auth_secret="wrong", **options).start()
    with pytest.raises(AuthRequiredError):
        await Writer(nsqd_tls_auth.tcp_address, **options).start()
    wrong_ca = {**options, "tls_ca_file": str(tls_certs.other_ca_cert)}
    with pytest.raises(TLSError):
        await Writer(nsqd_tls_auth.tcp_address, auth_secret="s3cret", **wrong_ca).start()


# ---------------------------------------------------------------- several nsqd


async def test_publishes_spread_over_every_nsqd(nsqd_factory: Any, stats: Stats) -> None:
    nsqds = [nsqd_factory() for _ in range(3)]
    topic = unique()
    async with Writer([n.tcp_address for n in nsqds]) as writer:
        assert len(writer.connections) == 3
        await asyncio.gather(*(writer.pub(topic, b"%d" % i) for i in range(300)))
    counts = [await stats.message_count(n, topic) for n in nsqds]
    assert sum(counts) == 300
    assert all(c > 0 for c in counts), counts


async def test_writer_discovers_nsqd_through_lookupd(nsq_cluster: NsqCluster, stats: Stats) -> None:
    topic = unique()
    async with Writer(lookupd_http_addresses=[nsq_cluster.lookupd.http_address]) as writer:
        await wait_for(lambda: len(writer.connections) == 3, what="three nsqd discovered")
        await asyncio.gather(*(writer.pub(topic, b"%d" % i) for i in range(90)))
    counts = [await stats.message_count(n, topic) for n in nsq_cluster.nsqds]
    assert sum(counts) == 90 and all(c > 0 for c in counts), counts


@pytest.mark.slow
async def test_a_node_dies_mid_stream(
    nsqd_factory: Any, stats: Stats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL one of three nsqd while publishes stream: its pending publishes fail with a typed
    error, the rest goes to the others, every message a survivor acknowledged is in it, and the
    dead node is used again once it is back."""
    nsqds = [nsqd_factory() for _ in range(3)]
    victim = nsqds[1]
    topic, channel = unique(), unique("c")

    # Attribute each acknowledgement to the connection the publish went out on (only recorded:
    # the request itself is untouched), so acks can be compared against the node that gave them.
    sent_on: dict[asyncio.Task[Any], str] = {}
    real_request = Connection.request

    def recording_request(self: Connection, data: bytes, timeout: float | None = None) -> Any:
        task = asyncio.current_task()
        assert task is not None
        sent_on[task] = self.address
        return real_request(self, data, timeout)

    monkeypatch.setattr(Connection, "request", recording_request)

    acked: dict[str, set[int]] = {n.tcp_address: set() for n in nsqds}
    failures: list[tuple[int, str, BaseException]] = []
    seq = iter(range(10**9))
    stop = asyncio.Event()

    async def worker(writer: Writer) -> None:
        task = asyncio.current_task()
        assert task is not None
        while not stop.is_set():
            n = next(seq)
            try:
                await writer.pub(topic, b"%d" % n)
            except Exception as exc:
                failures.append((n, sent_on.get(task, "?"), exc))
            else:
                acked[sent_on[task]].add(n)

    def total() -> int:
        return sum(len(s) for s in acked.values())

    async with Writer(
        [n.tcp_address for n in nsqds], publish_timeout=30_000, **FAST_RECONNECT
    ) as writer:
        workers = [asyncio.create_task(worker(writer)) for _ in range(30)]
        try:
            await wait_for(lambda: total() >= 600, what="600 acknowledged publishes")
            victim_conn = next(c for c in writer.connections if c.address == victim.tcp_address)
            with frozen(victim):  # pile up publishes on it, then crash it
                await wait_for(lambda: victim_conn.pending_requests >= 5, what="pending on B")
                victim.kill()
            await asyncio.wait_for(victim_conn.wait_closed(), DEADLINE)
            after_kill = total()
            await wait_for(lambda: total() >= after_kill + 600, what="600 more acks")

            await asyncio.to_thread(victim.restart)
            await wait_for(lambda: len(writer.connections) == 3, what="reconnect to B")
            before = len(acked[victim.tcp_address])
            await wait_for(
                lambda: len(acked[victim.tcp_address]) >= before + 20, what="acks from B again"
            )
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*workers), DEADLINE)

    assert failures, "the publishes pending on the killed nsqd must fail"
    for n, address, exc in failures:
        assert isinstance(exc, ConnectionClosedError), (n, exc)
        assert address == victim.tcp_address == exc.address
    assert await stats.message_count(victim, topic) > 0  # its counters restarted at 0

    published: set[int] = set()
    for node in (nsqds[0], nsqds[2]):  # survivors: everything they acknowledged is there
        depth = await stats.message_count(node, topic)
        bodies = [int(m.body) for m in await consume(node, topic, channel, depth)]
        assert len(bodies) == len(set(bodies)) == depth
        assert acked[node.tcp_address] <= set(bodies)
        assert not published & set(bodies)  # no message went to two nodes
        published |= set(bodies)


# ---------------------------------------------------------------- bounded memory


async def test_max_pending_publishes_bounds_a_frozen_nsqd(
    nsqd: NsqdProcess, stats: Stats, track_max: Any
) -> None:
    topic = unique()
    n, calls, body = 20, 400, b"x" * 1000
    async with Writer([nsqd.tcp_address], max_pending_publishes=n) as writer:
        conn = only_connection(writer)
        peak = track_max(lambda: writer.outstanding)
        # bytes the process holds for nsqd: our write queue plus the transport's buffer
        buffered = track_max(
            lambda: (
                sum(map(len, conn._wbuf))
                + len(conn._wrest or b"")
                + conn._transport.get_write_buffer_size()
            )  # type: ignore[union-attr]
        )
        with frozen(nsqd):
            tasks = [asyncio.create_task(writer.pub(topic, body, timeout=30)) for _ in range(calls)]
            await wait_for(lambda: writer.outstanding == n, what="N publishes outstanding")
            await wait_for(lambda: len(writer._slot_waiters) == calls - n, what="callers waiting")
            assert not any(t.done() for t in tasks)
            assert conn.pending_requests == n
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
        assert peak[0] == n
        # never more than N publishes' bytes queued in the process for nsqd
        assert buffered[0] <= n * len(commands.pub(topic, body))
    assert await stats.message_count(nsqd, topic) == calls


async def test_max_pending_publishes_holds_while_no_connection(
    nsqd_factory: Any, stats: Stats, track_max: Any
) -> None:
    """Publishes waiting for a connection must not all rush out when one appears."""
    port = free_port()
    topic = unique()
    writer = Writer([f"127.0.0.1:{port}"], max_pending_publishes=5, **FAST_RECONNECT)
    try:
        peak = track_max(lambda: writer.outstanding)
        tasks = [asyncio.create_task(writer.pub(topic, b"%d" % i, timeout=30)) for i in range(50)]
        await wait_for(lambda: writer.is_started, what="the writer to start")
        nsqd = nsqd_factory(tcp_port=port)
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
        assert peak[0] <= 5
        assert await stats.message_count(nsqd, topic) == 50
    finally:
        await writer.close()


# ---------------------------------------------------------------- closing


async def _pending_on_frozen(writer: Writer, topic: str, count: int) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(writer.pub(topic, b"%d" % i, timeout=30)) for i in range(count)]
    await wait_for(lambda: writer.outstanding == count, what=f"{count} publishes outstanding")
    return tasks


@pytest.mark.parametrize("await_close", [False, True])
async def test_close_fails_pending_publishes_at_once(nsqd: NsqdProcess, await_close: bool) -> None:
    writer = Writer([nsqd.tcp_address])
    await writer.start()
    conn = only_connection(writer)
    with frozen(nsqd):
        tasks = await _pending_on_frozen(writer, unique(), 10)
        closing = writer.close()
        if await_close:
            await asyncio.wait_for(closing, DEADLINE)
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DEADLINE)
        assert all(isinstance(r, ConnectionClosedError) for r in results), results
        assert writer.is_closed and writer.outstanding == 0
        with pytest.raises(ClosedError):
            await writer.pub(unique(), b"x")
        await asyncio.wait_for(closing, DEADLINE)
        assert conn.state is ConnectionState.CLOSED


async def test_close_fails_pending_publishes_even_with_unsent_bytes(nsqd: NsqdProcess) -> None:
    """Unsent bytes make the transport linger until nsqd reads them; the publishes must not."""
    writer = Writer([nsqd.tcp_address], write_timeout=60_000)  # no rescue by the write timeout
    await writer.start()
    conn = only_connection(writer)
    body = bytes(1_000_000)
    with frozen(nsqd):
        tasks = [asyncio.create_task(writer.pub(unique(), body, timeout=60)) for _ in range(20)]
        await wait_for(lambda: not conn.writable, what="the socket buffers to fill up")
        closing = writer.close()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DEADLINE)
        assert all(isinstance(r, ConnectionClosedError) for r in results), results
    await asyncio.wait_for(closing, DEADLINE)


async def test_graceful_close_waits_for_outstanding_acks(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    writer = Writer([nsqd.tcp_address])
    await writer.start()
    with frozen(nsqd):
        tasks = await _pending_on_frozen(writer, topic, 10)
        closing = asyncio.create_task(writer.graceful_close(timeout=30))
        await wait_for(lambda: writer.is_closed, what="the writer to refuse publishes")
        with pytest.raises(ClosedError):
            await writer.pub(topic, b"too late")
    await asyncio.wait_for(closing, DEADLINE)
    assert [t.result() for t in tasks] == [None] * 10  # acknowledged, not failed
    assert await stats.message_count(nsqd, topic) == 10
    assert all(c.state is ConnectionState.CLOSED for c in writer.connections)


async def test_graceful_close_with_callers_waiting_for_a_slot(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    """The sent publishes are acknowledged; the ones not sent yet are refused; no stall."""
    topic = unique()
    writer = Writer([nsqd.tcp_address], max_pending_publishes=2)
    await writer.start()
    with frozen(nsqd):
        tasks = [asyncio.create_task(writer.pub(topic, b"%d" % i, timeout=30)) for i in range(6)]
        await wait_for(lambda: len(writer._slot_waiters) == 4, what="4 callers waiting")
        closing = asyncio.create_task(writer.graceful_close(timeout=40))
        await wait_for(lambda: writer.is_closed, what="closing")
    await asyncio.wait_for(closing, DEADLINE)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[:2] == [None, None]
    assert all(isinstance(r, ClosedError) for r in results[2:]), results
    assert await stats.message_count(nsqd, topic) == 2


async def test_async_context_manager(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    async with Writer(nsqd.tcp_address) as writer:
        assert writer.is_started
        await writer.pub(topic, b"x")
        conns = writer.connections
    assert writer.is_closed
    assert all(c.state is ConnectionState.CLOSED for c in conns)
    with pytest.raises(ClosedError):
        await writer.pub(topic, b"y")
    with pytest.raises(ClosedError):
        await writer.start()
    assert await stats.message_count(nsqd, topic) == 1


# ---------------------------------------------------------------- API


async def test_asyncnsq_readme_example_runs_unchanged(nsqd: NsqdProcess, stats: Stats) -> None:
    loop = asyncio.get_running_loop()

    async def go() -> Writer:  # the asyncnsq README producer, with nsqd's port
        writer = await create_writer(
            host="127.0.0.1",
            port=nsqd.tcp_port,
            heartbeat_interval=30000,
            feature_negotiation=True,
            tls_v1=False,
            snappy=False,
            deflate=False,
            deflate_level=0,
            loop=loop,
        )
        for i in range(100):
            await writer.pub("test_async_nsq", f"test_async_nsq:{i}")
            await writer.dpub("test_async_nsq", i * 1000, f"test_delay_async_nsq:{i}")
        return writer

    writer = await go()
    writer.close()
    assert await stats.message_count(nsqd, "test_async_nsq") == 200


async def test_create_writer_accepts_a_tcp_url(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    writer = await create_writer(host=f"tcp://{nsqd.tcp_address}")
    try:
        assert [c.address for c in writer.connections] == [nsqd.tcp_address]
        await writer.pub(topic, b"x")
    finally:
        await writer.close()
    assert await stats.message_count(nsqd, topic) == 1


async def test_publish_nowait_wait_ready_and_stats(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    writer = Writer([nsqd.tcp_address], max_pending_publishes=3)
    assert writer.publish_nowait(commands.pub(topic, b"x")) is None  # not started yet
    await writer.wait_ready()
    futures = [writer.publish_nowait(commands.pub(topic, b"%d" % i)) for i in range(4)]
    assert futures[3] is None  # no free slot: the caller must wait
    assert writer.outstanding == 3
    assert await asyncio.gather(*futures[:3]) == [b"OK"] * 3  # type: ignore[misc]
    assert writer.outstanding == 0
    with pytest.raises(InvalidTopicError):
        await writer.pub("bad topic", b"x")
    await writer.mpub(topic, [b"a", b"b"])
    snapshot = writer.stats()
    assert snapshot["published"] == 5 and snapshot["failed"] == 0
    assert snapshot["outstanding"] == 0
    (conn,) = writer.connections
    assert snapshot["connections"] == [
        {
            "address": nsqd.tcp_address,
            "connection_id": conn.connection_id,
            "state": "connected",
            "pending": 0,
            "buffered_bytes": 0,
        }
    ]
    assert "outstanding=0" in repr(writer)
    await writer.close()
    assert await stats.message_count(nsqd, topic) == 5


async def test_address_forms(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    forms: list[Any] = [
        nsqd.tcp_address,
        f"tcp://{nsqd.tcp_address}",
        ("127.0.0.1", nsqd.tcp_port),
        [("127.0.0.1", nsqd.tcp_port)],
        [nsqd.tcp_address, f"127.0.0.1:{nsqd.tcp_port}"],  # duplicates collapse
    ]
    for form in forms:
        async with Writer(form) as writer:
            assert [c.address for c in writer.connections] == [nsqd.tcp_address], form
            await writer.pub(topic, b"x")
    assert await stats.message_count(nsqd, topic) == len(forms)


@pytest.mark.parametrize(
    "options",
    [
        {"snappy": True, "deflate": True},
        {"heartbeat_interval": 500},  # nsqd's range is 1000..60000 (or -1 / 0)
        {"msg_timeout": 10},
        {"max_pending_publishes": 0},
        {"publish_timeout": 0.5},  # milliseconds: 0.5 ms is refused with a hint
        {"no_such_option": 1},
    ],
)
def test_bad_options_are_refused_when_the_writer_is_made(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Writer("127.0.0.1:4150", **options)


def test_bad_addresses_are_refused_when_the_writer_is_made() -> None:
    bad: Any
    for bad in ["127.0.0.1:http", "127.0.0.1:70000", [("127.0.0.1", 4150, 1)], ":4150", [None]]:
        with pytest.raises(ConfigError):
            Writer(bad)
