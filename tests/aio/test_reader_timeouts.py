"""nsqd's in-flight timeout seen through the Reader: TOUCH, auto-touch, and answers that come too
late (E_FIN_FAILED is reported, never fatal).

nsqd runs with ``--msg-timeout=2s``; the scenarios hold messages for a few seconds on purpose
(that holding is the behaviour under test, not a synchronisation).
"""

from __future__ import annotations

import asyncio

import pytest

from nsqclient.aio import Message
from nsqclient.aio.connection import ConnectionState
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import MakeReader, NsqdFactory, channel_stats, client_totals, publish

pytestmark = pytest.mark.timeout(60)

MSG_TIMEOUT = 2.0


@pytest.fixture
def short_nsqd(nsqd_factory: NsqdFactory) -> NsqdProcess:
    return nsqd_factory(extra_args=[f"--msg-timeout={MSG_TIMEOUT:g}s"])


@pytest.mark.one_backend
@pytest.mark.slow  # counts one timeout of the untouched message in 5 s: nsqd's queue scan
async def test_touch_keeps_a_message_past_msg_timeout(
    short_nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    """A message touched every second for 5 s is not redelivered; an untouched one is."""
    nsqd = short_nsqd
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"touched", b"untouched"])
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=2)
    async with asyncio.timeout(DEADLINE + 10):
        await reader.start()
        it = reader.messages()
        first, second = await anext(it), await anext(it)
        touched = first if first.body == b"touched" else second
        loop = asyncio.get_running_loop()
        held_until = loop.time() + 2.5 * MSG_TIMEOUT
        while loop.time() < held_until:  # hold it 5 s, touching every second
            await touched.touch()
            await asyncio.sleep(MSG_TIMEOUT / 2)
        redelivered = await anext(it)  # the untouched one came back long ago
        assert redelivered.body == b"untouched" and redelivered.attempts == 2
        await touched.fin()
        await redelivered.fin()
        totals = await wait_for(
            lambda: (t := client_totals([nsqd], topic, channel))["finish_count"] == 2 and t
        )
        stats = reader.stats()
        await reader.graceful_close()
    chan = channel_stats(nsqd, topic, channel)
    assert chan["timeout_count"] == 1  # only the untouched message
    assert totals["message_count"] == 3
    assert stats["response_errors"] == 0 and stats["received"] == 3


@pytest.mark.one_backend
@pytest.mark.slow
async def test_auto_touch_keeps_a_slow_coroutine_handler_alive(
    short_nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    nsqd = short_nsqd
    topic, channel = unique(), unique()
    attempts: list[int] = []

    async def slow(msg: Message) -> None:
        attempts.append(msg.attempts)
        await asyncio.sleep(2 * MSG_TIMEOUT)  # the handler's own slowness

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address])
    reader.set_message_handler(slow, auto_touch=True)
    async with asyncio.timeout(DEADLINE + 10):
        await reader.start()
        await publish(nsqd, topic, [b"slow"])
        await wait_for(lambda: client_totals([nsqd], topic, channel)["finish_count"] == 1)
        await reader.graceful_close()
    chan = channel_stats(nsqd, topic, channel)
    assert chan["timeout_count"] == 0 and chan["depth"] == 0
    assert attempts == [1]
    assert reader.stats()["response_errors"] == 0


@pytest.mark.one_backend
@pytest.mark.slow
async def test_auto_touch_stops_at_auto_touch_max(
    short_nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """Past ``auto_touch_max`` the message is left to nsqd's timeout and redelivered; the late
    answer of the first delivery must not answer the redelivery (same id, same connection)."""
    nsqd = short_nsqd
    topic, channel = unique(), unique()
    attempts: list[int] = []
    release = {1: asyncio.Event(), 2: asyncio.Event()}
    returned: list[int] = []

    async def handler(msg: Message) -> None:
        attempts.append(msg.attempts)
        await release[msg.attempts].wait()
        returned.append(msg.attempts)

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=2)
    reader.set_message_handler(
        handler, concurrency=2, auto_touch=True, auto_touch_max=MSG_TIMEOUT / 2
    )
    async with asyncio.timeout(DEADLINE + 10):
        await reader.start()
        await publish(nsqd, topic, [b"slow"])
        await wait_for(
            lambda: channel_stats(nsqd, topic, channel)["timeout_count"] == 1,
            what="nsqd to time the message out",
        )
        await wait_for(lambda: attempts == [1, 2], what="the redelivery to reach a handler")
        release[1].set()  # the first delivery's handler returns late: FIN for a stale delivery
        await wait_for(lambda: returned == [1])
        # the redelivery is still in flight, on nsqd and in the tracker
        assert reader.stats()["in_flight"] == 1
        assert channel_stats(nsqd, topic, channel)["in_flight_count"] == 1
        release[2].set()
        totals = await wait_for(
            lambda: (t := client_totals([nsqd], topic, channel))["finish_count"] == 1 and t
        )
        assert reader.stats()["in_flight"] == 0
        await reader.graceful_close()
    assert totals["message_count"] == 2
    assert channel_stats(nsqd, topic, channel)["depth"] == 0


@pytest.mark.one_backend
@pytest.mark.slow
async def test_fin_after_the_message_timed_out_is_reported_not_fatal(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"late"])
    # msg_timeout via IDENTIFY (1 s, nsqd's minimum) keeps this one quick
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], msg_timeout=1000)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        it = reader.messages()
        msg = await anext(it)
        reader.set_max_in_flight(0)  # so nsqd cannot hand the timed-out message straight back
        await wait_for(lambda: channel_stats(nsqd, topic, channel)["timeout_count"] == 1)
        await msg.fin()
        await wait_for(lambda: reader.stats()["response_errors"] == 1, what="E_FIN_FAILED")
        (conn,) = reader.connections
        assert conn.state is ConnectionState.SUBSCRIBED  # non-fatal
        reader.set_max_in_flight(1)
        again = await anext(it)
        assert again.id == msg.id and again.attempts == 2
        await again.fin()
        await wait_for(lambda: client_totals([nsqd], topic, channel)["finish_count"] == 1)
        await reader.graceful_close()
    assert reader.connections == []
    assert channel_stats(nsqd, topic, channel)["depth"] == 0
