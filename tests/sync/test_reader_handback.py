"""Issue 51, point 1: a blocking consumer told to stop (SIGTERM, ``stop()``) hands back at once,
REQ with no delay, every prefetched message no handler or loop body has started, in both forms
(``run(handler, threads=N)`` and ``for msg in reader`` after ``stop_on_signals()``), and its log
counts them as never handed out.

Each test fills the reader's prefetch (nsqd shows ``max_in_flight`` in flight), stops it while
the handlers (or the loop body) are blocked, and reads nsqd's own /stats: in flight are only the
messages being handled, the rest are requeued, long before ``close_timeout`` (60 s here) could
have passed. Before the fix nsqd showed every prefetched message in flight until the handlers
returned.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.message import Message
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import DEADLINE, channel_stats, unique

pytestmark = pytest.mark.timeout(90)

PUBLISHED = 30
PREFETCH = 20  # max_in_flight: what nsqd hands the reader before anything is answered
CLOSE_TIMEOUT = 60_000  # ms: "at once" must not wait for it (the waits below give up at 20 s)


def _publish(nsqd: NsqdProcess, topic: str) -> None:
    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b"m%d" % i for i in range(PUBLISHED)])


def _reader(nsqd: NsqdProcess, topic: str) -> SyncReader:
    return SyncReader(
        topic,
        "c",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=PREFETCH,
        close_timeout=CLOSE_TIMEOUT,
    )


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the reader's handler runs in the main thread


def _in_flight(nsqd: NsqdProcess, topic: str, count: int) -> None:
    wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["in_flight_count"] == count,
        what=f"{count} messages in flight at nsqd",
    )


def _watch(
    nsqd: NsqdProcess, topic: str, ready: Callable[[], bool], stop: Callable[[], None], held: int
) -> tuple[threading.Thread, list[Any], threading.Event]:
    """A thread that waits for the prefetch to fill and ``ready()``, stops the reader, and
    records nsqd's channel once only the ``held`` messages being handled are in flight. It
    always sets the returned Event last (the handlers wait on it), whatever happened."""
    seen: list[Any] = []
    release = threading.Event()

    def watch() -> None:
        try:
            wait_until(ready, what="the handlers to hold their messages")
            _in_flight(nsqd, topic, PREFETCH)
            stop()
            seen.append(
                wait_until(
                    lambda: (
                        (s := channel_stats(nsqd, topic, "c"))
                        and s["in_flight_count"] == held
                        and s["requeue_count"] == PREFETCH - held
                        and s
                    ),
                    what=f"only the {held} messages being handled in flight at nsqd",
                )
            )
        except BaseException as exc:  # reported by the test, after the handlers are let go
            seen.append(exc)
        finally:
            release.set()

    return threading.Thread(target=watch, name="watch"), seen, release


def _assert_handed_back(
    seen: list[Any], caplog: pytest.LogCaptureFixture, held: int, nsqd: NsqdProcess, topic: str
) -> None:
    assert len(seen) == 1
    if isinstance(seen[0], BaseException):
        raise seen[0]
    assert seen[0]["timeout_count"] == 0
    said = [r.getMessage() for r in caplog.records if "requeued at once" in r.getMessage()]
    assert any(f"{PREFETCH - held} messages delivered but not yet handed" in m for m in said), said
    stats = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="the reader's connection to go away",
    )
    assert (stats["in_flight_count"], stats["timeout_count"]) == (0, 0)
    assert stats["depth"] == PUBLISHED - held  # the handled ones FIN'd, every other one back


@pytest.mark.parametrize("how", ["sigterm", "stop"])
def test_run_hands_back_what_no_handler_started(
    nsqd: NsqdProcess, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    threads = 4
    topic = unique()
    _publish(nsqd, topic)
    reader = _reader(nsqd, topic)
    started = threading.Semaphore(0)
    running: list[bytes] = []
    lock = threading.Lock()

    def ready() -> bool:
        with lock:
            return len(running) == threads

    stop = _sigterm if how == "sigterm" else reader.stop
    watcher, seen, release = _watch(nsqd, topic, ready, stop, threads)

    def handler(msg: Message) -> None:
        with lock:
            running.append(msg.body)
        started.release()
        assert release.wait(DEADLINE * 2)

    caplog.set_level(logging.INFO, logger="nsqclient")
    watcher.start()
    try:
        assert reader.run(handler, threads=threads, timeout=DEADLINE * 3) is True
    finally:
        release.set()
        watcher.join(DEADLINE)
    assert len(running) == threads  # the running handlers finished; nothing new was started
    _assert_handed_back(seen, caplog, threads, nsqd, topic)


def test_for_loop_hands_back_what_it_buffered_on_sigterm(
    nsqd: NsqdProcess, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique()
    _publish(nsqd, topic)
    in_hand = threading.Event()
    watcher, seen, release = _watch(nsqd, topic, in_hand.is_set, _sigterm, 1)
    handled: list[bytes] = []
    caplog.set_level(logging.INFO, logger="nsqclient")
    watcher.start()
    try:
        with _reader(nsqd, topic) as reader:
            reader.stop_on_signals()
            for msg in reader:
                in_hand.set()
                assert release.wait(DEADLINE * 2)  # SIGTERM lands while this body runs
                handled.append(msg.body)
                msg.fin()
    finally:
        release.set()
        watcher.join(DEADLINE)
    assert len(handled) == 1  # the loop ended after the message in hand
    _assert_handed_back(seen, caplog, 1, nsqd, topic)
