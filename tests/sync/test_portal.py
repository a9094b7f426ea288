"""The portal contract: one lazily started loop thread shared by lease, exceptions crossing as the
very same object, cancellation on timeout, refusal (not deadlock) from the loop thread, context
managers, and interpreter exit with open objects."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest

from nsqclient.aio.connection import Connection
from nsqclient.errors import (
    BadMessageError,
    ConnectError,
    MessageTooLargeError,
    NoConnectionsError,
    NSQError,
    NSQTimeoutError,
)
from nsqclient.sync import SyncReader, SyncWriter, get_loop, run_in_loop
from nsqclient.sync.portal import LoopThread, wait_future
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import channel_stats, collect, loop_threads, unique


class Boom(Exception):
    pass


# ---------------------------------------------------------------- leases


def test_loop_thread_is_lazy_shared_and_joined_by_the_last_close(nsqd: NsqdProcess) -> None:
    assert loop_threads() == []  # importing nsqclient.sync starts nothing
    with pytest.raises(NSQError):
        get_loop()
    writer = SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address])
    reader = SyncReader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address])
    assert loop_threads() == []  # creating objects starts nothing either (pre-fork masters)
    writer.pub(unique(), b"first use")
    [thread] = loop_threads()
    assert reader.get(timeout=0.1) is None
    assert loop_threads() == [thread]  # shared, not a second one
    assert writer.loop is reader.loop is get_loop()
    assert LoopThread._instance is not None and LoopThread._instance.leases == 2
    writer.close()
    assert thread.is_alive()  # the reader still holds a lease
    reader.close()
    assert not thread.is_alive()  # the last close stopped and joined it
    assert loop_threads() == [] and LoopThread._instance is None
    # a new object starts a new thread
    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as again:
        again.pub(unique(), b"x")
        [second] = loop_threads()
        assert second is not thread
    assert loop_threads() == []


def test_double_close_releases_one_lease(nsqd: NsqdProcess) -> None:
    a = SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address])
    b = SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address])
    a.start()
    b.connect()  # the alias of start(), kept for migrations
    a.close()
    a.close()
    a.graceful_close()
    assert loop_threads(), "closing one object twice must not release the other's lease"
    b.pub(unique(), b"still works")
    b.graceful_close()


# ---------------------------------------------------------------- exceptions cross as themselves


def test_run_in_loop_raises_the_very_exception_object(nsqd: NsqdProcess) -> None:
    raised: list[BaseException] = []

    async def fail() -> None:
        exc = Boom("on the loop")
        raised.append(exc)
        raise exc

    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]):
        with pytest.raises(Boom) as info:
            run_in_loop(fail())
        assert info.value is raised[0]


def test_server_error_reaches_the_thread_as_the_core_object(
    nsqd_factory: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nsqd refuses a body above its --max-msg-size with E_BAD_MESSAGE while the client's own
    limit is larger: the BadMessageError the core produced on the loop is the one pub() raises
    (whether the thread wrote the PUB itself or the loop did)."""
    from nsqclient.sync.ticket import Ticket

    small = nsqd_factory(extra_args=["--max-msg-size=100"])  # type: ignore[operator]
    topic = unique()
    seen: list[BaseException] = []
    original = Ticket.set_exception

    def recording(self: Ticket, exc: BaseException) -> None:
        seen.append(exc)  # what the connection completed the ticket with, on the loop
        original(self, exc)

    monkeypatch.setattr(Ticket, "set_exception", recording)
    with SyncWriter(nsqd_tcp_addresses=[small.tcp_address]) as writer:
        writer.pub(topic, b"fits")
        with pytest.raises(BadMessageError) as info:
            writer.pub(topic, b"x" * 200)
        assert seen and info.value is seen[0]
        assert info.value.code == "E_BAD_MESSAGE"
        # nsqd said its limit ("200 > 100"): a later oversized body is refused in the calling
        # thread, before anything is sent, and the writer recovers
        with pytest.raises(MessageTooLargeError, match="max_msg_size=100"):
            writer.pub_nowait(topic, b"y" * 200)
        wait_until(lambda: writer.aio.connections, what="the writer to reconnect")
        writer.pub(topic, b"fits again")
    assert wait_until(lambda: _message_count(small, topic) == 2, what="2 stored messages")


def _message_count(nsqd: NsqdProcess, topic: str) -> int:
    for t in nsqd.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            return int(t["message_count"])
    return 0


# ---------------------------------------------------------------- cancel on timeout


def test_a_call_that_times_out_cancels_its_task(nsqd: NsqdProcess) -> None:
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]):
        with pytest.raises(NSQTimeoutError):
            run_in_loop(forever(), timeout=0.3)
        assert cancelled.wait(10), "the loop-side task was not cancelled"


def test_blocked_publish_times_out_and_is_withdrawn(nsqd: NsqdProcess) -> None:
    """A publish still queued when its timeout passes raises and is never sent."""
    from .support import frozen

    topic = unique()
    with SyncWriter(
        nsqd_tcp_addresses=[nsqd.tcp_address], max_pending_publishes=1, publish_timeout=30_000
    ) as writer:
        writer.pub(topic, b"before")
        with frozen(nsqd):
            first = writer.pub_nowait(topic, b"occupies the only pending slot")
            with pytest.raises(NSQTimeoutError):
                writer.pub(topic, b"never sent", timeout=0.5)
        first.result(timeout=20)
        writer.pub(topic, b"after")
    assert wait_until(lambda: _message_count(nsqd, topic) == 3, what="exactly 3 stored messages")


