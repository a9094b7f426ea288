"""One failure fails one publish: what nsqd refuses raises, what was pipelined behind it is sent
again (nsqd never executed it), and what nsqd said of its limits is refused locally afterwards.
Also the refusals that happen before anything is sent (an HTTP port, misconfiguration)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from nsqclient.aio import Writer
from nsqclient.errors import (
    BadBodyError,
    BadMessageError,
    ConfigError,
    ConnectError,
    InvalidError,
    MessageTooLargeError,
    ServerAuthError,
    WrongPortError,
)
from nsqclient.sync import SyncWriter
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.support import wait_until

from .conftest import DEADLINE, Stats, unique, wait_for

pytestmark = pytest.mark.timeout(60)

FAST_RECONNECT = {"reconnect_delay": 50, "max_reconnect_delay": 300}


@pytest.fixture
def small_nsqd(nsqd_factory: Any) -> NsqdProcess:
    """An nsqd that accepts messages of at most 1,024 bytes and MPUB bodies of 4,096."""
    return nsqd_factory(extra_args=["--max-msg-size=1024", "--max-body-size=4096"])  # type: ignore[no-any-return]


async def test_one_oversized_pub_among_fifty_fails_alone(
    small_nsqd: NsqdProcess, stats: Stats
) -> None:
    """The issue's reproduction: 50 concurrent 100-byte PUBs and one of 2,048 bytes."""
    topic = unique()
    async with Writer([small_nsqd.tcp_address], max_msg_size=1_000_000, **FAST_RECONNECT) as w:
        calls = [w.pub(topic, b"%03d" % i + b"." * 97) for i in range(50)]
        calls.insert(10, w.pub(topic, b"x" * 2048))
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), DEADLINE)
        failures = [r for r in results if r is not None]
        assert len(failures) == 1 and isinstance(failures[0], BadMessageError), failures
        assert results[10] is failures[0]
        assert w.stats()["published"] == 50 and w.stats()["failed"] == 1
        assert w.resent >= 1  # the ones pipelined behind it went again
        # nsqd said "2048 > 1024": later oversized bodies are refused before sending
        assert w.max_msg_size == 1024
        conns_before = w.connections
        with pytest.raises(MessageTooLargeError, match="max_msg_size=1024"):
            await w.pub(topic, b"x" * 1025)
        with pytest.raises(MessageTooLargeError, match="max_msg_size=1024"):
            await w.dpub(topic, 10, b"x" * 1025)
        with pytest.raises(MessageTooLargeError, match="max_msg_size=1024"):
            await w.mpub(topic, [b"ok", b"x" * 1025])
        assert w.connections == conns_before  # refused locally: no connection was lost
        await w.pub(topic, b"x" * 1024)  # at the limit: still fine
    assert await stats.message_count(small_nsqd, topic) == 51


@pytest.mark.parametrize("kind", ["mpub", "dpub"])
async def test_mpub_and_dpub_refusals_fail_alone(
    small_nsqd: NsqdProcess, stats: Stats, kind: str
) -> None:
    topic = unique()
    async with Writer(
        [small_nsqd.tcp_address], max_msg_size=1_000_000, max_body_size=10_000_000, **FAST_RECONNECT
    ) as w:
        good = [
            (w.mpub(topic, [b"a%d" % i, b"b%d" % i]) if kind == "mpub" else w.dpub(topic, 0, b"a"))
            for i in range(20)
        ]
        bad = w.mpub(topic, [b"y" * 2048]) if kind == "mpub" else w.dpub(topic, 0, b"y" * 2048)
        results = await asyncio.wait_for(
            asyncio.gather(*good[:5], bad, *good[5:], return_exceptions=True), DEADLINE
        )
        assert isinstance(results[5], BadMessageError), results[5]
        assert [r for i, r in enumerate(results) if i != 5] == [None] * 20
        if kind == "mpub":  # a batch above --max-body-size: E_BAD_BODY, learned too
            big = [b"z" * 1000] * 5  # each fits 1,024; together 5,024 > 4,096
            with pytest.raises(BadBodyError):
                await w.mpub(topic, big)
            await wait_for(lambda: w.max_body_size == 4096, what="the body limit learned")
            with pytest.raises(MessageTooLargeError, match="max_body_size=4096"):
                await w.mpub(topic, big)
    expected = 40 if kind == "mpub" else 20
    if kind == "mpub":
        assert await stats.message_count(small_nsqd, topic) == expected
    else:  # deferred by 0 ms: counted once nsqd moved them to the topic

        async def all_there() -> bool:
            return await stats.message_count(small_nsqd, topic) == expected

        await wait_for(all_there, what="every deferred message in the topic")


async def test_a_write_that_meets_nsqds_reset_still_reads_the_refusal(
    small_nsqd: NsqdProcess,
) -> None:
    """nsqd refuses a PUB and closes; a later write meets the reset and asyncio drops the
    transport without reading. The refusal nsqd sent first is still read: the refused PUB fails
    with nsqd's BadMessageError, the ones written behind it are sent again and succeed.

    (Seen under load, where the loop's write came before its read: a ConnectionClosedError
    for the refused PUB.) Reading is held back so that the write comes first here."""
    await _the_refusal_is_read_after_the_reset(small_nsqd, {})


