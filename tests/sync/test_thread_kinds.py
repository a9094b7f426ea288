"""Every kind of connection through the thread door: TLS, snappy and deflate (issue 50).

On each kind a blocking publish is written by its own thread (encoded holding the connection's
wire) and its reply read by a publishing thread (decrypted holding the wire, decompressed under
the turn), as on plain TCP; and each keeps the wing's contracts with what the kind adds:

* a script's publishes are written and read by its thread, ``pub_nowait`` futures too, on
  every kind (both backends);
* sixteen threads (blocking, MPUB, futures) and a coroutine on one connection of each kind,
  with AUTH, TLS with a CA and a verified client certificate (CI runs it again under
  ``sys.setswitchinterval(1e-6)``, run_tests.sh's stress step: CPython then switches threads
  far more often): every publish acknowledged once and stored once, no connection lost;
* a cut in the middle of a TLS record, read by a thread or by the loop: what was pending fails
  as maybe sent, the connection is replaced, publishing goes on;
* a damaged stream (bytes lost on the way from nsqd) on TLS, snappy and deflate: what was
  pending fails at once with the damage as its cause, and the connection is replaced;
* heartbeats answered through the encoder by the reading thread (TLS and deflate at once);
* a TLS 1.3 KeyUpdate (asking for one back) and a session ticket arriving while a thread reads
  (the embedded server is asked for them through OpenSSL): consumed, answered in order.

The interleavings of the wing are also run on TLS and deflate connections
(tests/sync/test_interleavings.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import random
import ssl
import threading
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.errors import ConnectionClosedError, ProtocolError
from nsqclient.sync import SyncWriter
from nsqclient.testing import FaultProxy
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.embedded import ThreadedEmbeddedNsqd
from tests.support import wait_until

from .kinds_support import (
    DEFLATE,
    SNAPPY,
    TLS,
    TLS_DEFLATE,
    Kind,
    key_update_owed,
    params,
    request_key_update,
    request_session_ticket,
)
from .support import drain_bodies, unique
from .test_interleavings import Runner, Stop, _door, _unread_at_least, stop_at_read

pytestmark = pytest.mark.timeout(90)

THREADS = 16
#: reconnect at once: each test here replaces a connection at most once
QUICK = {"reconnect_delay": 50, "max_reconnect_delay": 250}
NsqdFactory = Callable[..., Any]


def _writer(address: str, kind: Kind, certs: CertBundle, **options: Any) -> SyncWriter:
    return SyncWriter([address], **kind.options(certs), **options)


@pytest.mark.parametrize("kind", params(TLS, SNAPPY, DEFLATE, TLS_DEFLATE))
def test_a_script_writes_and_reads_its_publishes_itself_on_every_kind(
    nsqd_factory: NsqdFactory, tls_certs: CertBundle, kind: Kind
) -> None:
    """A script's blocking publishes (no ``with``: the first meets the connection being made)
    and ``pub_nowait`` futures waited on: written by its thread and read by it, from the
    second on (before: every one crossed to the loop and back, written_by_threads 0)."""
    nsqd = kind.nsqd(nsqd_factory, tls_certs)
    topic = unique()
    writer = _writer(nsqd.tcp_address, kind, tls_certs)
    try:
        for i in range(100):
            writer.pub(topic, b"s%d" % i)
        futures = [writer.pub_nowait(topic, b"f%d" % i) for i in range(20)]
        for future in futures:
            assert future.result(timeout=10) is None
        stats = writer.stats()
    finally:
        writer.close()
    assert stats["published"] == 120 and stats["failed"] == 0
    assert stats["connection_losses"] == 0
    assert stats["written_by_threads"] >= 119, stats
    # the first two at most are the loop's to read; a few more if the loop took reading back
    # while the thread was descheduled (shared CPUs), and futures nobody waits on yet
    assert stats["read_by_threads"] >= 90, stats
    stored = drain_bodies(nsqd, topic, 120, **kind.options(tls_certs))
    expected = [b"s%d" % i for i in range(100)] + [b"f%d" % i for i in range(20)]
    assert sorted(stored) == sorted(expected)


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
def test_each_tls_version_through_the_thread_door_and_the_loop(
    nsqd_factory: NsqdFactory, tls_certs: CertBundle, version: str
) -> None:
    """TLS 1.2 and 1.3 (a context of the user's, ``tls_context``), publishing threads and a
    coroutine. Under TLS 1.2 nsqd's OK after the upgrade may come in the same read as the
    handshake's last message: the handshake once waited for more bytes and timed out."""
    nsqd = TLS.nsqd(nsqd_factory, tls_certs)
    context = ssl.create_default_context(cafile=str(tls_certs.ca_cert))
    context.load_cert_chain(str(tls_certs.client_cert), str(tls_certs.client_key))
    context.minimum_version = context.maximum_version = getattr(ssl.TLSVersion, version)
    topic = unique()
    with SyncWriter([nsqd.tcp_address], tls_v1=True, tls_context=context) as writer:
        for i in range(20):
            writer.pub(topic, b"t%d" % i)
        co = asyncio.run_coroutine_threadsafe(writer.aio.pub(topic, b"co"), writer.loop)
        co.result(30)
        [conn] = writer.aio.connections
        assert conn._tls is not None
        assert conn._tls.ssl_object.version() == version.replace("_", ".")
        stats = writer.stats()
    assert stats["published"] == 21 and stats["read_by_threads"] >= 15, stats
    assert len(drain_bodies(nsqd, topic, 21, **TLS.options(tls_certs))) == 21


@pytest.mark.parametrize("kind", params(TLS, DEFLATE))
def test_a_body_larger_than_the_socket_buffer_on_every_kind(
    nsqd_factory: NsqdFactory, tls_certs: CertBundle, kind: Kind
) -> None:
    """An 8 MiB MPUB of incompressible bodies: the thread encodes it, its send takes what the
    socket's buffer holds, and the loop writes the encoded rest first, then encodes and
    writes the 50 PUBs queued behind it (plain until then), in order: every body arrives
    whole, and each reply answers its own publish."""
    limits = ["--max-msg-size=2000000", "--max-body-size=9000000"]
    nsqd = kind.nsqd(nsqd_factory, tls_certs, extra_args=limits)
    topic = unique()
    rng = random.Random(50)
    big = [rng.randbytes(1 << 20) for _ in range(8)]
    small = [b"small-%d" % i for i in range(50)]
    options = {"max_msg_size": 2_000_000, "max_body_size": 9_000_000}
    with _writer(nsqd.tcp_address, kind, tls_certs, **options) as writer:
        writer.pub(topic, b"warm")
        futures = [writer.mpub_nowait(topic, big, timeout=60)]
        futures += [writer.pub_nowait(topic, body, timeout=60) for body in small]
        for future in futures:
            assert future.result(timeout=60) is None
        stats = writer.stats()
        assert stats["written_by_threads"] >= 2 and stats["connection_losses"] == 0
    stored = drain_bodies(nsqd, topic, 59, **kind.options(tls_certs))
    assert sorted(stored) == sorted([b"warm", *big, *small])


class Ledger:
    """Bodies acknowledged and raised, from every publishing thread and the coroutine."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[bytes] = []
        self.raised: list[tuple[bytes, BaseException]] = []

    def ack(self, bodies: list[bytes]) -> None:
        with self.lock:
            self.acked.extend(bodies)

    def fail(self, bodies: list[bytes], error: BaseException) -> None:
        with self.lock:
            self.raised.extend((b, error) for b in bodies)


@pytest.mark.one_backend
@pytest.mark.parametrize("kind", params(TLS, SNAPPY, DEFLATE))
def test_sixteen_threads_and_a_coroutine_on_one_connection(
    nsqd_factory: NsqdFactory,
    tls_certs: CertBundle,
    auth_server: Any,
    kind: Kind,
) -> None:
    """Twelve threads publishing blocking, two MPUB, two with eight ``pub_nowait`` futures
    out at a time, and a coroutine on the loop, all on one connection with AUTH (and TLS with
    a verified client certificate): every publish acknowledged once, stored once, nothing
    lost or stuck, the threads writing and reading their own."""
    nsqd = kind.nsqd(nsqd_factory, tls_certs, auth_http_address=auth_server.address)
    options = {**kind.options(tls_certs), "auth_secret": "s3cret"}
    topic, ledger, each = unique(), Ledger(), 80
    with SyncWriter([nsqd.tcp_address], **options) as writer:
        writer.pub(topic, b"warm")
        ledger.ack([b"warm"])

        def publisher(t: int) -> None:
            for i in range(each):
                bodies = [b"t%d-%d" % (t, i)]
                try:
                    if t in (12, 13):
                        bodies = [b"t%d-%d-%d" % (t, i, j) for j in range(3)]
                        writer.mpub(topic, bodies, timeout=20)
                    else:
                        writer.pub(topic, bodies[0], timeout=20)
                except Exception as exc:  # (recorded: the test fails on it below)
                    ledger.fail(bodies, exc)
                else:
                    ledger.ack(bodies)

        def with_futures(t: int) -> None:
            window: collections.deque[tuple[bytes, concurrent.futures.Future[None]]]
            window = collections.deque()
            for i in range(each):
                if len(window) >= 8:
                    settle(*window.popleft())
                body = b"t%d-%d" % (t, i)
                window.append((body, writer.pub_nowait(topic, body, timeout=20)))
            while window:
                settle(*window.popleft())

        def settle(body: bytes, future: concurrent.futures.Future[None]) -> None:
            error = future.exception(timeout=30)
            if error is None:
                ledger.ack([body])
            else:
                ledger.fail([body], error)

        async def coroutine() -> None:
            for i in range(2 * each):
                body = b"co-%d" % i
                await writer.aio.pub(topic, body, timeout=20)
                ledger.ack([body])

        targets = [with_futures if t >= 14 else publisher for t in range(THREADS)]
        threads = [threading.Thread(target=f, args=(t,)) for t, f in enumerate(targets)]
        co = asyncio.run_coroutine_threadsafe(coroutine(), writer.loop)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        co.result(60)
        assert not any(t.is_alive() for t in threads), "a publishing thread is stuck"
        stats = writer.stats()
    assert ledger.raised == []
    total = 1 + 12 * each + 2 * 3 * each + 2 * each + 2 * each
    assert len(ledger.acked) == len(set(ledger.acked)) == total
    assert stats["published"] == total and stats["failed"] == 0
    assert stats["connection_losses"] == 0
    assert stats["written_by_threads"] > 0 and stats["read_by_threads"] > 0, stats
    stored = drain_bodies(nsqd, topic, total, **options)
    assert sorted(stored) == sorted(ledger.acked)


@pytest.mark.one_backend
@pytest.mark.parametrize("face", ["thread", "coroutine"])
def test_a_cut_in_the_middle_of_a_tls_record(
    nsqd_factory: NsqdFactory,
    tls_certs: CertBundle,
    nsq_fault_proxy_factory: Callable[[Any], FaultProxy],
    face: str,
) -> None:
    """The reply trickles in (two bytes a second: a TLS record of an OK is 32) and the
    connection is cut once its first bytes were read, by a publishing thread or by the loop
    (a coroutine's publish): the publish fails as maybe sent (nsqd stored it), nothing
    hangs on the half record, and the next publish goes on a new connection."""
    nsqd = TLS.nsqd(nsqd_factory, tls_certs)
    proxy = nsq_fault_proxy_factory(nsqd)
    topic = unique()
    options = TLS.options(tls_certs)
    with _writer(proxy.address, TLS, tls_certs, **QUICK) as writer:
        _door(writer)  # (the threads read)
        with proxy.slow(down=2):
            before = proxy.counters().bytes_down
            if face == "thread":
                runner = Runner(lambda: writer.pub(topic, b"cut", timeout=30))
            else:
                pub = writer.aio.pub(topic, b"cut", timeout=30)
                co = asyncio.run_coroutine_threadsafe(pub, writer.loop)
            wait_until(
                lambda: proxy.counters().bytes_down >= before + 2, what="a record's first bytes"
            )
            proxy.cut()
        error = runner.join().error if face == "thread" else co.exception(30)
        assert isinstance(error, ConnectionClosedError) and error.sent, repr(error)
        writer.pub(topic, b"after", timeout=30)
        stats = writer.stats()
        assert stats["connection_losses"] == 1 and stats["failed"] == 1
        assert stats["published"] == 2
    stored = drain_bodies(nsqd, topic, 2, **options)
    assert sorted(stored) == [b"after", b"cut"]


@pytest.mark.one_backend
@pytest.mark.parametrize("kind", params(TLS, SNAPPY, DEFLATE))
def test_a_damaged_stream_fails_what_is_pending_and_reconnects(
    nsqd_factory: NsqdFactory,
    tls_certs: CertBundle,
    nsq_fault_proxy_factory: Callable[[Any], FaultProxy],
    kind: Kind,
) -> None:
    """The first byte of nsqd's reply lost on the way, read by the publishing thread (its
    turn; or by the loop, should it have taken reading back meanwhile): TLS refuses the record,
    snappy the chunk header, deflate the block, at once; the publish fails as maybe sent with
    that as its cause, and the next goes on a new connection."""
    nsqd = kind.nsqd(nsqd_factory, tls_certs)
    proxy = nsq_fault_proxy_factory(nsqd)
    topic = unique()
    with _writer(proxy.address, kind, tls_certs, **QUICK) as writer:
        _door(writer)  # the threads read: the next publish reads its own reply
        with proxy.drop(1, "down"), pytest.raises(ConnectionClosedError) as info:
            writer.pub(topic, b"damaged", timeout=30)
        cause = info.value.__cause__
        assert info.value.sent and isinstance(cause, ProtocolError), repr(cause)
        assert ("TLS" if kind.tls else f"corrupt {kind.codec} stream") in str(cause)
        writer.pub(topic, b"after", timeout=30)
        stats = writer.stats()
        assert stats["connection_losses"] == 1 and stats["failed"] == 1
    stored = drain_bodies(nsqd, topic, 2, **kind.options(tls_certs))
    assert sorted(stored) == [b"after", b"damaged"]


@pytest.mark.slow
@pytest.mark.one_backend
def test_heartbeats_are_answered_through_the_encoder_by_reading_threads(
    nsqd_factory: NsqdFactory, tls_certs: CertBundle
) -> None:
    """With 1 s heartbeats on a TLS and deflate connection, threads that publish read the
    heartbeats and answer them with NOPs compressed and encrypted in order with their
    publishes: a NOP written as it is would break both streams, and nsqd would close the
    connection."""
    kind = TLS_DEFLATE
    nsqd = kind.nsqd(nsqd_factory, tls_certs)
    topic = unique()
    with _writer(nsqd.tcp_address, kind, tls_certs, heartbeat_interval=1000) as writer:
        door = _door(writer)
        stop = threading.Event()

        def publisher() -> None:
            while not stop.is_set():
                writer.pub(topic, b"x")

        threads = [threading.Thread(target=publisher) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            wait_until(
                lambda: door.shared.heartbeats >= 2, timeout=30, what="threads read heartbeats"
            )
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        writer.pub(topic, b"after")
        stats = writer.stats()
    assert stats["connection_losses"] == 0 and stats["failed"] == 0


def test_a_session_ticket_and_a_key_update_while_a_thread_reads(tls_certs: CertBundle) -> None:
    """The server's next record brings a new TLS 1.3 session ticket, then (the next time) a
    KeyUpdate asking for one back: the embedded server is asked for them through OpenSSL
    (nsqd's Go TLS sends its ticket during the handshake and never asks for a key update).
    Each is read by the thread holding the turn, which consumes it; the client's own KeyUpdate
    goes out before its next record, in order with the threads' writes, else nsqd could not
    decrypt what follows."""
    topic = unique()
    with (
        ThreadedEmbeddedNsqd(**TLS.server_options(tls_certs)) as nsqd,
        _writer(nsqd.tcp_address, TLS, tls_certs) as writer,
    ):
        door = _door(writer)
        client = writer.aio.connections[0]._tls
        assert client is not None

        def the_thread_reads_after(ask: Callable[[ssl.SSLObject], None]) -> None:
            async def ask_the_server() -> int:
                conns = list(nsqd.server.conns)
                for conn in conns:
                    ask(conn.transport.get_extra_info("ssl_object"))
                return len(conns)

            assert nsqd.run(ask_the_server()) == 1
            read_before = door.read
            stop = Stop()
            with stop_at_read(stop):
                reader = Runner(lambda: writer.pub(topic, b"over %s" % ask.__name__.encode()), stop)
                stop.reached()  # the thread holds the turn; the reply comes with the message
                _unread_at_least(door.shared, TLS.reply)
                stop.release()
                assert reader.join().error is None
            assert door.read == read_before + 1  # the reply was the thread's to read

        with door.wire:
            session = client.ssl_object.session
        the_thread_reads_after(request_session_ticket)
        with door.wire:
            assert client.ssl_object.session != session  # a new ticket, consumed
            assert not key_update_owed(client.ssl_object)
        the_thread_reads_after(request_key_update)
        with door.wire:
            assert key_update_owed(client.ssl_object)  # read by the thread, answer pending
        for i in range(10):
            writer.pub(topic, b"after %d" % i)
        with door.wire:
            assert not key_update_owed(client.ssl_object)  # sent, and nsqd understood after
        stats = writer.stats()
        assert stats["connection_losses"] == 0 and stats["published"] == 13
