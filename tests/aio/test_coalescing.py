"""Publish coalescing (``coalesce=True``) against real nsqd and the embedded server: concurrent PUBs
to one topic leave as one MPUB and every caller still gets its own outcome, as without it.

Refused batches (nsqd stores an MPUB all or none) are sent again one PUB each so that only the
offending message fails; a cut with a batch in flight fails each caller with its own "may or may
not" error; mixed topics, DPUB and MPUB beside coalesced PUBs; the HTTP fallback's /mpub; close
with batches still open; the sync facade's threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest

from nsqclient.aio import Writer
from nsqclient.errors import (
    BadMessageError,
    ConnectionClosedError,
    HTTPError,
    NSQTimeoutError,
)
from nsqclient.sync import SyncWriter
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess, free_port

from .conftest import DEADLINE, Stats, consume, frozen, unique, wait_for

pytestmark = pytest.mark.timeout(60)

FAST_RECONNECT = {"reconnect_delay": 50, "max_reconnect_delay": 300}


@pytest.fixture
def small_nsqd(nsqd_factory: Any) -> NsqdProcess:
    """An nsqd that accepts messages of at most 1,024 bytes."""
    return nsqd_factory(extra_args=["--max-msg-size=1024"])  # type: ignore[no-any-return]


async def test_concurrent_pubs_leave_as_one_mpub_each_acknowledged(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address], coalesce=True) as w:
        results = await asyncio.gather(*(w.pub(topic, b"m%d" % i) for i in range(200)))
        assert results == [None] * 200
        s = w.stats()
        # the 200 tasks ran in one loop iteration: the first went alone, as its PUB (nothing of
        # the topic was on its way), one MPUB carried the 199 others
        assert (s["coalesced_batches"], s["coalesced_messages"]) == (1, 199)
        assert (s["published"], s["failed"], s["outstanding"]) == (200, 0, 0)
    assert await stats.message_count(nsqd, topic) == 200
    got = await consume(nsqd, topic, "c", 200)
    assert sorted(m.body for m in got) == sorted(b"m%d" % i for i in range(200))


async def test_a_lone_pub_goes_as_a_pub(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address], coalesce=True) as w:
        for i in range(20):
            await w.pub(topic, b"%d" % i)
        assert w.stats()["coalesced_batches"] == 0
        assert w.stats()["published"] == 20
    assert await stats.message_count(nsqd, topic) == 20


async def test_mixed_topics_dpub_and_mpub_beside_coalesced_pubs(
    nsqd: NsqdProcess, stats: Stats
) -> None:
    topics = [unique() for _ in range(3)]
    async with Writer([nsqd.tcp_address], coalesce=True) as w:
        calls = [w.pub(topics[i % 3], b"p%d" % i) for i in range(30)]
        calls.append(w.mpub(topics[0], [b"a", b"b"]))
        calls.append(w.dpub(topics[1], 0, b"d"))
        assert await asyncio.gather(*calls) == [None] * 32
        s = w.stats()
        assert (s["coalesced_batches"], s["coalesced_messages"]) == (3, 27)  # 1 alone each
        assert s["published"] == 33
    counts = [await stats.message_count(nsqd, t) for t in topics]
    assert counts[0] == 12 and counts[2] == 10

    # the deferred message is counted once nsqd moves it to the topic (delay 0: at once)
    async def deferred_in() -> bool:
        return await stats.message_count(nsqd, topics[1]) == 11

    await wait_for(deferred_in, what="the DPUB")


async def test_a_refused_batch_fails_only_its_offending_message(
    small_nsqd: NsqdProcess, stats: Stats
) -> None:
    topic = unique()
    async with Writer(
        [small_nsqd.tcp_address], coalesce=True, max_msg_size=1_000_000, **FAST_RECONNECT
    ) as w:
        bodies = [b"x" * (2048 if i == 7 else 100) for i in range(50)]
        results = await asyncio.gather(*(w.pub(topic, b) for b in bodies), return_exceptions=True)
        errors = [(i, r) for i, r in enumerate(results) if r is not None]
        assert len(errors) == 1 and errors[0][0] == 7
        assert isinstance(errors[0][1], BadMessageError)  # what its own PUB gets
        assert "PUB message too big" in str(errors[0][1])
        s = w.stats()
        assert s["coalesced_split"] == 1
        assert (s["published"], s["failed"]) == (49, 1)
    assert await stats.message_count(small_nsqd, topic) == 49


async def test_a_cut_with_a_batch_in_flight_fails_each_caller_as_maybe_stored(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, stats: Stats
) -> None:
    topic = unique()
    async with Writer([nsq_fault_proxy.address], coalesce=True, **FAST_RECONNECT) as w:
        await w.pub(topic, b"first")  # the topic exists: its count below is the batch's
        # nsqd gets the publishes and stores them; their OKs do not reach the Writer
        with nsq_fault_proxy.slow(down=0.1):
            tasks = [asyncio.create_task(w.pub(topic, b"b%d" % i)) for i in range(20)]

            async def stored() -> bool:
                return await stats.message_count(nsqd, topic) == 21

            await wait_for(stored, what="nsqd stored the PUB and the batch")
            assert not any(t.done() for t in tasks)
            nsq_fault_proxy.cut()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, ConnectionClosedError) for r in results), results
        assert all(r.sent for r in results if isinstance(r, ConnectionClosedError))
        assert "may or may not" in str(results[1])
        assert len({id(r) for r in results}) == 20  # each caller raises its own
        s = w.stats()
        # the first went alone, as its PUB; the 19 others in one MPUB
        assert (s["coalesced_batches"], s["coalesced_messages"]) == (1, 19)
        assert (s["published"], s["failed"]) == (1, 20)
        await w.pub(topic, b"after")  # reconnected
    assert await stats.message_count(nsqd, topic) == 22


async def test_no_reply_in_time_times_each_caller_out(nsqd: NsqdProcess) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address], coalesce=True, **FAST_RECONNECT) as w:
        await w.pub(topic, b"first")
        with frozen(nsqd):
            results = await asyncio.gather(
                *(w.pub(topic, b"t", timeout=0.5) for _ in range(10)), return_exceptions=True
            )
        assert all(isinstance(r, NSQTimeoutError) and r.sent for r in results), results
        assert len({id(r) for r in results}) == 10
        assert w.stats()["failed"] == 10


@pytest.mark.parametrize("how", ["graceful_close", "close"])
async def test_closing_sends_open_batches_at_once(
    nsqd: NsqdProcess, stats: Stats, how: str
) -> None:
    """With the longest ``linger`` (1 s), closing does not wait for it: what is queued goes."""
    topic = unique()
    w = Writer([nsqd.tcp_address], coalesce=True, linger=1000)
    await w.start()
    tasks = [asyncio.create_task(w.pub(topic, b"c%d" % i)) for i in range(10)]
    await asyncio.sleep(0)  # the tasks queued their PUBs; linger holds them
    assert w.outstanding == 10 and w.stats()["coalesced_batches"] == 0
    if how == "graceful_close":
        await w.graceful_close(timeout=DEADLINE)
        assert await asyncio.gather(*tasks) == [None] * 10
        assert await stats.message_count(nsqd, topic) == 10
    else:
        await w.close()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # written before the connection closed, unanswered: the usual "may or may not"
        assert all(r is None or isinstance(r, ConnectionClosedError) for r in results), results
    assert w.stats()["coalesced_batches"] == 1


async def test_linger_gathers_pubs_of_later_iterations(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address], coalesce=True, linger=1000) as w:
        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(w.pub(topic, b"l%d" % i)))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        # the first went alone; the 4 others waited for each other
        assert (w.stats()["coalesced_batches"], w.stats()["coalesced_messages"]) == (1, 4)
    assert await stats.message_count(nsqd, topic) == 5


async def test_the_http_fallback_takes_batches_as_mpub(nsqd: NsqdProcess, stats: Stats) -> None:
    topic = unique()
    dead = f"127.0.0.1:{free_port()}"
    async with Writer(
        [dead], http_fallback_addresses=[nsqd.http_address], coalesce=True, dial_timeout=500
    ) as w:
        assert await asyncio.gather(*(w.pub(topic, b"h%d" % i) for i in range(30))) == [None] * 30
        s = w.stats()
        assert (s["coalesced_batches"], s["coalesced_messages"]) == (1, 30)
        assert s["published_over_http"] == 30 and s["published"] == 30
    assert await stats.message_count(nsqd, topic) == 30


async def test_a_refused_http_batch_fails_only_its_offending_message(
    small_nsqd: NsqdProcess, stats: Stats
) -> None:
    topic = unique()
    dead = f"127.0.0.1:{free_port()}"
    async with Writer(
        [dead],
        http_fallback_addresses=[small_nsqd.http_address],
        coalesce=True,
        dial_timeout=500,
        max_msg_size=1_000_000,
    ) as w:
        bodies = [b"y" * (2048 if i == 3 else 10) for i in range(12)]
        results = await asyncio.gather(*(w.pub(topic, b) for b in bodies), return_exceptions=True)
        errors = [(i, r) for i, r in enumerate(results) if r is not None]
        assert len(errors) == 1 and errors[0][0] == 3, results
        assert isinstance(errors[0][1], HTTPError)
        assert w.stats()["coalesced_split"] == 1 and w.stats()["published"] == 11
    assert await stats.message_count(small_nsqd, topic) == 11


def test_sync_threads_publishes_arriving_together_leave_as_one_mpub(nsqd: NsqdProcess) -> None:
    """Publishes queued while the loop is busy are drained at once: one MPUB; each thread's
    ``pub`` returns once its OK is in, or raises its own error."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address], coalesce=True) as w:
        w.pub(topic, b"warm")
        hold = threading.Event()
        w._portal.loop.call_soon_threadsafe(hold.wait, DEADLINE)  # the loop is busy meanwhile
        futures = [w.pub_nowait(topic, b"s%d" % i) for i in range(40)]
        hold.set()
        for f in futures:
            assert f.result(DEADLINE) is None
        s = w.stats()
        assert (s["coalesced_batches"], s["coalesced_messages"]) == (1, 39)  # 1 went alone
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: w.pub(topic, b"t%d" % i), range(400)))
        assert w.stats()["published"] == 441 and w.stats()["failed"] == 0
    assert nsqd.stats(topic=topic)["topics"][0]["message_count"] == 441


