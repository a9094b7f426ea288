"""Damaged frames from nsqd (through the FaultProxy): a typed ProtocolError, the connection
dropped and replaced, no hang, the frame-size bound kept, other connections left alone.

A damaged length field that stays under the frame-size bound leaves a partial frame that never
completes: liveness is judged on decoded frames, so such a connection is dropped after two
heartbeat intervals even while bytes keep arriving. A response that is not ``OK`` where a
publish waits for its acknowledgement, or any response when nothing waits, is a ProtocolError,
never an acknowledgement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.aio.connection import Connection
from nsqclient.errors import ConnectionClosedError, FrameTooLargeError, ProtocolError
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, Stats, unique
from .fault_support import (
    FAST_CLIENT,
    HEARTBEAT_MS,
    MARGIN,
    NSQD_FAST_REDELIVERY,
    Ledger,
    drain,
    publish_one,
    wait_replaced,
)
from .reader_support import wait_all_finished

pytestmark = pytest.mark.timeout(60)

ProxyFactory = Any  # the nsq_fault_proxy_factory fixture


def cause_chain(exc: BaseException | None) -> list[BaseException]:
    found = []
    while exc is not None:
        found.append(exc)
        exc = exc.__cause__
    return found


def only(writer: Writer) -> Connection:
    (conn,) = writer.connections
    return conn


@pytest.mark.one_backend
@pytest.mark.parametrize("delta", [1_000, 200_000])
async def test_writer_drops_a_connection_jammed_by_a_damaged_size_field(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, stats: Stats, delta: int
) -> None:
    """The ack's size grows by ``delta`` (under the frame-size bound): the frame never
    completes while heartbeats keep bytes arriving. The Writer keeps publishing; the connection
    must be replaced after about two heartbeat intervals, and every call is bounded."""
    topic, ledger, timeout = unique(), Ledger(), 1.5
    loop = asyncio.get_running_loop()
    async with Writer([nsq_fault_proxy.address], **FAST_CLIENT) as writer:
        assert await publish_one(writer, ledger, topic, "pub", timeout)
        first = only(writer)
        nsq_fault_proxy.change_frame_size(delta, frame="response")
        armed = loop.time()
        while loop.time() - armed < 10 and (first.is_open or not writer.connections):
            await publish_one(writer, ledger, topic, "pub", timeout)
            await asyncio.sleep(0.1)  # a publisher that keeps going, as applications do
        replaced_after = loop.time() - armed
        assert not first.is_open, "the jammed connection was never dropped"
        assert replaced_after < 2 * HEARTBEAT_MS / 1000 + timeout + 2 * MARGIN
        await wait_replaced(lambda: writer.connections, first)
        assert await publish_one(writer, ledger, topic, "pub", timeout)
        assert nsq_fault_proxy.counters().frames_resized == 1
    ledger.check(await drain(nsqd, topic, stats))


@pytest.mark.one_backend
async def test_writer_replaces_a_connection_that_acknowledges_nothing(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, stats: Stats
) -> None:
    """Heartbeats far apart (nsqd's default 30 s), the ack's size damaged: no frame completes,
    so only the publishes notice. Once the oldest one is past its timeout with nothing answered
    for ``publish_timeout``, the connection is dead: replaced, not kept for a minute."""
    topic, ledger = unique(), Ledger()
    options = {**FAST_CLIENT, "heartbeat_interval": 30_000, "publish_timeout": 1_500}
    loop = asyncio.get_running_loop()
    async with Writer([nsq_fault_proxy.address], **options) as writer:
        assert await publish_one(writer, ledger, topic, "pub", 1.5)
        first = only(writer)
        nsq_fault_proxy.change_frame_size(1_000, frame="response")
        armed = loop.time()
        assert not await publish_one(writer, ledger, topic, "pub", 1.5)
        await wait_replaced(lambda: writer.connections, first, timeout=1.5 + 2 * MARGIN)
        assert loop.time() - armed < 1.5 + 2 * MARGIN
        assert isinstance(first.close_exception, TimeoutError)
        assert await publish_one(writer, ledger, topic, "pub", 1.5)
    ledger.check(await drain(nsqd, topic, stats))


async def test_writer_protocol_error_on_a_response_that_is_not_ok(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, stats: Stats
) -> None:
    topic = unique()
    async with Writer([nsq_fault_proxy.address], **FAST_CLIENT) as writer:
        await writer.pub(topic, b"first")
        first = only(writer)
        nsq_fault_proxy.replace_next_frame(b'{"not":"an ack"}')
        with pytest.raises(ProtocolError) as info:
            await asyncio.wait_for(writer.pub(topic, b"damaged ack"), DEADLINE)
        assert "OK" in str(info.value)
        assert writer.stats()["failed"] == 1 and writer.stats()["published"] == 1
        await wait_replaced(lambda: writer.connections, first)
        await writer.pub(topic, b"after", timeout=DEADLINE)
    # nsqd did store the one whose ack was damaged: "may or may not have been published"
    assert sorted(await drain(nsqd, topic, stats)) == [b"after", b"damaged ack", b"first"]


@pytest.mark.one_backend
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.inject_frame(0, b"OK"), id="response-when-nothing-pending"),
        pytest.param(lambda p: p.inject_frame(0, b"CLOSE_WAIT"), id="close-wait-uncalled"),
        pytest.param(lambda p: p.inject_bytes(b"\x00\x00\x00\x02zz"), id="garbage"),
        pytest.param(lambda p: p.inject_frame(7, b"??"), id="unknown-frame-type"),
    ],
)
async def test_writer_idle_connection_dropped_on_an_unsolicited_or_bad_frame(
    nsq_fault_proxy: FaultProxy, damage: Any
) -> None:
    async with Writer([nsq_fault_proxy.address], **FAST_CLIENT) as writer:
        await writer.pub(unique(), b"x")
        first = only(writer)
        assert damage(nsq_fault_proxy) == 1
        await wait_for(lambda: not first.is_open, what="the connection to be dropped")
        assert isinstance(first.close_exception, ProtocolError)
        await wait_replaced(lambda: writer.connections, first)
        await writer.pub(unique(), b"y", timeout=DEADLINE)


async def test_writer_frame_above_the_size_bound_is_refused_unbuffered(
    nsq_fault_proxy: FaultProxy,
) -> None:
    async with Writer([nsq_fault_proxy.address], max_msg_size=10_000, **FAST_CLIENT) as writer:
        await writer.pub(unique(), b"x")
        first = only(writer)
        nsq_fault_proxy.change_frame_size(50_000_000, frame="response")
        with pytest.raises(ConnectionClosedError) as info:
            await asyncio.wait_for(writer.pub(unique(), b"y"), DEADLINE)
        assert any(isinstance(e, FrameTooLargeError) for e in cause_chain(info.value))
        assert first.buffered_bytes < 10_000
        await wait_replaced(lambda: writer.connections, first)


async def test_damage_on_one_connection_leaves_the_others_alone(
    nsqd: NsqdProcess, nsq_fault_proxy_factory: ProxyFactory, stats: Stats
) -> None:
    damaged, healthy = nsq_fault_proxy_factory(nsqd), nsq_fault_proxy_factory(nsqd)
    topic, ledger = unique(), Ledger()
    async with Writer([damaged.address, healthy.address], **FAST_CLIENT) as writer:
        await wait_for(lambda: len(writer.connections) == 2, what="two connections")
        by_proxy = {c.port: c for c in writer.connections}
        bad, good = by_proxy[damaged.port], by_proxy[healthy.port]
        damaged.inject_bytes(b"\xff" * 8)
        await wait_for(lambda: not bad.is_open, what="the damaged connection to drop")
        for _ in range(20):
            assert await publish_one(writer, ledger, topic, "pub", 5.0)
        assert good.is_open and good in writer.connections and good.close_exception is None
    ledger.check(await drain(nsqd, topic, stats))


# ---------------------------------------------------------------- toward a Reader


# A jammed Reader sends no NOP either, so nsqd may time it out (EOF) just before we do.
_JAMMED = (TimeoutError, type(None))
#: each damage toward the Reader, in turn, and what the dropped connection must have died of
READER_DAMAGE: list[tuple[str, Callable[[FaultProxy], object], Any]] = [
    ("size+1000", lambda p: p.change_frame_size(1_000, "message"), _JAMMED),
    ("junk", lambda p: p.inject_bytes(b"\x00\x00\x00\x09\x00\x00\x00\x05junk!"), ProtocolError),
    ("unsolicited json", lambda p: p.inject_frame(0, b'{"surprise":1}'), ProtocolError),
    ("too large", lambda p: p.change_frame_size(10**8, "message"), FrameTooLargeError),
]


@pytest.mark.one_backend
async def test_reader_replaces_damaged_connections_and_finishes_everything(
    nsqd_factory: Any, nsq_fault_proxy_factory: ProxyFactory, stats: Stats
) -> None:
    """Each damage in turn on the live connection: dropped with the right error, replaced,
    consumption goes on; in the end every message is finished (the ones in flight on a dropped
    connection come back after nsqd's --msg-timeout) and RDY never exceeded max_in_flight."""
    nsqd = nsqd_factory(extra_args=NSQD_FAST_REDELIVERY)
    proxy = nsq_fault_proxy_factory(nsqd)
    topic, channel = unique(), unique("c")
    bodies = [b"%d" % i for i in range(400)]
    got: set[bytes] = set()
    count = [0]
    reader = Reader(
        topic, channel, nsqd_tcp_addresses=[proxy.address], max_in_flight=5, **FAST_CLIENT
    )

    async def handler(msg: Any) -> None:
        await asyncio.sleep(0.005)  # slow enough that frames are still coming when damaged
        got.add(msg.body)
        count[0] += 1

    reader.set_message_handler(handler)
    try:
        await reader.start()
        async with Writer([nsqd.tcp_address]) as writer:
            await writer.mpub(topic, bodies)
        for name, damage, why in READER_DAMAGE:
            target = count[0] + 5
            await wait_for(lambda t=target: count[0] >= t, what=f"deliveries before {name}")
            first = next(c for c in reader.connections if c.is_open)
            damage(proxy)
            await wait_for(lambda c=first: not c.is_open, what=f"the {name} connection to drop")
            assert isinstance(first.close_exception, why), (name, first.close_exception)
            await wait_replaced(lambda: reader.connections, first, what=f"a new one after {name}")
            assert all(c.rdy <= 5 for c in reader.connections)
        await wait_for(lambda: got == set(bodies), what="every message, after redelivery")
        await wait_all_finished(nsqd, topic, channel)
    finally:
        await reader.graceful_close()


async def test_frames_after_a_forged_fatal_error_never_turn_acks_into_resends(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, stats: Stats
) -> None:
    """A forged E_INVALID in front of nsqd's real OKs for three pipelined PUBs, in one chunk.
    nsqd answers nothing after a fatal error, so the OKs behind it mean the stream is damaged:
    the Writer must not take the three as "never executed" and send them again (each returned
    OK once and was stored twice). Every one of them raises "may or may not" instead."""
    topic, ledger, timeout = unique(), Ledger(), 5.0
    loop = asyncio.get_running_loop()
    async with Writer([nsq_fault_proxy.address], **FAST_CLIENT) as writer:
        assert await publish_one(writer, ledger, topic, "pub", timeout)
        first = only(writer)
        stall = nsq_fault_proxy.stall()
        bodies = [ledger.next_body("pipelined") for _ in range(3)]
        start = loop.time()
        calls = [
            asyncio.create_task(
                ledger.call([b], writer.pub(topic, b, timeout=timeout), timeout, start)
            )
            for b in bodies
        ]
        await wait_for(lambda: first.pending_requests == 3, what="three PUBs on the wire")
        # an operation that never applies (a Writer gets no messages) makes the proxy hold the
        # injected frame for the front of nsqd's next bytes: the three OKs
        hold = nsq_fault_proxy.replace_next_frame(b"unused", frame="message")
        assert nsq_fault_proxy.inject_frame(1, b"E_INVALID forged by the test") == 1
        stall.undo()
        results = await asyncio.wait_for(asyncio.gather(*calls), DEADLINE)
        hold.undo()
        assert results == [False, False, False], ledger.errors
        assert writer.resent == 0
        assert isinstance(first.close_exception, ProtocolError)
        assert "after the fatal error" in str(first.close_exception)
        await wait_replaced(lambda: writer.connections, first)
        assert await publish_one(writer, ledger, topic, "pub", timeout)
    stored = await drain(nsqd, topic, stats)
    ledger.check(stored)
    # nsqd did store all three (its OKs were real): each raised "may or may not", stored once
    assert sorted(b for b in stored if b in bodies) == sorted(bodies)
