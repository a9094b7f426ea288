"""go-nsq's backoff state machine, carried out by the Reader against real nsqd (RDY read back
from nsqd's ``/stats``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nsqclient.aio import Message, Reader
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import (
    FAST,
    MakeReader,
    NsqdFactory,
    channel_stats,
    client_totals,
    publish,
    rdy_snapshot,
    rdy_total,
    wait_connected,
    wait_rdy,
)

pytestmark = pytest.mark.timeout(60)


def _level(reader: Reader) -> int:
    return int(reader.stats()["backoff_level"])


async def test_failure_stops_every_connection_then_tests_with_rdy_1_and_success_resumes(
    nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    nsqds = [nsqd_factory(), nsqd_factory()]
    a, b = (n.tcp_address for n in nsqds)
    topic, channel = unique(), unique()
    handled: list[bytes] = []

    def handler(msg: Message) -> None:
        handled.append(msg.body)
        if msg.body == b"fail":
            raise RuntimeError("processing failed")

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[a, b],
        max_in_flight=4,
        backoff_multiplier=500,  # level 1 = a 1 s window: long enough to be seen in /stats
        default_requeue_delay=60_000,  # the failed message stays deferred
        **FAST,
    )
    reader.set_message_handler(handler)
    snapshots: list[dict[str, list[int]]] = []

    async def sample() -> dict[str, list[int]]:
        # let the Reader's end-of-iteration write (the RDY it just decided) go out first
        await asyncio.sleep(0)
        snapshot = rdy_snapshot(nsqds, topic, channel)
        if reader.stats()["in_backoff"]:
            snapshots.append(snapshot)
        return snapshot

    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await wait_rdy(nsqds, topic, channel, {a: [2], b: [2]})
        await publish(nsqds[0], topic, [b"fail"])

        # the failure: RDY 0 on every connection for the backoff window ...
        async def everywhere_zero() -> bool:
            return bool(reader.stats()["in_backoff"]) and await sample() == {a: [0], b: [0]}

        async def test_rdy_one() -> bool:
            return rdy_total(await sample()) == 1

        await wait_for(everywhere_zero, what="RDY 0 everywhere")
        # ... then RDY 1 on exactly one connection, to test the water
        await wait_for(test_rdy_one, what="the test RDY 1")
        assert _level(reader) == 1 and reader.stats()["total_rdy"] == 1
        # success on the tested connection leaves backoff: every connection back to its share
        for nsqd in nsqds:
            await publish(nsqd, topic, [b"ok"])
        await wait_for(lambda: handled.count(b"ok") == 2)
        await wait_rdy(nsqds, topic, channel, {a: [2], b: [2]})
        assert _level(reader) == 0 and not reader.stats()["in_backoff"]
        await reader.graceful_close()
    assert all(rdy_total(s) <= 1 for s in snapshots), snapshots
    assert handled == [b"fail", b"ok", b"ok"]


async def test_levels_walk_up_on_failures_and_down_on_successes(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """fail, fail, fail, then succeed: levels 1, 2, 3, then back down one per success; during
    backoff every message arrives with RDY 1 (read from nsqd while the handler runs)."""
    topic, channel = unique(), unique()
    seen: list[tuple[bytes, int, int]] = []  # (body, backoff level, nsqd RDY) at handling time

    async def handler(msg: Message) -> Any:
        rdy = rdy_total(rdy_snapshot([nsqd], topic, channel))
        seen.append((msg.body, _level(reader), rdy))
        if msg.body == b"bad":
            if msg.attempts <= 3:
                raise RuntimeError("not yet")
            await publish(nsqd, topic, [b"good1", b"good2", b"good3"])
        return None

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=4,
        backoff_multiplier=50,  # 100 ms, 200 ms, 400 ms windows
        default_requeue_delay=0,  # failed messages come straight back
    )
    reader.set_message_handler(handler)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await wait_rdy([nsqd], topic, channel, {nsqd.tcp_address: [4]})
        await publish(nsqd, topic, [b"bad"])
        await wait_for(lambda: len(seen) == 7, what="all deliveries")
        await wait_rdy([nsqd], topic, channel, {nsqd.tcp_address: [4]})
        await reader.graceful_close()
    bad = [(level, rdy) for body, level, rdy in seen if body == b"bad"]
    good = [(level, rdy) for body, level, rdy in seen if body != b"bad"]
    assert bad == [(0, 4), (1, 1), (2, 1), (3, 1)]
    # after the success at level 3: level 2 then 1, one message at a time; then level 0
    assert [level for level, _ in good] == [2, 1, 0]
    assert [rdy for level, rdy in good if level > 0] == [1, 1]
    assert _level(reader) == 0


async def test_neutral_requeues_do_not_move_backoff(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    topic, channel = unique(), unique()
    script = {
        # body -> what to do on attempt 1, 2, 3, 4
        b"steady": ["neutral", "neutral", "ok"],
        b"failing": ["raise", "neutral", "neutral", "ok"],
    }
    seen: list[tuple[bytes, int, int]] = []

    def handler(msg: Message) -> None:
        level_before = _level(reader)
        action = script[msg.body][msg.attempts - 1]
        if action == "raise":
            seen.append((msg.body, msg.attempts, level_before))
            raise RuntimeError("failed once")
        if action == "neutral":
            msg.req(0, backoff=False)
            assert _level(reader) == level_before
        seen.append((msg.body, msg.attempts, level_before))

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=3,
        backoff_multiplier=50,
        default_requeue_delay=0,
    )
    reader.set_message_handler(handler, direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        # outside backoff: neutral requeues leave RDY alone
        await publish(nsqd, topic, [b"steady"])
        await wait_for(lambda: len(seen) == 3)
        assert rdy_snapshot([nsqd], topic, channel) == {nsqd.tcp_address: [3]}
        assert [lvl for _, _, lvl in seen] == [0, 0, 0]
        # inside backoff: neither the level nor the test RDY moves until a real result
        await publish(nsqd, topic, [b"failing"])
        await wait_for(lambda: len(seen) == 7)
        await wait_rdy([nsqd], topic, channel, {nsqd.tcp_address: [3]})
        await reader.graceful_close()
    assert seen[3:] == [
        (b"failing", 1, 0),
        (b"failing", 2, 1),
        (b"failing", 3, 1),
        (b"failing", 4, 1),
    ]
    assert _level(reader) == 0
    assert channel_stats(nsqd, topic, channel)["requeue_count"] == 5


@pytest.mark.slow
async def test_backoff_survives_a_reconnect(
    nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    """The nsqd holding the test RDY 1 restarts during backoff: the other connection takes the
    test RDY over, the reconnected one waits at RDY 0, and success restores both shares."""
    nsqds = [nsqd_factory(), nsqd_factory()]
    addresses = [n.tcp_address for n in nsqds]
    topic, channel = unique(), unique()
    handled: list[tuple[bytes, int]] = []

    def handler(msg: Message) -> None:
        handled.append((msg.body, msg.attempts))
        if msg.body == b"fail" and msg.attempts == 1:
            raise RuntimeError("failed")

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=addresses,
        max_in_flight=4,
        backoff_multiplier=200,
        default_requeue_delay=60_000,
        **FAST,
    )
    reader.set_message_handler(handler)
    async with asyncio.timeout(DEADLINE + 15):
        await reader.start()
        await wait_rdy(nsqds, topic, channel, {a: [2] for a in addresses})
        await publish(nsqds[0], topic, [b"fail"])
        holder = await wait_for(
            lambda: (
                reader.stats()["in_backoff"]
                and rdy_total(s := rdy_snapshot(nsqds, topic, channel)) == 1
                and next(a for a, v in s.items() if v == [1])
            ),
            what="the test RDY 1",
        )
        restarted = nsqds[addresses.index(holder)]
        other = next(a for a in addresses if a != holder)
        await asyncio.to_thread(restarted.restart)
        await wait_connected(reader, 2)
        assert reader.stats()["in_backoff"]
        # the survivor holds the test RDY; the reconnected connection waits at 0
        await wait_rdy(nsqds, topic, channel, {other: [1], holder: [0]})
        for nsqd in nsqds:
            await publish(nsqd, topic, [b"ok"])
        await wait_rdy(nsqds, topic, channel, {a: [2] for a in addresses})
        await wait_for(lambda: [b for b, _ in handled].count(b"ok") == 2)
        assert not reader.stats()["in_backoff"]
        await reader.graceful_close()
    assert (b"fail", 1) in handled
    totals = client_totals(nsqds, topic, channel)
    assert totals["in_flight_count"] == 0


async def test_redistribution_during_backoff_moves_the_test_rdy_without_adding_any(
    nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    """In backoff with several connections, redistribution takes the test RDY 1 off an idle
    connection and gives it to another: it moves, and the total stays at 1."""
    nsqds = [nsqd_factory() for _ in range(3)]
    topic, channel = unique(), unique()
    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[n.tcp_address for n in nsqds],
        max_in_flight=6,
        backoff_multiplier=50,
        default_requeue_delay=60_000,
        **FAST,  # idle after 1 s, redistribution every 50 ms
    )
    reader.set_message_handler(lambda m: False, direct=True)  # every message fails
    holders: set[str] = set()

    async def sample() -> bool:
        # the RDY writes the Reader just decided leave at the end of its loop iteration: let
        # them go out before reading nsqd, or the cut shows the RDY from before the backoff
        await asyncio.sleep(0)
        snapshot = rdy_snapshot(nsqds, topic, channel)
        assert rdy_total(snapshot) <= 1, snapshot
        holders.update(a for a, v in snapshot.items() if v == [1])
        return len(holders) >= 2

    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await wait_rdy(nsqds, topic, channel, {n.tcp_address: [2] for n in nsqds})
        await publish(nsqds[0], topic, [b"fail"])
        await wait_for(lambda: reader.stats()["in_backoff"])
        await wait_for(sample, what="the test RDY to move to a second connection")
        assert reader.stats()["in_backoff"]
        await reader.graceful_close()
