"""The asyncio core on uvloop: Writer and Reader against a real nsqd, plain and over every
upgrade (TLS, snappy, deflate, TLS with either), with exact counts on both sides."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
import uvloop

from nsqclient.aio import Reader, Writer
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import NsqdProcess

from .conftest import DEADLINE, unique
from .reader_support import channel_stats

MESSAGES = 200  # 100 PUB + 1 MPUB of 100


def _run_on_uvloop(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


async def _round_trip(nsqd: NsqdProcess, options: dict[str, Any]) -> dict[str, Any]:
    """Publish MESSAGES, consume them all; what each side saw."""
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
    topic, channel = unique(), unique()
    async with asyncio.timeout(DEADLINE):
        reader = Reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], **options)
        await reader.start()  # subscribed first: the channel gets every message
        async with Writer([nsqd.tcp_address], **options) as writer:
            (conn,) = writer.connections
            negotiated = conn.identify_response
            await asyncio.gather(*(writer.pub(topic, b"p%03d" % i) for i in range(100)))
            await writer.mpub(topic, [b"m%03d" % i for i in range(100)])
            published = writer.stats()["published"]
        bodies = []
        async for msg in reader:
            bodies.append(msg.body)
            await msg.fin()
            if len(bodies) == MESSAGES:
                break
        await reader.graceful_close()
    return {
        "negotiated": negotiated,
        "published": published,
        "bodies": sorted(bodies),
        "reader": reader.stats(),
        "nsqd": channel_stats(nsqd, topic, channel),
    }


def _check(result: dict[str, Any]) -> None:
    expected = sorted([b"p%03d" % i for i in range(100)] + [b"m%03d" % i for i in range(100)])
    assert result["published"] == MESSAGES
    assert result["bodies"] == expected  # every message once
    reader = result["reader"]
    assert (reader["received"], reader["finished"], reader["in_flight"]) == (MESSAGES,) * 2 + (0,)
    nsqd = result["nsqd"]
    assert (nsqd["message_count"], nsqd["depth"], nsqd["in_flight_count"]) == (MESSAGES, 0, 0)


@pytest.mark.one_backend
@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="plain"),
        pytest.param({"snappy": True}, id="snappy"),
        pytest.param({"deflate": True, "deflate_level": 6}, id="deflate"),
    ],
)
def test_writer_and_reader_on_uvloop(nsqd: NsqdProcess, options: dict[str, Any]) -> None:
    result = _run_on_uvloop(_round_trip(nsqd, options))
    _check(result)
    negotiated = result["negotiated"]
    assert negotiated.snappy is bool(options.get("snappy"))
    assert negotiated.deflate is bool(options.get("deflate"))


@pytest.mark.one_backend
@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="tls"),
        pytest.param({"snappy": True}, id="tls-snappy"),
        pytest.param({"deflate": True}, id="tls-deflate"),
    ],
)
def test_writer_and_reader_on_uvloop_over_tls(
    nsqd_tls: NsqdProcess, tls_certs: CertBundle, options: dict[str, Any]
) -> None:
    tls = {"tls_v1": True, "tls_ca_file": str(tls_certs.ca_cert)}
    result = _run_on_uvloop(_round_trip(nsqd_tls, {**tls, **options}))
    _check(result)
    negotiated = result["negotiated"]
    assert negotiated.tls_v1
    assert negotiated.snappy is bool(options.get("snappy"))
    assert negotiated.deflate is bool(options.get("deflate"))


def test_stop_on_signals_on_uvloop_closes_and_keeps_the_applications_loop_handler(
    nsqd: NsqdProcess,
) -> None:
    """uvloop's handler table is private: the Reader's SIGTERM handler goes in at the Python
    level, so an application's ``loop.add_signal_handler`` is never lost (uvloop runs it too)."""

    async def main() -> tuple[bool, list[int]]:
        loop = asyncio.get_running_loop()
        seen: list[int] = []
        got = asyncio.Event()

        def application(n: int) -> None:
            seen.append(n)
            got.set()

        loop.add_signal_handler(signal.SIGTERM, application, 1)
        try:
            reader = Reader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address])
            async with asyncio.timeout(DEADLINE):
                await reader.start()
                reader.stop_on_signals()
                signal.raise_signal(signal.SIGTERM)
                await reader.wait_closed()  # the Reader's handler ran: it closed gracefully
                await got.wait()  # and uvloop ran the application's as well
                got.clear()
                signal.raise_signal(signal.SIGTERM)  # restored: the application's alone now
                await got.wait()
            return reader.is_closed, seen
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        closed, seen = _run_on_uvloop(main())
    finally:
        signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)
    assert closed and seen == [1, 1]
