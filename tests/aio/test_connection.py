"""nsqclient.aio.Connection against real nsqd: negotiation, TLS, compression, AUTH, liveness,
reply matching, error frames, CLS and write coalescing."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from nsqclient.aio.connection import ConnectionState
from nsqclient.errors import (
    AuthError,
    AuthRequiredError,
    BadMessageError,
    ClosedError,
    ConfigError,
    ConnectError,
    ConnectionClosedError,
    FinFailedError,
    InvalidError,
    NSQTimeoutError,
    ServerAuthError,
    TLSError,
)
from nsqclient.protocol import commands
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.support import wait_for

from .conftest import (
    DEADLINE,
    Collector,
    Stats,
    connected,
    consume,
    frozen,
    make_connection,
    unique,
)

pytestmark = pytest.mark.timeout(60)
# negotiates snappy, so it imports cramjam (on 3.13t that turns the GIL on; the free-threaded
# CI step deselects these)
SNAPPY = pytest.mark.snappy


def pub(topic: str, body: bytes) -> bytes:
    return commands.pub(topic, body)


# ---------------------------------------------------------------- IDENTIFY


@pytest.mark.slow
@pytest.mark.one_backend
async def test_identify_reply_is_exposed_and_honoured(nsqd_factory: Any, stats: Stats) -> None:
    nsqd = nsqd_factory(extra_args=["--max-rdy-count=200"])
    topic, channel = unique(), unique("c")
    owner = Collector(auto_fin=False)
    async with connected(
        nsqd,
        owner,
        client_id="conn-test",
        user_agent="nsqclient-tests/1",
        msg_timeout=1000,
        output_buffer_timeout=100,
        heartbeat_interval=5000,
    ) as conn:
        resp = conn.identify_response
        assert resp is not None and resp.negotiated
        assert resp.max_rdy_count == 200 == conn.max_rdy_count
        assert resp.msg_timeout == 1000
        assert resp.output_buffer_timeout == 100
        assert not resp.tls_v1 and not resp.snappy and not resp.deflate

        await conn.subscribe(topic, channel)
        assert conn.state is ConnectionState.SUBSCRIBED
        # above the negotiated maximum: clamped, otherwise nsqd would close with E_INVALID
        conn.send_rdy(1000)
        assert conn.rdy == 200

        async def client() -> dict[str, Any] | None:
            clients = await stats.clients(nsqd)
            return next((c for c in clients if c["client_id"] == "conn-test"), None)

        entry = await wait_for(lambda: _ready(client(), 200), what="RDY 200 in /stats")
        assert entry["user_agent"] == "nsqclient-tests/1"

        # msg_timeout=1000 is applied by nsqd: an unanswered message times out after ~1 s
        nsqd.pub(topic, b"not answered")
        await wait_for(lambda: owner.messages, what="the message")
        chan = await wait_for(
            lambda: _timed_out(stats.channel(nsqd, topic, channel)), what="timeout_count 1"
        )
        assert chan["timeout_count"] == 1
        assert conn.is_open


async def _ready(entry_coro: Any, count: int) -> dict[str, Any] | None:
    entry = await entry_coro
    return entry if entry is not None and entry["ready_count"] == count else None


async def _timed_out(chan_coro: Any) -> dict[str, Any] | None:
    chan = await chan_coro
    return chan if chan["timeout_count"] >= 1 else None


async def test_without_feature_negotiation_nsqd_answers_ok_and_nothing_is_upgraded(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topic = unique()
    async with connected(nsqd, feature_negotiation=False, snappy=True, client_id="no-fn") as conn:
        resp = conn.identify_response
        assert resp is not None and not resp.negotiated and not resp.snappy
        assert conn.max_rdy_count == 2500  # the documented assumption without a JSON reply
        assert await conn.request(pub(topic, b"plain"), timeout=DEADLINE) == b"OK"
        producers = (await stats.raw(nsqd)).get("producers") or []
        assert [p["snappy"] for p in producers if p["client_id"] == "no-fn"] == [False]
    assert await stats.message_count(nsqd, topic) == 1


async def test_connect_twice_and_request_after_close_are_refused(nsqd: NsqdProcess) -> None:
    async with connected(nsqd) as conn:
        with pytest.raises(ClosedError):
            await conn.connect()
    with pytest.raises(ConnectionClosedError) as info:
        conn.request(pub("t", b"x"))
    assert info.value.address == conn.address


# ---------------------------------------------------------------- dialling


async def test_connection_refused_is_a_connect_error_with_the_address() -> None:
    port = free_port()
    conn = make_connection(None, address=("127.0.0.1", port))
    with pytest.raises(ConnectError) as info:
        await conn.connect()
    assert info.value.address == f"127.0.0.1:{port}"
    assert str(port) in str(info.value)
    assert conn.state is ConnectionState.CLOSED


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose listen backlog is full: the kernel drops SYNs, so connect() hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(s)
    try:
        yield port
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_dial_timeout_is_a_connect_error_with_the_address(unanswered_port: int) -> None:
    conn = make_connection(
        None,
        address=("127.0.0.1", unanswered_port),
        dial_timeout=200,
    )
    with pytest.raises(ConnectError) as info:
        await asyncio.wait_for(conn.connect(), DEADLINE)
    assert "timed out" in str(info.value)
    assert info.value.address == f"127.0.0.1:{unanswered_port}"


async def test_cancelled_dial_leaves_a_closed_connection(unanswered_port: int) -> None:
    conn = make_connection(None, address=("127.0.0.1", unanswered_port), dial_timeout=30_000)
    task = asyncio.create_task(conn.connect())
    await wait_for(lambda: conn.state is ConnectionState.CONNECTING, what="dialling")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(conn.wait_closed(), DEADLINE)  # must not hang
    assert conn.state is ConnectionState.CLOSED


async def test_handshake_with_a_frozen_nsqd_times_out(nsqd: NsqdProcess) -> None:
    conn = make_connection(nsqd, read_timeout=300)
    with frozen(nsqd), pytest.raises(NSQTimeoutError) as info:
        await asyncio.wait_for(conn.connect(), DEADLINE)
    assert info.value.address == conn.address
    await asyncio.wait_for(conn.wait_closed(), DEADLINE)


# ---------------------------------------------------------------- TLS


async def test_tls_verified_against_the_test_ca(
    nsqd_tls: NsqdProcess, tls_certs: CertBundle, stats: Stats
) -> None:
    topic = unique()
    async with connected(
        nsqd_tls, tls_v1=True, tls_ca_file=str(tls_certs.ca_cert), client_id="tls-ok"
    ) as conn:
        assert conn.identify_response is not None and conn.identify_response.tls_v1
        assert await conn.request(pub(topic, b"over tls")) == b"OK"
        clients = await stats.clients(nsqd_tls)
        assert [c["tls"] for c in clients if c["client_id"] == "tls-ok"] == [True]
    assert await stats.message_count(nsqd_tls, topic) == 1


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
async def test_each_tls_version_connects_at_once(
    nsqd_tls: NsqdProcess, tls_certs: CertBundle, version: str
) -> None:
    """The connection runs TLS itself (aio/tlswire.py). Under TLS 1.2 nsqd's OK after the
    upgrade often comes in the same read as the handshake's last message: a handshake that
    then waited for more bytes hung until read_timeout (60 s here, past the deadline)."""
    context = ssl.create_default_context(cafile=str(tls_certs.ca_cert))
    context.minimum_version = context.maximum_version = getattr(ssl.TLSVersion, version)
    topic = unique()
    for _ in range(5):
        conn = make_connection(nsqd_tls, tls_v1=True, tls_context=context, read_timeout=60_000)
        await asyncio.wait_for(conn.connect(), DEADLINE)
        try:
            assert conn._tls is not None
            assert conn._tls.ssl_object.version() == version.replace("_", ".")
            assert await conn.request(pub(topic, b"x")) == b"OK"
        finally:
            conn.close()
            await asyncio.wait_for(conn.wait_closed(), DEADLINE)


async def test_tls_with_the_wrong_ca_is_refused_with_a_clear_error(
    nsqd_tls: NsqdProcess, tls_certs: CertBundle
) -> None:
    conn = make_connection(nsqd_tls, tls_v1=True, tls_ca_file=str(tls_certs.other_ca_cert))
    with pytest.raises(TLSError) as info:
        await conn.connect()
    text = str(info.value)
    assert "certificate" in text.lower() and "tls_ca_file" in text
    assert info.value.address == conn.address
    assert isinstance(info.value, ConnectError)
    await asyncio.wait_for(conn.wait_closed(), DEADLINE)


async def test_tls_without_a_ca_is_refused_by_default(nsqd_tls: NsqdProcess) -> None:
    conn = make_connection(nsqd_tls, tls_v1=True)  # the system CAs do not know the test CA
    with pytest.raises(TLSError):
        await conn.connect()


async def test_tls_insecure_skip_verify_connects_without_a_ca(
    nsqd_tls: NsqdProcess,
) -> None:
    async with connected(nsqd_tls, tls_v1=True, tls_insecure_skip_verify=True) as conn:
        assert conn.identify_response is not None and conn.identify_response.tls_v1
        assert await conn.request(pub(unique(), b"x")) == b"OK"


async def test_tls_v1_refused_by_a_plain_nsqd_is_a_tls_error(nsqd: NsqdProcess) -> None:
    """Never continue in plaintext when TLS was asked for."""
    conn = make_connection(nsqd, tls_v1=True, tls_insecure_skip_verify=True)
    with pytest.raises(TLSError):
        await conn.connect()


@pytest.fixture
def nsqd_client_certs(nsqd_factory: Any, tls_certs: CertBundle) -> NsqdProcess:
    nsqd: NsqdProcess = nsqd_factory(
        tls_cert=tls_certs.server_cert,
        tls_key=tls_certs.server_key,
        tls_root_ca=tls_certs.ca_cert,
        tls_client_auth_policy="require-verify",
    )
    return nsqd


async def test_client_certificate_is_presented(
    nsqd_client_certs: NsqdProcess, tls_certs: CertBundle
) -> None:
    topic = unique()
    async with connected(
        nsqd_client_certs,
        tls_v1=True,
        tls_ca_file=str(tls_certs.ca_cert),
        tls_cert_file=str(tls_certs.client_cert),
        tls_key_file=str(tls_certs.client_key),
    ) as conn:
        assert await conn.request(pub(topic, b"with a client cert")) == b"OK"


@pytest.mark.parametrize("cert", ["none", "other-ca"])
async def test_missing_or_untrusted_client_certificate_fails_the_connect(
    nsqd_client_certs: NsqdProcess, tls_certs: CertBundle, cert: str
) -> None:
    options: dict[str, Any] = {"tls_v1": True, "tls_ca_file": str(tls_certs.ca_cert)}
    if cert == "other-ca":
        options["tls_cert_file"] = str(tls_certs.other_client_cert)
        options["tls_key_file"] = str(tls_certs.other_client_key)
    conn = make_connection(nsqd_client_certs, **options)
    with pytest.raises(ConnectError) as info:
        await asyncio.wait_for(conn.connect(), DEADLINE)
    assert info.value.address == conn.address
    assert conn.state is not ConnectionState.CONNECTED


async def test_tls_required_nsqd_works_over_tls(
    nsqd_tls_required: NsqdProcess, tls_certs: CertBundle
) -> None:
    async with connected(
        nsqd_tls_required, tls_v1=True, tls_ca_file=str(tls_certs.ca_cert)
    ) as conn:
        assert await conn.request(pub(unique(), b"x")) == b"OK"


async def test_tls_required_nsqd_refuses_plaintext_commands(
    nsqd_tls_required: NsqdProcess,
) -> None:
    async with connected(nsqd_tls_required) as conn:
        with pytest.raises(InvalidError) as info:
            await conn.request(pub(unique(), b"x"), timeout=DEADLINE)
        assert "TLS required" in str(info.value)
        await asyncio.wait_for(conn.wait_closed(), DEADLINE)


# ---------------------------------------------------------------- compression

BIG = 1_048_576 - 64  # just under nsqd's default --max-msg-size


def _body(n: int, seed: int) -> bytes:
    # compressible but not trivially: repeated blocks with a varying counter
    return b"".join(b"%08d-nsqclient-" % ((i + seed) % 997) for i in range(n // 18 + 1))[:n]


@pytest.mark.parametrize(
    ("options", "expect"),
    [
        pytest.param({}, {"snappy": False, "deflate": False}, id="plain"),
        pytest.param(
            {"snappy": True}, {"snappy": True, "deflate": False}, id="snappy", marks=SNAPPY
        ),
        pytest.param(
            {"deflate": True, "deflate_level": 3},
            {"deflate": True, "deflate_level": 3},
            id="deflate-3",
        ),
        pytest.param(
            {"deflate": True, "deflate_level": 9},
            {"deflate": True, "deflate_level": 6},  # capped at nsqd's --max-deflate-level
            id="deflate-9",
        ),
    ],
)
async def test_compression_round_trips_large_bodies(
    nsqd: NsqdProcess, stats: Stats, options: dict[str, Any], expect: dict[str, Any]
) -> None:
    topic, channel = unique(), unique("c")
    bodies = [_body(BIG, 1), _body(BIG, 2), *(b"small-%d" % i for i in range(50)), _body(BIG, 3)]
    async with connected(nsqd, client_id="codec-pub", **options) as conn:
        resp = conn.identify_response
        assert resp is not None
        for key, value in expect.items():
            assert getattr(resp, key) == value, key
        # pipelined: every command goes out in one compressed write
        replies = await asyncio.gather(*(conn.request(pub(topic, b)) for b in bodies))
        assert replies == [b"OK"] * len(bodies)
        producers = (await stats.raw(nsqd)).get("producers") or []
        mine = [p for p in producers if p["client_id"] == "codec-pub"]
        assert [(p["snappy"], p["deflate"]) for p in mine] == [
            (expect.get("snappy", False), expect["deflate"])
        ]
    assert await stats.message_count(nsqd, topic) == len(bodies)
    received = await consume(nsqd, topic, channel, len(bodies), max_in_flight=100, **options)
    assert sorted(m.body for m in received) == sorted(bodies)


@SNAPPY
async def test_compression_over_tls(nsqd_tls: NsqdProcess, tls_certs: CertBundle) -> None:
    topic, channel = unique(), unique("c")
    options = {"tls_v1": True, "tls_ca_file": str(tls_certs.ca_cert), "snappy": True}
    async with connected(nsqd_tls, **options) as conn:
        resp = conn.identify_response
        assert resp is not None and resp.tls_v1 and resp.snappy
        assert await conn.request(pub(topic, _body(BIG, 7))) == b"OK"
    [msg] = await consume(nsqd_tls, topic, channel, 1, **options)
    assert msg.body == _body(BIG, 7)


def test_snappy_and_deflate_together_are_refused_locally() -> None:
    with pytest.raises(ConfigError, match="snappy and deflate"):
        make_connection(None, snappy=True, deflate=True)


# ---------------------------------------------------------------- AUTH


@pytest.mark.parametrize(
    "codec",
    [{}, pytest.param({"snappy": True}, marks=SNAPPY), {"deflate": True}],
    ids=["plain", "snappy", "deflate"],
)
async def test_auth_success(nsqd_auth: NsqdProcess, stats: Stats, codec: dict[str, bool]) -> None:
    """AUTH goes out after the upgrades, so it is compressed when compression is on."""
    topic = unique()
    async with connected(nsqd_auth, auth_secret="s3cret", **codec) as conn:
        assert conn.identify_response is not None and conn.identify_response.auth_required
        assert conn.auth_response is not None
        assert conn.auth_response.identity == "s3cret"
        assert conn.auth_response.permission_count >= 1
        assert await conn.request(pub(topic, b"authorised")) == b"OK"
    assert await stats.message_count(nsqd_auth, topic) == 1


async def test_auth_wrong_secret_is_a_server_auth_error(nsqd_auth: NsqdProcess) -> None:
    conn = make_connection(nsqd_auth, auth_secret="wrong")
    with pytest.raises(ServerAuthError) as info:
        await conn.connect()
    assert isinstance(info.value, AuthError)
    assert info.value.code == "E_AUTH_FAILED"
    assert info.value.address == conn.address
    await asyncio.wait_for(conn.wait_closed(), DEADLINE)


async def test_auth_required_without_a_secret(nsqd_auth: NsqdProcess) -> None:
    conn = make_connection(nsqd_auth)
    with pytest.raises(AuthRequiredError):
        await conn.connect()
    await asyncio.wait_for(conn.wait_closed(), DEADLINE)


async def test_auth_without_publish_permission_fails_the_publish(
    nsqd_auth: NsqdProcess,
) -> None:
    async with connected(nsqd_auth, auth_secret="readonly") as conn:
        with pytest.raises(ServerAuthError) as info:
            await conn.request(pub(unique(), b"x"), timeout=DEADLINE)
        assert info.value.code == "E_UNAUTHORIZED"


# ---------------------------------------------------------------- liveness


@pytest.mark.one_backend
async def test_heartbeats_are_answered_on_an_idle_connection(nsqd: NsqdProcess) -> None:
    owner = Collector()
    async with connected(nsqd, owner, heartbeat_interval=1000) as conn:
        # nsqd closes a client silent for two intervals: three heartbeats prove the NOPs
        await wait_for(lambda: conn.heartbeats_received >= 3, what="three heartbeats")
        assert conn.is_open and not owner.lost
        assert await conn.request(pub(unique(), b"still alive"), timeout=DEADLINE) == b"OK"


@pytest.mark.one_backend
async def test_frozen_nsqd_is_declared_dead_and_pending_requests_fail(
    nsqd: NsqdProcess,
) -> None:
    owner = Collector()
    conn = make_connection(nsqd, owner, heartbeat_interval=1000)
    await conn.connect()
    with frozen(nsqd):
        pending = conn.request(pub(unique(), b"never answered"))  # no deadline of its own
        with pytest.raises(ConnectionClosedError) as info:
            await asyncio.wait_for(pending, DEADLINE)
        assert isinstance(info.value.__cause__, NSQTimeoutError)
        assert isinstance(conn.close_exception, NSQTimeoutError)
        assert conn.state is ConnectionState.CLOSED
        assert len(owner.lost) == 1 and isinstance(owner.lost[0], NSQTimeoutError)


@pytest.mark.one_backend
async def test_an_idle_connection_wakes_about_once_per_heartbeat_not_per_tick(
    nsqd: NsqdProcess,
) -> None:
    """Idle, subscribed with RDY: the liveness timer is armed for the silence bound only, and
    over four heartbeat intervals it fires a handful of times (the old ticker: 16 times)."""
    owner = Collector()
    async with connected(nsqd, owner, heartbeat_interval=1000) as conn:
        await conn.subscribe(unique(), unique("c"))
        conn.send_rdy(10)
        loop = asyncio.get_running_loop()
        # armed at "last frame + two heartbeat intervals", not at the next 250 ms tick
        assert conn._wake_at - loop.time() > 1.0
        wakes: list[float] = []
        check = conn._check

        def counted() -> None:
            wakes.append(loop.time())
            check()

        conn._check = counted  # type: ignore[method-assign]
        start = loop.time()
        await wait_for(lambda: loop.time() - start > 4.0, what="four heartbeat intervals")
        assert conn.is_open and not owner.lost
        assert conn.heartbeats_received >= 3  # answered: nsqd would have closed it otherwise
        assert len(wakes) <= 8, wakes  # about one per heartbeat (4), never per 250 ms (16)


async def test_a_request_deadline_after_an_answered_one_is_still_enforced_on_time(
    nsqd: NsqdProcess,
) -> None:
    """The timer is armed per pending stretch: after one request was answered and its
    deadline's wake-up found nothing pending, the next request's deadline must arm it again
    (not wait for the 10 s silence bound)."""
    conn = make_connection(nsqd, Collector(), heartbeat_interval=5000)
    await conn.connect()
    wakes: list[None] = []
    check = conn._check

    def counted() -> None:
        wakes.append(None)
        check()

    conn._check = counted  # type: ignore[method-assign]
    assert await conn.request(pub(unique(), b"answered"), timeout=0.3) == b"OK"
    await wait_for(lambda: wakes, what="the wake-up at the answered request's deadline")
    with frozen(nsqd):
        with pytest.raises(NSQTimeoutError) as info:
            await asyncio.wait_for(conn.request(pub(unique(), b"late"), timeout=0.3), 5.0)
        assert not isinstance(info.value, ConnectionClosedError)
        assert "before the timeout" in str(info.value)
    conn.abort()


@pytest.mark.one_backend
async def test_silence_is_declared_within_two_heartbeat_intervals_as_before(
    nsqd: NsqdProcess,
) -> None:
    """A frozen nsqd on an idle connection (nothing pending): only the silence bound can catch
    it, at two heartbeat intervals after the last frame (the old ticker: the same plus 0.25 s).
    Measured from the last complete frame the connection read (``_last_read``, the loop's
    clock), not from the freeze: on a busy machine the test froze nsqd a second after the
    heartbeat it waited for, and "at least 1 s after the freeze" failed at 0.98 s."""
    owner = Collector()
    conn = make_connection(nsqd, owner, heartbeat_interval=1000)
    await conn.connect()
    loop = asyncio.get_running_loop()
    await wait_for(lambda: conn.heartbeats_received >= 1, what="a first heartbeat")
    with frozen(nsqd):
        await asyncio.wait_for(conn.wait_closed(), DEADLINE)
        silent = loop.time() - conn._last_read
    assert isinstance(conn.close_exception, NSQTimeoutError)
    assert "two heartbeat intervals" in str(conn.close_exception)
    assert len(owner.lost) == 1
    assert 2.0 <= silent <= 2.0 + 1.5, silent  # 2 intervals after the last frame, + slack


@pytest.mark.one_backend
async def test_without_heartbeats_an_idle_connection_is_not_declared_dead(
    nsqd: NsqdProcess,
) -> None:
    """heartbeat_interval=-1: nsqd sends nothing to an idle client, and that is not silence."""
    owner = Collector()
    async with connected(nsqd, owner, heartbeat_interval=-1, read_timeout=300) as conn:
        loop = asyncio.get_running_loop()
        start = loop.time()
        # idle for five read_timeouts; the connection must stay up all along
        await wait_for(
            lambda: not conn.is_open or loop.time() - start > 1.5, what="1.5 s of idleness"
        )
        assert conn.is_open and not owner.lost
        assert conn.heartbeats_received == 0
        assert await conn.request(pub(unique(), b"x"), timeout=DEADLINE) == b"OK"


async def test_without_heartbeats_silence_while_a_reply_is_awaited_is_fatal(
    nsqd: NsqdProcess,
) -> None:
    owner = Collector()
    conn = make_connection(nsqd, owner, heartbeat_interval=-1, read_timeout=300)
    await conn.connect()
    with frozen(nsqd):
        pending = conn.request(pub(unique(), b"x"))
        with pytest.raises(ConnectionClosedError) as info:
            await asyncio.wait_for(pending, DEADLINE)
    assert isinstance(info.value.__cause__, NSQTimeoutError)
    assert "read_timeout" in str(info.value.__cause__)


@pytest.mark.parametrize(
    "codec",
    [{}, pytest.param({"snappy": True}, marks=SNAPPY), {"deflate": True}],
    ids=["plain", "snappy", "deflate"],
)
async def test_a_large_burst_is_flow_controlled_not_timed_out(
    nsqd: NsqdProcess, stats: Stats, codec: dict[str, bool]
) -> None:
    """100 MB queued at once with write_timeout far shorter than the burst takes: nsqd reads
    steadily, so the write pause must not be mistaken for a dead peer (and the send buffer must
    not go quadratic). 1 s, not the 100 ms minimum: the embedded server shares this process's
    CPU, and on a busy machine it may not be scheduled for 100 ms."""
    topic = unique()
    body = _body(1_000_000, 5)
    async with connected(nsqd, write_timeout=1000, **codec) as conn:
        futures = [conn.request(pub(topic, body), timeout=30) for _ in range(100)]
        assert await asyncio.wait_for(asyncio.gather(*futures), DEADLINE) == [b"OK"] * 100
    assert await stats.message_count(nsqd, topic) == 100


async def test_nsqd_that_stops_reading_is_dropped_after_write_timeout(
    nsqd: NsqdProcess,
) -> None:
    """Heartbeats are 30 s apart here; it is the stalled write that gives a frozen nsqd away."""
    owner = Collector()
    conn = make_connection(nsqd, owner, write_timeout=300)
    await conn.connect()
    body = bytes(1_000_000)
    with frozen(nsqd):
        futures = [conn.request(pub(unique(), body)) for _ in range(20)]  # no deadlines
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), DEADLINE)
    assert all(isinstance(r, ConnectionClosedError) for r in results), results
    assert isinstance(conn.close_exception, NSQTimeoutError)
    assert "write timed out" in str(conn.close_exception)
    assert owner.lost == [conn.close_exception]


async def test_request_deadline_fails_only_the_late_request(nsqd: NsqdProcess) -> None:
    """Deadlines are per request: a short one behind a long one still expires on time."""
    async with connected(nsqd) as conn:
        with frozen(nsqd):
            long = conn.request(pub(unique(), b"a"), timeout=DEADLINE * 2)
            short = conn.request(pub(unique(), b"b"), timeout=0.3)
            with pytest.raises(NSQTimeoutError):
                await asyncio.wait_for(short, DEADLINE)
            assert not long.done()
            assert conn.is_open
        # the late replies are consumed in order and the connection stays usable
        assert await asyncio.wait_for(long, DEADLINE) == b"OK"
        assert await conn.request(pub(unique(), b"c"), timeout=DEADLINE) == b"OK"


# ---------------------------------------------------------------- replies and errors


async def test_replies_are_matched_in_fifo_order_under_pipelining(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    """A CLS between hundreds of pipelined PUBs must get CLOSE_WAIT, and every PUB its OK."""
    topic, channel = unique(), unique("c")
    async with connected(nsqd, Collector()) as conn:
        await conn.subscribe(topic, channel)
        order: list[int] = []
        futures = []
        for i in range(601):
            data = commands.cls() if i == 300 else pub(topic, b"%d" % i)
            fut = conn.request(data, timeout=DEADLINE)
            fut.add_done_callback(lambda _f, i=i: order.append(i))
            futures.append(fut)
        replies = await asyncio.gather(*futures)
        assert replies[300] == b"CLOSE_WAIT"
        assert replies[:300] == [b"OK"] * 300 and replies[301:] == [b"OK"] * 300
        assert order == list(range(601))
    assert await stats.message_count(nsqd, topic) == 600


async def test_error_frame_fails_exactly_the_command_it_answers(
    nsqd_factory: Any, stats: Stats
) -> None:
    nsqd = nsqd_factory(extra_args=["--max-msg-size=1000"])
    topic = unique()
    owner = Collector()
    conn = make_connection(nsqd, owner, max_msg_size=5000)
    await conn.connect()
    futures = [
        conn.request(pub(topic, b"first"), timeout=DEADLINE),
        conn.request(commands.pub(topic, b"x" * 2000, max_msg_size=5000), timeout=DEADLINE),
        *(conn.request(pub(topic, b"after %d" % i), timeout=DEADLINE) for i in range(5)),
    ]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert results[0] == b"OK"
    assert isinstance(results[1], BadMessageError)
    assert results[1].code == "E_BAD_MESSAGE" and "too big" in str(results[1])
    for later in results[2:]:
        assert isinstance(later, ConnectionClosedError), later
        assert later.__cause__ is results[1]
    await asyncio.wait_for(conn.wait_closed(), DEADLINE)
    assert owner.lost == [results[1]]
    assert await stats.message_count(nsqd, topic) == 1


async def test_fin_failed_is_not_fatal(nsqd: NsqdProcess) -> None:
    owner = Collector()
    async with connected(nsqd, owner) as conn:
        await conn.subscribe(unique(), unique("c"))
        conn.send(commands.fin(b"0123456789abcdef"))
        await wait_for(lambda: owner.response_errors, what="E_FIN_FAILED")
        [error] = owner.response_errors
        assert isinstance(error, FinFailedError) and not error.fatal
        assert conn.is_open
        assert await conn.request(pub(unique(), b"still fine"), timeout=DEADLINE) == b"OK"
        assert not owner.lost


async def test_cls_is_answered_by_close_wait_before_the_socket_closes(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topic, channel = unique(), unique("c")
    owner = Collector(auto_fin=False)
    conn = make_connection(nsqd, owner, client_id="cls-test")
    await conn.connect()
    await conn.subscribe(topic, channel)
    conn.send_rdy(1)
    nsqd.pub(topic, b"in flight during CLS")
    await wait_for(lambda: owner.messages, what="a message")
    assert await conn.cls(DEADLINE) is True
    # CLOSE_WAIT arrived and the socket is still open: the in-flight message can be FINed
    assert conn.state is ConnectionState.CLOSING
    owner.messages[0].fin()
    chan = await wait_for(
        lambda: _finished(stats.channel(nsqd, topic, channel)), what="in_flight_count 0"
    )
    assert chan["clients"][0]["state"] == 4  # nsqd: closing
    conn.close()
    await asyncio.wait_for(conn.wait_closed(), DEADLINE)
    assert owner.lost == [None]  # a requested close is reported without a cause


async def _finished(chan_coro: Any) -> dict[str, Any] | None:
    chan = await chan_coro
    return chan if chan["in_flight_count"] == 0 and chan["clients"] else None


class _CountingTransport:
    """Wraps the real transport and counts ``write`` calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.writes: list[int] = []

    def write(self, data: bytes) -> None:
        self.writes.append(len(data))
        self.inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_commands_of_one_loop_turn_are_one_transport_write(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topic = unique()
    async with connected(nsqd) as conn:
        counting = _CountingTransport(conn._transport)
        conn._transport = counting  # type: ignore[assignment]
        futures = [conn.request(pub(topic, b"m%d" % i), timeout=DEADLINE) for i in range(500)]
        conn.send(commands.nop())
        assert counting.writes == []  # nothing written until the end of this loop turn
        assert await asyncio.gather(*futures) == [b"OK"] * 500
        assert len(counting.writes) == 1
        assert counting.writes[0] == sum(len(pub(topic, b"m%d" % i)) for i in range(500)) + 4
        conn._transport = counting.inner
    assert await stats.message_count(nsqd, topic) == 500
