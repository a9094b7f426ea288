"""Issue 51, point 2: a handler moved from pynsq or gnsq keeps its call forms.

``msg.requeue(time_ms=0, backoff=False)`` raised TypeError and ``msg.has_responded()`` "'bool'
object is not callable"; raised inside a handler, each made the Reader count a failure and
requeue the message with backoff, delayed by attempts, until ``max_attempts`` gave it up: a
migrated handler dead-lettered what it meant to requeue at once. Against nsqd: every message
comes back at once (requeued without delay and without backoff) and is then finished; nothing
failed, nothing was given up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from nsqclient.message import Message
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import DEADLINE, channel_stats, unique

pytestmark = pytest.mark.timeout(60)

COUNT = 5


@pytest.mark.parametrize(
    "requeue",
    [
        pytest.param(lambda m: m.requeue(time_ms=0, backoff=False), id="pynsq"),
        pytest.param(lambda m: m.requeue(0, False), id="gnsq"),
    ],
)
def test_a_pynsq_handler_requeues_at_once_and_dead_letters_nothing(
    nsqd: NsqdProcess, caplog: pytest.LogCaptureFixture, requeue: Callable[[Message], object]
) -> None:
    topic = unique()
    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b"m%d" % i for i in range(COUNT)])
    finished: list[bytes] = []
    checks: list[tuple[bool, bool, bool]] = []
    given_up: list[Message] = []
    reader = SyncReader(
        topic,
        "c",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=COUNT,
        max_attempts=2,  # one failure would be one too many: the next delivery gives up
        on_giving_up=given_up.append,
    )

    def handler(msg: Message) -> None:
        if msg.attempts == 1:
            before = msg.has_responded()
            requeue(msg)
            checks.append((before, msg.has_responded(), msg.is_async()))
            return
        finished.append(msg.body)
        msg.finish()
        if len(finished) == COUNT:
            reader.stop()

    caplog.set_level(logging.WARNING, logger="nsqclient")
    assert reader.run(handler, timeout=DEADLINE) is True  # not the timeout: all came back
    stats = reader.stats()
    assert checks == [(False, True, False)] * COUNT
    assert sorted(finished) == sorted(b"m%d" % i for i in range(COUNT))
    assert (stats["requeued"], stats["finished"], stats["given_up"]) == (COUNT, COUNT, 0)
    assert given_up == []
    assert not [r for r in caplog.records if "handler failed" in r.getMessage()]
    chan = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="the reader's connection to go away",
    )
    assert (chan["requeue_count"], chan["depth"], chan["in_flight_count"]) == (COUNT, 0, 0)