def test_sync_refused_batch_fails_only_its_offending_message(small_nsqd: NsqdProcess) -> None:
    topic = unique()
    with SyncWriter(
        [small_nsqd.tcp_address], coalesce=True, max_msg_size=1_000_000, **FAST_RECONNECT
    ) as w:
        w.pub(topic, b"warm")
        hold = threading.Event()
        w._portal.loop.call_soon_threadsafe(hold.wait, DEADLINE)
        futures = [w.pub_nowait(topic, b"z" * (2048 if i == 5 else 50)) for i in range(20)]
        hold.set()
        outcomes = [f.exception(DEADLINE) for f in futures]
        assert [i for i, e in enumerate(outcomes) if e is not None] == [5]
        assert isinstance(outcomes[5], BadMessageError)
        assert w.stats()["coalesced_split"] == 1
    assert small_nsqd.stats(topic=topic)["topics"][0]["message_count"] == 20


async def test_the_observer_sees_each_callers_publish_as_without_coalescing(
    nsqd: NsqdProcess,
) -> None:
    from tests.otel_support import installed_telemetry

    topic = unique()
    for telemetry in installed_telemetry():
        async with Writer([nsqd.tcp_address], coalesce=True) as w:
            await asyncio.gather(*(w.pub(topic, b"o%d" % i) for i in range(25)))
            assert w.stats()["coalesced_batches"] == 1
            # the batch is counted apart: the first PUB went alone, one MPUB took the 24 others
            assert telemetry.value("nsq.producer.coalesced.batches") == 1
            assert telemetry.value("nsq.producer.coalesced.messages") == 24
        assert [s.name for s in telemetry.spans()] == [f"pub {topic}"] * 25  # one per caller
        assert telemetry.value("messaging.client.sent.messages") == 25
        assert telemetry.value("messaging.client.operation.duration") == 25
