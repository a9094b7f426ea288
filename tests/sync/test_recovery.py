"""The blocking facade recovers as the core does (issue 22): its publishes wait in the core
Writer, which dials at once when a publish finds no connection; no logic of its own."""

from __future__ import annotations

import time

from nsqclient.sync import SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from nsqclient.testing.faults import FaultProxy
from tests.support import wait_until

from .support import DEADLINE, message_count, unique


def test_a_blocking_publish_after_an_nsqd_restart_dials_at_once(nsqd: NsqdProcess) -> None:
    """The next background reconnect is 21-30 s away; the publish made once nsqd is back
    returns within seconds over one new connection."""
    topic = unique()
    with (
        FaultProxy(nsqd.tcp_address).start_in_thread() as proxy,
        SyncWriter([proxy.address], reconnect_delay=30_000, max_reconnect_delay=30_000) as writer,
    ):
        writer.pub(topic, b"before")
        before = proxy.counters().connections_accepted
        nsqd.restart()
        wait_until(lambda: writer.stats()["nsqd_down"], what="the loss to be noticed")
        started = time.monotonic()
        writer.pub(topic, b"after", timeout=DEADLINE)
        took = time.monotonic() - started
        print(f"SyncWriter publish after the restart, backoff 30 s: {took:.3f}s")
        assert took < 5.0
        assert proxy.counters().connections_accepted == before + 1
    assert message_count(nsqd, topic) == 1  # counted since the restart: the one after it