@pytest.mark.real_nsqd_only(
    reason="the embedded server's asyncio TLS waits for the client's close_notify before it "
    "closes TCP (Go's closes at once), and the client here holds its reading back"
)
async def test_a_write_that_meets_nsqds_reset_still_reads_the_refusal_over_tls(
    nsqd_factory: Any, tls_certs: CertBundle
) -> None:
    """The same over TLS: the connection runs TLS itself, so what is left in the socket is
    decrypted as it is read (nsqd's error frame, then its close_notify)."""
    nsqd = nsqd_factory(
        extra_args=["--max-msg-size=1024", "--max-body-size=4096"],
        tls_cert=tls_certs.server_cert,
        tls_key=tls_certs.server_key,
    )
    await _the_refusal_is_read_after_the_reset(
        nsqd, {"tls_v1": True, "tls_ca_file": str(tls_certs.ca_cert)}
    )


async def _the_refusal_is_read_after_the_reset(
    small_nsqd: NsqdProcess, options: dict[str, Any]
) -> None:
    import select

    topic = unique()
    async with Writer(
        [small_nsqd.tcp_address], max_msg_size=1_000_000, **FAST_RECONNECT, **options
    ) as w:
        (conn,) = w.connections
        transport = conn._transport
        assert transport is not None
        fd = transport.get_extra_info("socket").fileno()
        transport.pause_reading()
        events = select.poll()
        events.register(fd, select.POLLRDHUP)

        def peer(flag: int) -> bool:
            return any(e & flag for _fd, e in events.poll(0))

        refused = asyncio.ensure_future(w.pub(topic, b"x" * 2048))
        await wait_for(lambda: peer(select.POLLRDHUP), what="nsqd's refusal and close")
        behind = asyncio.ensure_future(w.pub(topic, b"behind"))  # answered by the reset
        await wait_for(lambda: peer(select.POLLERR | select.POLLHUP), what="the reset")
        last = asyncio.ensure_future(w.pub(topic, b"last"))  # its write fails: EPIPE
        results = await asyncio.wait_for(
            asyncio.gather(refused, behind, last, return_exceptions=True), DEADLINE
        )
        assert isinstance(results[0], BadMessageError), results
        assert results[1:] == [None, None]
        assert w.stats()["published"] == 2 and w.stats()["failed"] == 1
    assert small_nsqd.stats(topic=topic)["topics"][0]["message_count"] == 2


def test_sync_writer_one_oversized_among_many_fails_alone(small_nsqd: NsqdProcess) -> None:
    """The same from threads: pub_nowait futures pipelined behind the refused one succeed."""
    topic = unique()
    with SyncWriter([small_nsqd.tcp_address], max_msg_size=1_000_000, **FAST_RECONNECT) as w:
        futures = [w.pub_nowait(topic, b"m%02d" % i) for i in range(30)]
        futures.insert(7, w.pub_nowait(topic, b"x" * 2048))
        futures += [w.mpub_nowait(topic, [b"p", b"q"]), w.dpub_nowait(topic, 0, b"d")]
        errors = [f.exception(timeout=DEADLINE) for f in futures]
        assert isinstance(errors[7], BadMessageError)
        assert [e for i, e in enumerate(errors) if i != 7] == [None] * 32
        # the core learned the limit; the blocking face refuses in the calling thread
        wait_until(lambda: w.aio.max_msg_size == 1024)
        with pytest.raises(MessageTooLargeError, match="max_msg_size=1024"):
            w.pub(topic, b"x" * 2000)
        w.pub(topic, b"after")
        assert w.stats()["failed"] == 1
    assert small_nsqd.stats(topic=topic)["topics"][0]["message_count"] >= 33


# ---------------------------------------------------------------- refused before sending


async def test_an_http_port_is_named_as_such(nsqd: NsqdProcess) -> None:
    """nsqd's HTTP port answers 'HTTP/1.1 400': a WrongPortError saying so, not a frame size."""
    writer = Writer([nsqd.http_address])
    with pytest.raises(WrongPortError) as info:
        await asyncio.wait_for(writer.start(), DEADLINE)
    assert isinstance(info.value, ConnectError)
    text = str(info.value)
    assert "HTTP port" in text and "4150" in text and "max_msg_size" not in text
    await writer.close()


async def test_nsqlookupds_tcp_port_is_named_as_such(nsqlookupd: Any) -> None:
    """nsqlookupd's TCP port answers nsqd's magic with [size]"E_BAD_PROTOCOL" and no frame type
    (read as frame type 1163870785 before): a WrongPortError naming it and the ports to use."""
    from nsqclient.aio import Reader

    writer = Writer([nsqlookupd.tcp_address])
    with pytest.raises(WrongPortError) as info:
        await asyncio.wait_for(writer.start(), DEADLINE)
    text = str(info.value)
    assert "nsqlookupd's TCP port" in text and "4150" in text and "4161" in text
    await writer.close()
    reader = Reader("t", "c", nsqd_tcp_addresses=[nsqlookupd.tcp_address])
    with pytest.raises(WrongPortError, match="nsqlookupd's TCP port"):
        await asyncio.wait_for(reader.start(), DEADLINE)
    await reader.close()


