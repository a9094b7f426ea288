"""The publish contract of the asyncio Writer (issue 22): ``mpub`` takes a list of bodies and
refuses a single one, bad timeouts are refused, and every failure's ``sent`` says whether nsqd
may have seen the publish, against real nsqd (or the embedded server)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nsqclient import errors
from nsqclient.aio import Writer
from nsqclient.errors import (
    ConnectionClosedError,
    InvalidArgumentError,
    InvalidInputError,
    NoConnectionsError,
    NotSentTimeoutError,
    NSQTimeoutError,
)
from nsqclient.protocol import commands
from nsqclient.testing.daemons import NsqdProcess, free_port

from .conftest import DEADLINE, Stats, consume, frozen, unique, wait_for

pytestmark = pytest.mark.timeout(60)

SINGLE_BODIES = ["abc", b"abc", bytearray(b"abc"), memoryview(b"abc")]


async def test_mpub_takes_any_iterable_of_bodies(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.mpub(topic, [b"a", "b"])
        await writer.mpub(topic, (b"c", bytearray(b"d")))
        await writer.mpub(topic, (b for b in [b"e", b"f", b"g"]), timeout=5)
        assert await stats.message_count(nsqd, topic) == 7
        assert writer.stats()["published"] == 7


@pytest.mark.parametrize("single", SINGLE_BODIES, ids=lambda b: type(b).__name__)
async def test_mpub_refuses_a_single_body_before_sending(
    nsqd: NsqdProcess, stats: Stats, single: Any
) -> None:
    """A bare str/bytes is one body: before, a str was split into one message per character
    (SyncWriter) and bytes failed with "got int"."""
    topic = unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.pub(topic, b"first")  # the topic exists: its count shows what arrives
        [conn] = writer.connections
        with pytest.raises(InvalidInputError, match="wrap it in a list") as info:
            await writer.mpub(topic, single)
        assert info.value.sent is False
        with pytest.raises(TypeError):  # asyncnsq's variadic form is gone
            await writer.mpub(topic, b"a", b"b")  # type: ignore[call-overload]
        assert await stats.message_count(nsqd, topic) == 1
        assert writer.connections == [conn] and conn.is_open  # no error frame either
        assert writer.stats()["outstanding"] == 0


def test_the_encoder_is_the_one_place_that_refuses_a_single_body() -> None:
    for single in SINGLE_BODIES:
        with pytest.raises(InvalidArgumentError, match="wrap it in a list"):
            commands.batch_bodies(single)
        with pytest.raises(InvalidArgumentError, match="wrap it in a list"):
            commands.mpub("t", single)  # type: ignore[arg-type]
    batch = [b"a"]
    assert commands.batch_bodies(batch) is batch  # the common call: no copy
    assert commands.batch_bodies(iter([b"a", b"b"])) == [b"a", b"b"]


@pytest.mark.parametrize("timeout", [-1, -0.5, float("nan"), "1", True])
async def test_bad_timeouts_are_refused_on_every_publish_method(
    nsqd: NsqdProcess, stats: Stats, timeout: Any
) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.pub(topic, b"first")
        calls = [
            lambda: writer.pub(topic, b"x", timeout=timeout),
            lambda: writer.mpub(topic, [b"x"], timeout=timeout),
            lambda: writer.dpub(topic, 10, b"x", timeout=timeout),
        ]
        for call in calls:
            with pytest.raises(InvalidArgumentError, match="timeout"):
                await call()
        with pytest.raises(InvalidArgumentError, match="timeout"):
            writer.publish_nowait(commands.pub(topic, b"x"), 1, timeout)
        assert await stats.message_count(nsqd, topic) == 1


def test_every_error_says_whether_it_was_sent() -> None:
    """``sent``: one idea across the tree (False: nsqd never saw it, retrying is safe)."""
    never = [
        errors.InvalidInputError("x"),
        errors.ConfigError("x"),
        errors.NoConnectionsError("x"),
        errors.NotSentTimeoutError("x"),
        errors.ClosedError("x"),
        errors.ConnectError("x"),
        errors.HTTPConnectError("x", url="http://h", sent=False),
    ]
    maybe = [
        errors.ConnectionClosedError("x"),
        errors.NSQTimeoutError("x"),
        errors.ProtocolError("x"),
        errors.error_from_frame("E_PUB_FAILED nope"),  # seen and refused: not stored
        errors.HTTPConnectError("x", url="http://h"),
        errors.HTTPTimeoutError("x", url="http://h"),
        errors.ClosedError("x", sent=True),
    ]
    assert [e.sent for e in never] == [False] * len(never)
    assert [e.sent for e in maybe] == [True] * len(maybe)
    assert issubclass(NotSentTimeoutError, NSQTimeoutError)  # except TimeoutError still works
    assert errors.NSQTimeoutError("x", sent=False).sent is False


async def test_a_publish_waiting_for_a_slot_times_out_as_never_sent(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    """The first publish is on the wire to a frozen nsqd (sent: may or may not be stored);
    the second waits for max_pending_publishes and times out before it is written."""
    topic = unique()
    async with Writer([nsqd.tcp_address], max_pending_publishes=1) as writer:
        await writer.pub(topic, b"warm-up")
        with frozen(nsqd):
            first = asyncio.create_task(writer.pub(topic, b"on-the-wire", timeout=1.0))
            await wait_for(lambda: writer.outstanding == 1, what="the first publish sent")
            with pytest.raises(NotSentTimeoutError, match="never sent") as second:
                await asyncio.wait_for(writer.pub(topic, b"waiting", timeout=0.2), DEADLINE)
            assert second.value.sent is False
            # a timeout, or the connection dropped as stuck: either way "may or may not"
            with pytest.raises((NSQTimeoutError, ConnectionClosedError)) as info:
                await asyncio.wait_for(first, DEADLINE)
            assert info.value.sent is True and not isinstance(info.value, NotSentTimeoutError)
        assert writer.stats()["failed"] == 2
        await writer.pub(topic, b"after", timeout=DEADLINE)
        count = await stats.message_count(nsqd, topic)
        bodies = [m.body for m in await consume(nsqd, topic, unique("c"), count)]
        assert b"waiting" not in bodies and {b"warm-up", b"after"} <= set(bodies)


async def test_no_connection_is_never_sent() -> None:
    async with Writer([f"127.0.0.1:{free_port()}"], reconnect_delay=50) as writer:
        with pytest.raises(NoConnectionsError) as info:
            await asyncio.wait_for(writer.pub(unique(), b"x", timeout=0.2), DEADLINE)
        assert info.value.sent is False
        assert writer.stats()["failed"] == 1


async def test_a_publish_to_an_nsqd_that_went_down_raises_a_connection_error(
    nsqd: NsqdProcess,
) -> None:
    """Issue 51: ``except ConnectionError`` around a publish (a web view's 503) must catch
    "nsqd is down", which is NoConnectionsError once the Writer has no connection left."""
    async with Writer([nsqd.tcp_address], reconnect_delay=50) as writer:
        await writer.pub(unique(), b"while up")
        nsqd.stop()
        await wait_for(lambda: writer.stats()["nsqd_down"], what="the Writer to see nsqd down")
        with pytest.raises(ConnectionError) as info:
            await asyncio.wait_for(writer.pub(unique(), b"x", timeout=0.2), DEADLINE)
        assert isinstance(info.value, NoConnectionsError) and info.value.sent is False
