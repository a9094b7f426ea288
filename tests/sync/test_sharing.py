"""Threads and coroutines share one Writer and one Reader (and so one in-flight tracker) through
the loop thread: ``sync_obj.aio`` is the core object, ``run_in_loop`` runs a coroutine there."""

from __future__ import annotations

import asyncio
import threading

from nsqclient.message import Message
from nsqclient.sync import SyncReader, SyncWriter, get_loop, run_in_loop
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import DEADLINE, collect, message_count, unique


def test_coroutines_and_threads_share_writer_reader_and_tracker(nsqd: NsqdProcess) -> None:
    topic = unique()
    with (
        SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer,
        SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100) as r,
    ):
        # publish concurrently from threads and from coroutines, through the same Writer
        def from_thread(t: int) -> None:
            for i in range(25):
                writer.pub(topic, f"thread-{t}-{i}".encode())

        async def from_coroutines() -> None:
            assert asyncio.get_running_loop() is get_loop()
            await asyncio.gather(*(writer.aio.pub(topic, f"coro-{i}".encode()) for i in range(50)))

        threads = [threading.Thread(target=from_thread, args=(t,)) for t in range(2)]
        for t in threads:
            t.start()
        run_in_loop(from_coroutines(), timeout=DEADLINE)
        for t in threads:
            t.join(DEADLINE)
        assert writer.stats()["published"] == 100
        assert message_count(nsqd, topic) == 100

        # take all 100 on this thread, answer half here and half from a coroutine on the loop
        msgs = collect(r, 100, fin=False)
        tracker = r.tracker

        async def in_flight() -> int:
            return len(tracker)

        assert run_in_loop(in_flight()) == 100  # one tracker holds both halves

        async def finish_on_loop(batch: list[Message]) -> int:
            for msg in batch:
                assert msg in tracker
                await msg.fin()  # the asyncnsq style works on the loop too
                assert msg not in tracker
            return len(tracker)

        coroutine_half, thread_half = msgs[::2], msgs[1::2]
        assert run_in_loop(finish_on_loop(coroutine_half), timeout=DEADLINE) == 50
        for msg in thread_half:
            msg.fin()
        wait_until(lambda: run_in_loop(in_flight()) == 0, what="the tracker to empty")
        stats = r.stats()
        assert stats["finished"] == 100 and stats["in_flight"] == 0
    bodies = {m.body for m in msgs}
    assert bodies == {f"coro-{i}".encode() for i in range(50)} | {
        f"thread-{t}-{i}".encode() for t in range(2) for i in range(25)
    }