@pytest.mark.parametrize(
    "addresses", [[], "", "  ", ["  "], [None], ",", ["127.0.0.1:4150", ""]], ids=repr
)
def test_empty_or_blank_addresses_are_refused(addresses: Any) -> None:
    for make in (Writer, SyncWriter):
        with pytest.raises(ConfigError, match="nsqd_tcp_addresses") as info:
            make(addresses)
        assert "127.0.0.1:4150" not in str(info.value).partition("(")[0]


def test_no_address_at_all_is_refused() -> None:
    from nsqclient.aio import Reader
    from nsqclient.sync import SyncReader

    for make in (Writer, SyncWriter):
        with pytest.raises(ConfigError, match="no nsqd address"):
            make()
    for make_reader in (Reader, SyncReader):
        with pytest.raises(ConfigError, match="no nsqd address"):
            make_reader("t", "c")
        with pytest.raises(ConfigError, match="no nsqd address"):
            make_reader("t", "c", nsqd_tcp_addresses=[], lookupd_http_addresses="")
        # one empty list beside a real address list is the common pynsq call: fine
        make_reader("t", "c", nsqd_tcp_addresses=[], lookupd_http_addresses=["127.0.0.1:4161"])


async def test_create_writer_keeps_its_explicit_defaults() -> None:
    """asyncnsq's create_writer(host=..., port=...) names its defaults: still accepted."""
    from nsqclient.compat import create_writer

    port = free_port()
    writer = await create_writer(port=port, **FAST_RECONNECT)  # nothing listens: retried
    try:
        assert writer.is_started and writer.connections == []
    finally:
        await writer.close()


# ---------------------------------------------------------------- what an operator sees


async def test_an_outage_logs_one_warning_then_recovery_at_info(
    nsqd: NsqdProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Loss: one WARNING with address and cause; many failed reconnects: one more WARNING at
    most; recovery: INFO with the outage's length."""
    caplog.set_level(logging.DEBUG, logger="nsqclient")
    async with Writer([nsqd.tcp_address], reconnect_delay=20, max_reconnect_delay=40) as writer:
        nsqd.stop()  # a clean shutdown: nsqd closes the connection itself
        await wait_for(lambda: writer.connections == [], what="the connection to drop")
        await wait_for(
            lambda: (down := writer._nodes.outages._down) and down[_addr(nsqd)].failures >= 10,
            what="ten failed reconnects",
        )
        assert writer.stats()["nsqd_down"] == [nsqd.tcp_address]
        nsqd.start()
        await wait_for(lambda: writer.connections, what="the reconnect")
        stats = writer.stats()
        assert stats["connection_losses"] == 1 and stats["reconnects"] == 1
        assert stats["nsqd_down"] == []
    address = nsqd.tcp_address
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    lost = [m for m in warnings if "lost" in m and address in m]
    assert len(lost) == 1 and "nsqd closed it" in lost[0], warnings
    cannot = [m for m in warnings if "cannot connect" in m and address in m]
    assert len(cannot) == 1, warnings  # bounded: not one per attempt
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("again after an outage of" in m and address in m for m in infos), infos


def _addr(nsqd: NsqdProcess) -> tuple[str, int]:
    host, _, port = nsqd.tcp_address.rpartition(":")
    return host, int(port)


async def test_a_tls_required_nsqd_says_to_set_tls_v1(nsqd_tls_required: NsqdProcess) -> None:
    async with Writer([nsqd_tls_required.tcp_address], **FAST_RECONNECT) as writer:
        with pytest.raises(InvalidError, match="set tls_v1=True"):
            await asyncio.wait_for(writer.pub(unique(), b"x"), DEADLINE)


async def test_auth_failed_says_the_auth_server_may_be_down(nsqd_auth: NsqdProcess) -> None:
    writer = Writer([nsqd_auth.tcp_address], auth_secret="not-a-known-secret")
    with pytest.raises(ServerAuthError, match="auth server") as info:
        await asyncio.wait_for(writer.start(), DEADLINE)  # refused: not retried forever
    assert "unreachable" in str(info.value) and info.value.code == "E_AUTH_FAILED"
    await writer.close()


async def test_auth_over_plaintext_warns_once_per_writer(
    nsqd_factory: Any, auth_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    first = nsqd_factory(auth_http_address=auth_server.address)
    second = nsqd_factory(auth_http_address=auth_server.address)
    caplog.set_level(logging.WARNING, logger="nsqclient")
    async with Writer([first.tcp_address, second.tcp_address], auth_secret="s3cret") as writer:
        await writer.pub(unique(), b"x")
        assert len(writer.connections) == 2
    plaintext = [r for r in caplog.records if "without TLS" in r.getMessage()]
    assert len(plaintext) == 1 and "tls_v1=True" in plaintext[0].getMessage()