# ---------------------------------------------------------------- calls from the loop thread


def test_facade_calls_from_the_loop_thread_are_refused_at_once(nsqd: NsqdProcess) -> None:
    topic = unique()
    with (
        SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer,
        SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader,
    ):
        calls = {
            "pub": lambda: writer.pub(topic, b"x"),
            "pub_nowait": lambda: writer.pub_nowait(topic, b"x"),
            "connect": writer.connect,
            "writer.close": writer.close,
            "writer.graceful_close": writer.graceful_close,
            "get": lambda: reader.get(timeout=1),
            "reader.graceful_close": reader.graceful_close,
            "reader.close": reader.close,
            "run_in_loop": lambda: run_in_loop(asyncio.sleep(0)),
        }

        async def attempt(call: object) -> BaseException | None:
            try:
                call()  # type: ignore[operator]
            except NSQError as exc:
                return exc
            return None

        for name, call in calls.items():
            refused = run_in_loop(attempt(call), timeout=5)
            assert isinstance(refused, NSQError), name
            assert "loop thread" in str(refused), name
        # refusals changed nothing: both objects still work
        writer.pub(topic, b"after the refusals")
        [msg] = collect(reader, 1)
        assert msg.body == b"after the refusals"
        assert not writer.is_closed and not reader.is_closed


# ---------------------------------------------------------------- context managers


def test_context_manager_errors_propagate_and_close(nsqd: NsqdProcess) -> None:
    topic = unique()
    with pytest.raises(Boom), SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer:
        writer.pub(topic, b"one")
        raise Boom
    assert writer.is_closed
    with (
        pytest.raises(Boom),
        SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=5) as reader,
    ):
        for _msg in reader:
            raise Boom  # the message in hand is requeued on the way out
    assert reader.is_closed
    stats = wait_until(lambda: channel_stats(nsqd, topic, "c"), what="channel stats")
    assert stats["in_flight_count"] == 0 and stats["depth"] == 1


def test_enter_failure_propagates_and_releases_the_loop(nsqd: NsqdProcess) -> None:
    wrong = nsqd.http_address  # an answer retrying cannot change: entering raises
    with pytest.raises(ConnectError), SyncWriter(nsqd_tcp_addresses=[wrong]):
        pass
    with pytest.raises(ConnectError), SyncReader(unique(), "c", nsqd_tcp_addresses=[wrong]):
        pass
    assert loop_threads() == []


def test_entering_with_nsqd_down_succeeds_and_retries(nsqd_factory: Any) -> None:
    """The startup rule, blocking faces: entering does not fail while nsqd is not up yet."""
    port = _closed_port()
    topic = unique()
    address = f"127.0.0.1:{port}"
    fast = {"reconnect_delay": 50, "max_reconnect_delay": 200}
    with (
        SyncWriter(nsqd_tcp_addresses=[address], **fast) as writer,
        SyncReader(topic, "c", nsqd_tcp_addresses=[address], **fast) as reader,
    ):
        with pytest.raises(NoConnectionsError):
            writer.pub(topic, b"too early", timeout=0.2)
        nsqd_factory(tcp_port=port)
        writer.pub(topic, b"on time", timeout=30)
        msg = reader.get(timeout=30)
        assert msg is not None and msg.body == b"on time"
        msg.fin()
    assert loop_threads() == []


def test_bad_options_fail_at_construction_without_a_thread() -> None:
    from nsqclient.errors import ConfigError

    with pytest.raises(ConfigError):
        SyncWriter(nsqd_tcp_addresses=["127.0.0.1:4150"], heartbeat_interval=-5)
    with pytest.raises(ValueError):
        SyncWriter(nsqd_tcp_addresses=["not an address:x"])
    with pytest.raises(ValueError):
        SyncReader("bad topic!", "c", nsqd_tcp_addresses=["127.0.0.1:4150"])
    with pytest.raises(ConfigError):
        SyncReader("t", "c")  # no address at all
    unused = SyncReader("t", "c", nsqd_tcp_addresses=["127.0.0.1:4150"])
    unused.graceful_close()  # never used: nothing to close, no thread started
    assert loop_threads() == []


def _closed_port() -> int:
    from nsqclient.testing.daemons import free_port

    return free_port()  # nothing listens there


# ---------------------------------------------------------------- connections stay the core's


def test_sync_objects_expose_the_core_objects(nsqd: NsqdProcess) -> None:
    from nsqclient.aio import Reader, Writer

    topic = unique()
    with (
        SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer,
        SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader,
    ):
        assert isinstance(writer.aio, Writer) and isinstance(reader.aio, Reader)
        assert all(isinstance(c, Connection) for c in writer.aio.connections)
        assert writer.stats()["queued"] == 0
        assert reader.stats()["state"] == "running"


def test_a_result_that_arrives_just_after_a_wait_slice_is_returned() -> None:
    """wait_future waits in slices; a future that ends right after a slice timed out (the loop
    thread runs in parallel without the GIL: seen on 3.13t) returns its result, not the slice's
    bare TimeoutError."""

    class LateFuture(concurrent.futures.Future[str]):
        def result(self, timeout: float | None = None) -> str:
            if self.done():
                return super().result(timeout)
            try:
                return super().result(0)
            except TimeoutError:
                self.set_result("closed")  # the loop ends it now, after the slice's timeout
                raise

    assert wait_future(LateFuture(), 1.0) == "closed"
