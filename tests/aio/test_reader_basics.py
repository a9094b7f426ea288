"""The asyncio Reader against real nsqd: delivery styles, the handler contract, responses,
max_attempts, stats and the tracker."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from nsqclient.aio import Message, Reader, ReaderState
from nsqclient.compat import create_reader
from nsqclient.errors import ConfigError
from nsqclient.testing.daemons import NsqdProcess, NsqlookupdProcess
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import MakeReader, NsqdFactory, channel_stats, client_totals, publish

pytestmark = pytest.mark.timeout(60)


async def test_asyncnsq_readme_example(nsqd: NsqdProcess) -> None:
    """The asyncnsq README consumer, unchanged, works against nsqclient."""
    topic, channel = unique(), unique()
    bodies = [b"msg %d" % i for i in range(20)]
    await publish(nsqd, topic, bodies)
    got: list[bytes] = []
    reader = await create_reader(nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=200)
    try:
        async with asyncio.timeout(DEADLINE):
            await reader.subscribe(topic, channel)
            async for message in reader.messages():
                await message.fin()
                got.append(message.body)
                if len(got) == len(bodies):
                    break
            await reader.graceful_close()
    finally:
        await reader.close()
    assert sorted(got) == sorted(bodies)
    assert reader.is_closed
    chan = channel_stats(nsqd, topic, channel)
    assert (chan["depth"], chan["in_flight_count"], chan["requeue_count"]) == (0, 0, 0)
    assert chan["message_count"] == len(bodies)


async def test_async_with_lookupd_and_async_for(
    nsqd_factory: NsqdFactory, nsqlookupd: NsqlookupdProcess
) -> None:
    nsqd = nsqd_factory(lookupd_tcp_addresses=[nsqlookupd.tcp_address])
    topic, channel = unique(), unique()
    bodies = [b"b%d" % i for i in range(50)]
    await publish(nsqd, topic, bodies)
    await asyncio.to_thread(nsqlookupd.wait_for_topic, topic, [nsqd.tcp_address])
    got = []
    async with asyncio.timeout(DEADLINE):
        async with Reader(
            topic, channel, lookupd_http_addresses=[nsqlookupd.http_address], max_in_flight=500
        ) as r:
            async for msg in r:
                assert msg.nsqd_address == nsqd.tcp_address
                got.append(msg.body)
                msg.fin()
                if len(got) == len(bodies):
                    break
    assert sorted(got) == sorted(bodies)
    assert r.state is ReaderState.CLOSED
    assert channel_stats(nsqd, topic, channel)["depth"] == 0


async def test_async_for_starts_a_reader_that_was_not_started(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()
    await publish(nsqd, topic, [b"one"])
    reader = make_reader(topic, channel, nsqd_tcp_addresses=nsqd.tcp_address)
    async with asyncio.timeout(DEADLINE):
        async for msg in reader:
            assert msg.body == b"one"
            msg.fin()
            break
        await reader.graceful_close()
    assert reader.stats()["finished"] == 1


# -- handler styles ---------------------------------------------------------------------------


_FALSY: dict[bytes, object] = {b"zero": 0, b"empty": ""}


def _sync_handler(log: list[tuple[bytes, int]]) -> Any:
    def handler(msg: Message) -> Any:
        log.append((msg.body, msg.attempts))
        if msg.body == b"raise":
            raise RuntimeError("handler failed")
        if msg.body == b"false":
            return False
        if msg.body in _FALSY:  # pynsq's reading: any false value but None requeues
            return _FALSY[msg.body]
        return 1 if msg.body == b"ok2" else None

    return handler


def _async_handler(log: list[tuple[bytes, int]]) -> Any:
    async def handler(msg: Message) -> Any:
        await asyncio.sleep(0)
        log.append((msg.body, msg.attempts))
        if msg.body == b"raise":
            raise RuntimeError("handler failed")
        if msg.body == b"false":
            return False
        if msg.body in _FALSY:
            return _FALSY[msg.body]
        return "anything but False"

    return handler


@pytest.mark.parametrize(
    ("style", "kwargs"),
    [
        ("sync", {}),
        ("sync", {"direct": True}),
        ("async", {}),
        ("async", {"concurrency": 4}),
        ("sync", {"concurrency": 2}),
    ],
)
async def test_handler_contract(
    nsqd: NsqdProcess,
    style: str,
    kwargs: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    make_reader: MakeReader,
) -> None:
    """Return (None or a true value) -> FIN, False (or 0, "") -> REQ, raise -> REQ with backoff,
    for every handler style."""
    topic, channel = unique(), unique()
    log: list[tuple[bytes, int]] = []
    handler = _sync_handler(log) if style == "sync" else _async_handler(log)
    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=10,
        backoff_multiplier=10,  # keep backoff windows short: results are not what is tested
        default_requeue_delay=60_000,  # requeued messages stay deferred during the test
    )
    reader.set_message_handler(handler, **kwargs)
    caplog.set_level(logging.ERROR, "nsqclient.reader")
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"ok1", b"raise", b"false", b"ok2", b"zero", b"empty"])
        totals = await wait_for(
            lambda: (
                (t := client_totals([nsqd], topic, channel))["finish_count"] + t["requeue_count"]
                == 6
                and t
            ),
            what="nsqd to see 6 answers",
        )
        await reader.graceful_close()
    assert sorted(log) == [
        (b"empty", 1),
        (b"false", 1),
        (b"ok1", 1),
        (b"ok2", 1),
        (b"raise", 1),
        (b"zero", 1),
    ]
    stats = reader.stats()
    assert (stats["finished"], stats["requeued"], stats["received"]) == (2, 4, 6)
    assert (totals["finish_count"], totals["requeue_count"]) == (2, 4)
    chan = channel_stats(nsqd, topic, channel)
    assert chan["deferred_count"] == 4  # REQ with the computed (default) delay
    assert any("handler failed" in (r.exc_text or "") for r in caplog.records)


async def test_coroutine_handlers_run_concurrently(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    """concurrency=N runs N coroutine handlers at once (each waits for all the others)."""
    topic, channel = unique(), unique()
    n = 4
    everyone_in = asyncio.Event()
    active = 0

    async def handler(msg: Message) -> None:
        nonlocal active
        active += 1
        if active == n:
            everyone_in.set()
        await everyone_in.wait()

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=n)
    reader.set_message_handler(handler, concurrency=n)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"x"] * n)
        await wait_for(lambda: reader.stats()["finished"] == n, what="all handlers done")
        await reader.graceful_close()
    assert everyone_in.is_set()


async def test_direct_handler_refuses_coroutines_and_messages_refuses_handlers() -> None:
    async def coro(msg: Message) -> None:
        pass

    reader = Reader("t", "c", nsqd_tcp_addresses=["127.0.0.1:1"])
    with pytest.raises(ConfigError):
        reader.set_message_handler(coro, direct=True)
    with pytest.raises(ConfigError):
        reader.set_message_handler(lambda m: None, concurrency=0)
    reader.set_message_handler(lambda m: None)
    with pytest.raises(ConfigError):
        reader.messages()


async def test_handler_takes_over_and_answers_later(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()
    taken: list[Message] = []

    def handler(msg: Message) -> None:
        msg.disable_auto_response()
        taken.append(msg)

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=5)
    reader.set_message_handler(handler)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"a", b"b"])
        await wait_for(lambda: len(taken) == 2)
        # the handlers returned, but nothing was answered: both still in flight on nsqd
        await wait_for(lambda: client_totals([nsqd], topic, channel)["in_flight_count"] == 2)
        assert not any(m.has_responded for m in taken)
        assert reader.stats()["in_flight"] == 2
        await taken[0].fin()
        await taken[1].req(60_000, backoff=False)
        await wait_for(
            lambda: (
                client_totals([nsqd], topic, channel)
                == {"finish_count": 1, "requeue_count": 1, "message_count": 2, "in_flight_count": 0}
            )
        )
        assert reader.stats()["in_flight"] == 0
        await reader.graceful_close()
    assert channel_stats(nsqd, topic, channel)["deferred_count"] == 1


async def test_second_response_is_refused_without_sending_anything(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=1)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"first"])
        it = reader.messages()
        msg = await anext(it)
        await msg.fin()
        assert msg.has_responded
        # later answers are accepted and ignored: nothing reaches nsqd
        await msg.fin()
        await msg.req()
        await msg.req(0, backoff=False)
        await msg.touch()
        # a second message round trip: nsqd handles a connection's commands in order, so any
        # stray FIN/REQ/TOUCH (and its E_*_FAILED reply) would have come before this one
        await publish(nsqd, topic, [b"second"])
        msg2 = await anext(it)
        await msg2.fin()
        await wait_for(lambda: client_totals([nsqd], topic, channel)["finish_count"] == 2)
        assert client_totals([nsqd], topic, channel)["requeue_count"] == 0
        stats = reader.stats()
        assert (stats["finished"], stats["requeued"], stats["response_errors"]) == (2, 0, 0)
        await reader.graceful_close()
    assert channel_stats(nsqd, topic, channel)["requeue_count"] == 0


# -- max_attempts -----------------------------------------------------------------------------


async def test_max_attempts_gives_up_after_the_fifth_attempt(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()
    attempts: list[int] = []
    given_up: list[Message] = []

    def handler(msg: Message) -> None:
        attempts.append(msg.attempts)
        msg.req(0)  # straight back, with backoff

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        on_giving_up=given_up.append,
        backoff_multiplier=1,  # 2 ms windows
    )
    assert reader.config.max_attempts == 5
    reader.set_message_handler(handler)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"poison"])
        await wait_for(lambda: given_up, what="the give-up hook")
        await wait_for(lambda: channel_stats(nsqd, topic, channel)["in_flight_count"] == 0)
        totals = client_totals([nsqd], topic, channel)
        await reader.graceful_close()
    assert attempts == [1, 2, 3, 4, 5]
    assert [m.attempts for m in given_up] == [6]
    assert given_up[0].has_responded
    chan = channel_stats(nsqd, topic, channel)
    assert (chan["depth"], chan["deferred_count"], chan["requeue_count"]) == (0, 0, 5)
    assert (totals["finish_count"], totals["requeue_count"], totals["message_count"]) == (1, 5, 6)
    stats = reader.stats()
    assert (stats["given_up"], stats["finished"], stats["requeued"]) == (1, 1, 5)


async def test_default_give_up_hook_logs_id_and_attempts_never_the_body(
    nsqd: NsqdProcess,
    caplog: pytest.LogCaptureFixture,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()
    body = b"top-secret-payload-" + unique().encode()
    seen: list[Message] = []

    def handler(msg: Message) -> bool:
        seen.append(msg)
        return False  # REQ with backoff (computed delay: 0 here)

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_attempts=2,
        default_requeue_delay=0,
        backoff_multiplier=1,
    )
    reader.set_message_handler(handler)
    caplog.set_level(logging.DEBUG, "nsqclient")
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [body])
        await wait_for(lambda: reader.stats()["given_up"] == 1)
        await wait_for(lambda: channel_stats(nsqd, topic, channel)["in_flight_count"] == 0)
        await reader.graceful_close()
    assert [m.attempts for m in seen] == [1, 2]
    msg_id = seen[0].id.decode()
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "giving up" in r.getMessage()
    ]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert msg_id in text and "3 attempts" in text
    assert all(body.decode() not in r.getMessage() for r in caplog.records)
    assert channel_stats(nsqd, topic, channel)["depth"] == 0


async def test_async_give_up_hook_and_failing_hook_still_fin(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()
    hooked: list[int] = []

    async def hook(msg: Message) -> None:
        await asyncio.sleep(0)
        hooked.append(msg.attempts)
        raise RuntimeError("hook trouble")  # logged, never fatal

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        on_giving_up=hook,
        max_attempts=1,
        default_requeue_delay=0,
        backoff_multiplier=1,
    )
    reader.set_message_handler(lambda m: False, direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"x"])
        await wait_for(lambda: hooked == [2])
        await wait_for(lambda: channel_stats(nsqd, topic, channel)["in_flight_count"] == 0)
        await reader.graceful_close()
    assert channel_stats(nsqd, topic, channel)["depth"] == 0


# -- stats and tracker --------------------------------------------------------------------------


async def test_stats_match_nsqd_and_tracker_is_empty_after_close(
    nsqd: NsqdProcess,
    make_reader: MakeReader,
) -> None:
    topic, channel = unique(), unique()

    def handler(msg: Message) -> Any:
        if msg.body.startswith(b"req"):
            msg.req(60_000, backoff=False)
        return None

    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=7)
    reader.set_message_handler(handler)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"fin%d" % i for i in range(12)] + [b"req1", b"req2"])
        totals = await wait_for(
            lambda: (
                (t := client_totals([nsqd], topic, channel))["finish_count"] + t["requeue_count"]
                == 14
                and t
            ),
            what="nsqd to see 14 answers",
        )
        stats = reader.stats()
        (conn_stats,) = stats["connections"]
        assert stats["max_in_flight"] == 7 and stats["total_rdy"] == 7
        assert conn_stats["rdy"] == 7 and conn_stats["address"] == nsqd.tcp_address
        await reader.graceful_close()
    assert (stats["received"], stats["finished"], stats["requeued"]) == (14, 12, 2)
    assert (stats["in_flight"], stats["queued"], stats["response_errors"]) == (0, 0, 0)
    assert (conn_stats["received"], conn_stats["finished"], conn_stats["requeued"]) == (14, 12, 2)
    assert totals == {
        "finish_count": 12,
        "requeue_count": 2,
        "message_count": 14,
        "in_flight_count": 0,
    }
    after = reader.stats()
    assert after["state"] == "closed" and after["connections"] == []
    assert len(reader.tracker) == 0 and reader.tracker.per_connection() == {}
