"""The three contracts issue 49's fault harness found broken, and the passed deadline.

* A publish is counted once, as what its caller saw: one that raised NSQTimeoutError counts as
  failed, also when nsqd's OK comes just after (the harness: 325 of 1,521 timeouts counted as
  published; 144 of 1,636 with coalescing).
* No counter ever goes down: ``failed`` kept the publishes a lost coalescing door had withdrawn
  (the harness: 67-76 lower after a reconnect).
* Every call, future or blocking, resolves within its own timeout bound, whatever is queued
  ahead of it (the harness: five 0.05 s futures waited for a 2 s one ahead of them).
* A publish whose deadline passed before its write is never written (``timeout=0`` wrote the
  PUB and then raised NSQTimeoutError, maybe stored: a caller retrying on ``sent`` stored it
  twice).

Real nsqd (and the embedded server where nothing but nsqd's answers matters).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from nsqclient.errors import NoConnectionsError, NotSentTimeoutError, NSQError, NSQTimeoutError
from nsqclient.sync import SyncWriter
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.support import wait_until

from .support import DEADLINE, frozen, message_count, unique

pytestmark = pytest.mark.timeout(60)


@pytest.mark.real_nsqd_only
@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_a_timed_out_publish_is_counted_as_failed_when_the_ok_comes_after(
    nsqd: NsqdProcess, coalesce: bool
) -> None:
    """The harness's case, made exact: the late OK is read by another publishing thread
    before the loop looks at the timed-out publish (the loop is held meanwhile)."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address], coalesce=coalesce) as writer:
        writer.pub(topic, b"warm")
        wait_until(lambda: writer._doors.open, what="the threads' door")
        before = writer.stats()
        entered, release = threading.Event(), threading.Event()

        def hold() -> None:
            entered.set()
            release.wait(DEADLINE)

        writer.loop.call_soon_threadsafe(hold)
        assert entered.wait(DEADLINE)
        try:
            # written, unanswered: its OK comes once nsqd thaws
            with frozen(nsqd), pytest.raises(NSQTimeoutError) as info:
                writer.pub(topic, b"late", timeout=0.3)
            assert info.value.sent is True  # maybe stored: it was written
            # another publish, read by its thread: the late OK comes first, in that read
            writer.pub(topic, b"after")
        finally:
            release.set()
        wait_until(lambda: message_count(nsqd, topic) == 3, what="nsqd stored all three")
        after = writer.stats()
        assert after["published"] - before["published"] == 1  # "after" only
        assert after["failed"] - before["failed"] == 1  # "late": what its caller saw


@pytest.mark.real_nsqd_only
def test_failed_never_goes_down_when_a_coalescing_door_is_lost(nsqd: NsqdProcess) -> None:
    """Publishes queued at a coalescing door behind an unanswered one time out there
    (withdrawn, never sent); then the connection is lost, and its door with it."""
    topic = unique()
    with SyncWriter([nsqd.tcp_address], coalesce=True) as writer:
        writer.pub(topic, b"warm")
        with frozen(nsqd):
            on_its_way = writer.pub_nowait(topic, b"on its way", timeout=DEADLINE)
            for _ in range(5):
                with pytest.raises(NotSentTimeoutError):
                    writer.pub(topic, b"withdrawn", timeout=0.05)
            failed = writer.stats()["failed"]
            assert failed >= 5
            conn = writer.aio.connections[0]
            writer.loop.call_soon_threadsafe(conn.abort)  # the door is lost with it
            with pytest.raises(NSQError):
                on_its_way.result(DEADLINE)
        wait_until(lambda: writer.aio.connections and writer.aio.connections[0] is not conn)
        writer.pub(topic, b"after")
        assert writer.stats()["failed"] >= failed + 1  # (and "on its way")


def test_each_future_resolves_within_its_own_timeout_whatever_waits_ahead() -> None:
    """No nsqd up: a long publish heads the queue; the short ones behind it fail at their own
    deadlines (the long one still waiting: nothing bounded them by it)."""
    with SyncWriter([f"127.0.0.1:{free_port()}"], reconnect_delay=50) as writer:
        long = writer.pub_nowait(unique(), b"long", timeout=DEADLINE)
        short = [writer.pub_nowait(unique(), b"short", timeout=0.05) for _ in range(5)]
        done, _ = concurrent.futures.wait(short, timeout=DEADLINE)
        assert len(done) == 5
        assert not long.done()  # the short ones did not wait for it
        for future in short:
            error = future.exception(0)
            assert isinstance(error, NoConnectionsError) and error.sent is False
        long.cancel()


@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_a_passed_deadline_is_never_written(nsqd: NsqdProcess, coalesce: bool) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address], coalesce=coalesce) as writer:
        writer.pub(topic, b"warm")
        for _ in range(20):  # the door's own write and its queue alike
            with pytest.raises(NotSentTimeoutError) as info:
                writer.pub(topic, b"never", timeout=0)
            assert info.value.sent is False
            with pytest.raises(NotSentTimeoutError):
                writer.pub_nowait(topic, b"never", timeout=0).result(DEADLINE)
        writer.pub(topic, b"after")
        assert writer.stats()["failed"] == 40
    time.sleep(0)  # (a yield before nsqd's /stats)
    assert message_count(nsqd, topic) == 2  # "warm" and "after": no "never" was written
