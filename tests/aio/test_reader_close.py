"""graceful_close() and close(): nothing delivered is left to nsqd's msg_timeout, running
handlers get to finish (bounded), and closing is safe from every state."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from collections.abc import Awaitable, Callable, Iterator

import pytest

from nsqclient.aio import Message, Reader, ReaderState
from nsqclient.aio.connection import Connection
from nsqclient.errors import ClosedError
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, frozen, unique
from .reader_support import (
    FAST,
    MakeReader,
    channel_stats,
    client_totals,
    publish,
    recover_all,
    wait_no_tasks_left,
)

pytestmark = pytest.mark.timeout(60)


async def test_messages_held_by_the_iterating_task_are_requeued_when_it_closes(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    topic, channel = unique(), unique()
    bodies = [b"m%d" % i for i in range(10)]
    await publish(nsqd, topic, bodies)
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=10)
    held: list[Message] = []
    async with asyncio.timeout(DEADLINE):
        async for msg in reader:
            held.append(msg)  # consumed, never finished
            if len(held) == len(bodies):
                break
        # the closing task is the iterating one: what it holds is requeued at once (with the
        # default 30 s close timeout, waiting for it would blow the deadline)
        await reader.graceful_close()
    assert all(m.has_responded for m in held)
    chan = channel_stats(nsqd, topic, channel)
    assert (chan["requeue_count"], chan["timeout_count"], chan["in_flight_count"]) == (10, 0, 0)
    got = await recover_all(nsqd, topic, channel, len(bodies))
    assert sorted(m.body for m in got) == bodies
    assert all(m.attempts == 2 for m in got)


async def test_requeue_in_hand_from_another_task(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"a", b"b", b"c"])
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=3)
    held: list[Message] = []

    async def consume() -> None:
        async for msg in reader:
            held.append(msg)  # noqa: PERF401 - held must fill while the iteration runs

    async with asyncio.timeout(DEADLINE):
        consumer = asyncio.create_task(consume())
        await wait_for(lambda: len(held) == 3)
        await reader.graceful_close(requeue_in_hand=True)
        await consumer  # the iteration ended
    assert reader.stats()["requeued"] == 3
    got = await recover_all(nsqd, topic, channel, 3)
    assert sorted(m.body for m in got) == [b"a", b"b", b"c"]


async def test_closing_from_another_task_waits_for_what_the_consumer_holds(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"held"])
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address])
    holding = asyncio.Event()
    finish_it = asyncio.Event()
    ended = asyncio.Event()

    async def consume() -> None:
        async for msg in reader:
            holding.set()
            await finish_it.wait()
            await msg.fin()
        ended.set()

    async with asyncio.timeout(DEADLINE):
        consumer = asyncio.create_task(consume())
        await holding.wait()
        closing = asyncio.create_task(reader.graceful_close())
        await wait_for(lambda: reader.state is ReaderState.CLOSING)
        await wait_for(
            lambda: channel_stats(nsqd, topic, channel)["clients"][0]["ready_count"] == 0,
            what="RDY 0 first",
        )
        assert not closing.done()
        finish_it.set()
        await closing
        await consumer
    assert ended.is_set()
    stats = reader.stats()
    assert (stats["finished"], stats["requeued"]) == (1, 0)
    assert channel_stats(nsqd, topic, channel)["requeue_count"] == 0


async def test_iterating_task_may_keep_what_it_holds_with_requeue_in_hand_false(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """requeue_in_hand=False: the holder's messages get the timeout, then are requeued."""
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"x"])
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address])
    async with asyncio.timeout(DEADLINE):
        msg = await anext(aiter(reader))
        await reader.graceful_close(0.2, requeue_in_hand=False)
    assert msg.has_responded
    assert reader.stats()["requeued"] == 1
    assert channel_stats(nsqd, topic, channel)["requeue_count"] == 1


async def test_running_handlers_finish_first_and_queued_messages_are_requeued_at_once(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    topic, channel = unique(), unique()
    started: list[bytes] = []
    release = asyncio.Event()

    async def handler(msg: Message) -> None:
        started.append(msg.body)
        await release.wait()

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=5)
    reader.set_message_handler(handler)  # one worker: one running, four queued
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"m%d" % i for i in range(5)])
        await wait_for(lambda: reader.stats()["received"] == 5 and len(started) == 1)
        cls_results = _record_cls(reader.connections)
        closing = asyncio.create_task(reader.graceful_close(timeout=30))
        # the four queued messages go back at once, while the handler still runs
        await wait_for(lambda: channel_stats(nsqd, topic, channel)["requeue_count"] == 4)
        chan = channel_stats(nsqd, topic, channel)
        assert chan["in_flight_count"] == 1 and chan["clients"][0]["ready_count"] == 0
        assert not closing.done() and cls_results == []
        release.set()
        await closing
    assert len(started) == 1
    stats = reader.stats()
    assert (stats["finished"], stats["requeued"], stats["in_flight"]) == (1, 4, 0)
    assert cls_results == [True]  # CLS answered by CLOSE_WAIT
    await wait_for(lambda: channel_stats(nsqd, topic, channel)["client_count"] == 0)
    chan = channel_stats(nsqd, topic, channel)
    assert (chan["depth"], chan["in_flight_count"], chan["requeue_count"]) == (4, 0, 4)


def _record_cls(conns: list[Connection]) -> list[bool]:
    """Spy on each connection's CLS: the list gets True when nsqd answered CLOSE_WAIT."""
    results: list[bool] = []
    for conn in conns:
        original: Callable[[float], Awaitable[bool]] = conn.cls

        async def cls(
            timeout: float, _original: Callable[[float], Awaitable[bool]] = original
        ) -> bool:
            result = await _original(timeout)
            results.append(result)
            return result

        conn.cls = cls  # type: ignore[method-assign]
    return results


