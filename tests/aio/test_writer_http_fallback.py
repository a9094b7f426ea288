"""The Writer's HTTP fallback against real nsqd: with no TCP connection up, publishes go to nsqd's
``/pub`` and ``/mpub`` at once, acknowledged or raising like any other publish; while TCP is up
the fallback is never used; when neither way works the error is typed and bounded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nsqclient.aio import Writer
from nsqclient.errors import InvalidTopicError, NoConnectionsError
from nsqclient.protocol import commands
from nsqclient.testing.daemons import free_port

from .conftest import Stats, consume, unique, wait_for

pytestmark = pytest.mark.timeout(60)

FAST_RECONNECT = {"reconnect_delay": 50, "max_reconnect_delay": 300}


def nowhere() -> str:
    """A loopback TCP address nothing listens on."""
    return f"127.0.0.1:{free_port()}"


@pytest.mark.slow
@pytest.mark.one_backend
async def test_with_no_tcp_connection_every_kind_of_publish_goes_over_http(
    nsqd: Any, stats: Stats
) -> None:
    topic, channel = unique(), unique("c")
    bodies = [b"pub", b"binary\n\x00\xff mpub 1", b"mpub 2", b"dpub", b"nowait"]
    async with Writer(
        [nowhere()], http_fallback_addresses=[nsqd.http_address], **FAST_RECONNECT
    ) as writer:  # connecting does not fail: the fallback can take publishes
        assert writer.connections == []
        await writer.pub(topic, bodies[0])
        await writer.mpub(topic, [bodies[1], bodies[2]])
        await writer.dpub(topic, 50, bodies[3])
        fut = writer.publish_nowait(commands.pub(topic, bodies[4]))
        assert fut is not None
        assert await fut == b"OK"
        assert writer.stats()["published_over_http"] == 5
        assert writer.stats()["published"] == 5 and writer.stats()["failed"] == 0
        with pytest.raises(InvalidTopicError):  # still refused before anything is sent
            await writer.pub("bad topic!", b"x")
    assert await stats.message_count(nsqd, topic) == 5
    got = await consume(nsqd, topic, channel, len(bodies))
    assert sorted(m.body for m in got) == sorted(bodies)


async def test_tcp_is_preferred_and_http_takes_over_only_while_it_is_down(
    nsqd_factory: Any, stats: Stats
) -> None:
    tcp_node, http_node = nsqd_factory(), nsqd_factory()
    topic = unique()
    async with Writer(
        [tcp_node.tcp_address], http_fallback_addresses=[http_node.http_address], **FAST_RECONNECT
    ) as writer:
        for i in range(10):
            await writer.pub(topic, b"tcp %d" % i)
        assert writer.published_over_http == 0
        assert await stats.message_count(tcp_node, topic) == 10

        tcp_node.kill()
        await wait_for(lambda: not writer.connections, what="the writer to see nsqd gone")
        for i in range(10):  # no waiting for a reconnect, no error
            await writer.pub(topic, b"http %d" % i)
        assert writer.published_over_http == 10
        assert await stats.message_count(http_node, topic) == 10

        tcp_node.restart()
        await wait_for(lambda: bool(writer.connections), what="the writer to reconnect")
        await wait_for(
            lambda: all(c.is_open for c in writer.connections), what="the connection to be ready"
        )
        await writer.pub(topic, b"tcp again")
        assert writer.published_over_http == 10
        assert await stats.message_count(tcp_node, topic) == 1  # the restarted nsqd's count
        assert writer.stats()["failed"] == 0


async def test_with_neither_way_up_a_publish_raises_a_typed_error_in_time() -> None:
    writer = Writer(
        [nowhere()],
        http_fallback_addresses=[f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"],
        publish_timeout=3_000,
        **FAST_RECONNECT,
    )
    try:
        await writer.start()
        with pytest.raises(NoConnectionsError, match="HTTP fallback"):
            await asyncio.wait_for(writer.pub(unique(), b"x"), 10)
        assert writer.stats()["failed"] == 1 and writer.stats()["published"] == 0
        assert writer.outstanding == 0
    finally:
        await writer.close()


async def test_graceful_close_waits_for_http_publishes(nsqd: Any, stats: Stats) -> None:
    topic = unique()
    writer = Writer([nowhere()], http_fallback_addresses=[nsqd.http_address], **FAST_RECONNECT)
    await writer.start()
    futures = [writer.publish_nowait(commands.pub(topic, b"%d" % i)) for i in range(20)]
    assert all(f is not None for f in futures)
    await writer.graceful_close()
    assert all(f is not None and f.done() and f.result() == b"OK" for f in futures)
    assert writer.published_over_http == 20
    assert await stats.message_count(nsqd, topic) == 20
