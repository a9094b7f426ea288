"""A graceful close waits only for those who can still answer (issue 10, point 2).

Messages a task took by iterating get up to ``close_timeout`` while that task runs; once it is
done (returned, cancelled) or is itself waiting for the close, what it holds is requeued at once.
Whether the consumer runs in its own task depends on asyncio details (``asyncio.wait_for`` wraps
the coroutine in a task on 3.11, not on 3.12+), so every shape is checked: the rule must be the
same. Each close here has a 30 s ``close_timeout`` (the default): a stall would blow the
generous 5 s bound.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable

import pytest

from nsqclient.aio import Message, Reader, ReaderState
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import MakeReader, channel_stats, publish, recover_all

pytestmark = pytest.mark.timeout(60)

COUNT = 20
STALL_BOUND = 5.0  # seconds; the close timeout is 30 s, "at once" is milliseconds


async def _setup(nsqd: NsqdProcess, make_reader: MakeReader) -> tuple[Reader, str, str]:
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"m%d" % i for i in range(COUNT)])
    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=COUNT,
        close_timeout=30_000,
    )
    return reader, topic, channel


async def _take_all(reader: Reader, held: list[Message]) -> None:
    """Iterate until every message is held (none answered), then return."""
    async for msg in reader:
        held.append(msg)
        if len(held) == COUNT:
            return


async def _closes_at_once_and_all_come_back(
    reader: Reader, nsqd: NsqdProcess, topic: str, channel: str, held: list[Message]
) -> None:
    started = time.monotonic()
    await reader.graceful_close()
    elapsed = time.monotonic() - started
    assert elapsed < STALL_BOUND, f"the close waited {elapsed:.1f}s for a holder that had ended"
    assert len(held) == COUNT and all(m.has_responded for m in held)
    stats = reader.stats()
    assert (stats["requeued"], stats["in_flight"]) == (COUNT, 0)
    chan = channel_stats(nsqd, topic, channel)
    assert (chan["in_flight_count"], chan["timeout_count"]) == (0, 0)
    got = await recover_all(nsqd, topic, channel, COUNT)
    assert sorted(m.body for m in got) == sorted(b"m%d" % i for i in range(COUNT))


async def test_close_after_a_wait_for_consumer_returned(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """``await asyncio.wait_for(consume(), 30)``: on 3.11 consume() ran in its own task."""
    reader, topic, channel = await _setup(nsqd, make_reader)
    held: list[Message] = []
    async with asyncio.timeout(DEADLINE):
        await asyncio.wait_for(_take_all(reader, held), 30)
        await _closes_at_once_and_all_come_back(reader, nsqd, topic, channel, held)


@pytest.mark.parametrize("ending", ["returned", "cancelled"])
async def test_close_after_a_consumer_task_ended(
    nsqd: NsqdProcess, make_reader: MakeReader, ending: str
) -> None:
    reader, topic, channel = await _setup(nsqd, make_reader)
    held: list[Message] = []
    async with asyncio.timeout(DEADLINE):
        if ending == "returned":
            await asyncio.create_task(_take_all(reader, held))
        else:

            async def take_then_hang() -> None:
                await _take_all(reader, held)
                await asyncio.Event().wait()  # never set: cancelled below

            consumer = asyncio.create_task(take_then_hang())
            await wait_for(lambda: len(held) == COUNT, what="all messages taken")
            consumer.cancel()
            with pytest.raises(asyncio.CancelledError):
                await consumer
        await _closes_at_once_and_all_come_back(reader, nsqd, topic, channel, held)


async def test_close_releases_a_consumer_blocked_on_its_next_message(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """The consumer holds everything and waits for more: the close ends its iteration, the task
    ends, and the close does not wait out the timeout for it."""
    reader, topic, channel = await _setup(nsqd, make_reader)
    held: list[Message] = []

    async def consume() -> None:
        async for msg in reader:
            held.append(msg)  # noqa: PERF401 - held must fill while the iteration runs

    async with asyncio.timeout(DEADLINE):
        consumer = asyncio.create_task(consume())
        await wait_for(lambda: len(held) == COUNT, what="all messages taken")
        await asyncio.sleep(0)  # the consumer is back in __anext__, waiting
        await _closes_at_once_and_all_come_back(reader, nsqd, topic, channel, held)
        await consumer


async def test_close_from_the_iterating_task_inside_async_with(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """A signal (or anyone) started the close; the iterating task then leaves ``async with``
    without answering what it holds: it waits for the close, so nobody can answer."""
    reader, topic, channel = await _setup(nsqd, make_reader)
    held: list[Message] = []
    async with asyncio.timeout(DEADLINE):
        other: asyncio.Task[None] | None = None
        started = time.monotonic()
        async with reader:
            async for msg in reader:
                held.append(msg)
                if len(held) == COUNT:
                    # as a signal would: from a context of its own, not this task's
                    other = asyncio.create_task(
                        reader.graceful_close(), context=contextvars.Context()
                    )
                    await wait_for(lambda: reader.state is not ReaderState.RUNNING)
                    break
        assert other is not None
        await other
        assert time.monotonic() - started < STALL_BOUND
    assert all(m.has_responded for m in held)
    assert reader.stats()["requeued"] == COUNT
    got = await recover_all(nsqd, topic, channel, COUNT)
    assert len(got) == COUNT


async def _close_waits_for_a_live_holder(
    nsqd: NsqdProcess, make_reader: MakeReader, answer: Callable[[Message], Awaitable[None]]
) -> Reader:
    """The consumer holds one message and awaits something else while another task closes."""
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"held"])
    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], close_timeout=30_000
    )
    holding, go = asyncio.Event(), asyncio.Event()

    async def consume() -> None:
        async for msg in reader:
            holding.set()
            await go.wait()
            await answer(msg)

    async with asyncio.timeout(DEADLINE):
        consumer = asyncio.create_task(consume())
        await holding.wait()
        closing = asyncio.create_task(reader.graceful_close())
        # the close is now waiting for answers (not requeueing at once)
        await wait_for(lambda: reader.tracker.has_waiters, what="the close to wait for answers")
        assert not closing.done()
        go.set()
        await closing
        await consumer
    return reader


async def test_close_waits_for_a_consumer_that_is_still_running(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    async def fin(msg: Message) -> None:
        await msg.fin()

    reader = await _close_waits_for_a_live_holder(nsqd, make_reader, fin)
    stats = reader.stats()
    assert (stats["finished"], stats["requeued"], stats["in_flight"]) == (1, 0, 0)


async def test_close_waits_for_a_running_consumer_only_up_to_the_timeout(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"held"])
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address])
    holding = asyncio.Event()

    async def consume() -> None:
        async for _msg in reader:
            holding.set()
            await asyncio.Event().wait()  # never answers

    async with asyncio.timeout(DEADLINE):
        consumer = asyncio.create_task(consume())
        await holding.wait()
        await reader.graceful_close(timeout=0.3)  # bounded: returns, the message requeued
        consumer.cancel()
    assert reader.stats()["requeued"] == 1
    chan = channel_stats(nsqd, topic, channel)
    assert (chan["in_flight_count"], chan["requeue_count"]) == (0, 1)


@pytest.mark.parametrize("through", ["wait_for", "gather"])
async def test_close_asked_by_the_iterating_task_through_a_task_of_its_own(
    nsqd: NsqdProcess, make_reader: MakeReader, through: str
) -> None:
    """``await asyncio.wait_for(reader.graceful_close(), 30)`` from the iterating task runs the
    close in a task wait_for made on 3.11 (not on 3.12+); ``gather`` does so everywhere. The
    iterating task still counts as the one closing: what it holds is requeued at once."""
    reader, topic, channel = await _setup(nsqd, make_reader)
    held: list[Message] = []
    async with asyncio.timeout(DEADLINE):
        async for msg in reader:
            held.append(msg)
            if len(held) == COUNT:
                break
        started = time.monotonic()
        if through == "wait_for":
            await asyncio.wait_for(reader.graceful_close(), 30)
        else:
            await asyncio.gather(reader.graceful_close())
        assert time.monotonic() - started < STALL_BOUND
    assert all(m.has_responded for m in held)
    assert reader.stats()["requeued"] == COUNT
    got = await recover_all(nsqd, topic, channel, COUNT)
    assert len(got) == COUNT