async def test_handlers_running_past_the_timeout_are_cancelled_and_requeued(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    topic, channel = unique(), unique()
    cancelled: list[bytes] = []
    never = asyncio.Event()

    async def stuck(msg: Message) -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(msg.body)
            raise

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=2)
    reader.set_message_handler(stuck, concurrency=2)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"a", b"b"])
        await wait_for(lambda: reader.stats()["in_flight"] == 2)
        await reader.graceful_close(timeout=0.2)
    assert sorted(cancelled) == [b"a", b"b"]
    assert reader.stats()["requeued"] == 2
    assert channel_stats(nsqd, topic, channel)["requeue_count"] == 2
    got = await recover_all(nsqd, topic, channel, 2)
    assert sorted(m.body for m in got) == [b"a", b"b"]


async def test_close_is_immediate(nsqd: NsqdProcess, make_reader: MakeReader) -> None:
    topic, channel = unique(), unique()
    never = asyncio.Event()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(msg: Message) -> None:
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=3)
    reader.set_message_handler(stuck)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"a", b"b", b"c"])
        await wait_for(lambda: reader.stats()["received"] == 3)
        await started.wait()  # a handler is running: close() must cancel it
        closing = reader.close()  # no await needed
        assert reader.state is ReaderState.CLOSING
        assert reader.close() is closing  # idempotent
        await reader.wait_closed()
        await cancelled.wait()
    assert reader.is_closed
    assert reader.stats()["requeued"] == 3 and len(reader.tracker) == 0
    got = await recover_all(nsqd, topic, channel, 3)
    assert sorted(m.body for m in got) == [b"a", b"b", b"c"]


# -- safe from any state --------------------------------------------------------------------------


async def test_closing_a_reader_that_never_started() -> None:
    reader = Reader("t", "c", nsqd_tcp_addresses=["127.0.0.1:4150"])
    await reader.graceful_close()
    await reader.graceful_close()
    await reader.close()
    reader.close()
    assert reader.is_closed
    with pytest.raises(ClosedError):
        await reader.start()
    assert [m async for m in reader.messages()] == []


async def test_graceful_close_twice_and_concurrently(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    baseline = set(asyncio.all_tasks())
    topic, channel = unique(), unique()
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], **FAST)
    reader.set_message_handler(lambda m: None)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"x"])
        await wait_for(lambda: client_totals([nsqd], topic, channel)["finish_count"] == 1)
        await asyncio.gather(reader.graceful_close(), reader.graceful_close(), reader.close())
        await reader.graceful_close()
        await reader.close()
        await wait_no_tasks_left(baseline)
    assert reader.is_closed and reader.connections == []


@pytest.mark.parametrize("closer", ["graceful_close", "close"])
async def test_closing_while_connecting(
    nsqd: NsqdProcess, make_reader: MakeReader, closer: str
) -> None:
    """nsqd is frozen: the TCP connect succeeds (kernel backlog) but the handshake hangs. Closing
    must not wait for it, and start() must return."""
    baseline = set(asyncio.all_tasks())
    reader = make_reader(unique(), unique(), nsqd_tcp_addresses=[nsqd.tcp_address])
    async with asyncio.timeout(DEADLINE):
        with frozen(nsqd):
            starting = asyncio.create_task(reader.start())
            await wait_for(lambda: reader.stats()["connecting"] == 1)
            if closer == "graceful_close":
                await reader.graceful_close()
            else:
                await reader.close()
            await asyncio.gather(starting, return_exceptions=True)
            assert reader.is_closed and reader.connections == []
            await wait_no_tasks_left(baseline)


@pytest.mark.parametrize("how", ["graceful_close", "close"])
async def test_a_handler_may_close_its_own_reader(
    nsqd: NsqdProcess, make_reader: MakeReader, how: str
) -> None:
    """Closing from inside a handler neither deadlocks nor waits out the close timeout."""
    topic, channel = unique(), unique()
    handled: list[bytes] = []

    async def handler(msg: Message) -> None:
        handled.append(msg.body)
        if msg.body == b"stop":
            if how == "graceful_close":
                await reader.graceful_close()  # returns at once; finishes after we return
            else:
                reader.close()

    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], close_timeout=60_000
    )
    reader.set_message_handler(handler)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"stop"])
        await reader.wait_closed()
    assert handled == [b"stop"]
    stats = reader.stats()
    if how == "graceful_close":
        assert (stats["finished"], stats["requeued"]) == (1, 0)
    else:  # close() requeued what was in hand, the handler's own message included
        assert (stats["finished"], stats["requeued"]) == (0, 1)


@pytest.fixture
def unanswered_address() -> Iterator[str]:
    """A loopback address whose TCP connect hangs: the listener's accept queue is full, so
    the kernel drops further SYNs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        for s in (*fillers, server):
            s.close()


@pytest.mark.parametrize("closer", ["graceful_close", "close"])
async def test_closing_while_dialing(
    unanswered_address: str, make_reader: MakeReader, closer: str
) -> None:
    baseline = set(asyncio.all_tasks())
    reader = make_reader(
        unique(), unique(), nsqd_tcp_addresses=[unanswered_address], dial_timeout=30_000
    )
    async with asyncio.timeout(DEADLINE):
        starting = asyncio.create_task(reader.start())
        await wait_for(lambda: reader.stats()["connecting"] == 1)
        if closer == "graceful_close":
            await reader.graceful_close()
        else:
            await reader.close()
        await asyncio.gather(starting, return_exceptions=True)
        assert reader.is_closed and reader.connections == []
        await wait_no_tasks_left(baseline)
    gc.collect()  # an unclosed socket would surface here as a ResourceWarning (an error)
