"""``SyncReader.stats()`` / ``SyncWriter.stats()``: exactly the keys and types that
:mod:`nsqclient.stats` declares, with exact values after a known workload on a real nsqd."""

from __future__ import annotations

import pytest

from nsqclient.stats import ConnectionStats, SyncReaderStats, SyncWriterStats
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.stats_support import check_shape
from tests.support import wait_until

from .support import channel_stats, unique


def test_sync_writer_stats_keys_and_values(nsqd: NsqdProcess) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address], max_pending_publishes=11) as writer:
        for i in range(3):
            writer.pub(topic, b"p%d" % i)
        writer.mpub(topic, [b"m0", b"m1"])
        writer.pub_nowait(topic, b"n0").result(timeout=10)
        stats = writer.stats()
    check_shape(stats, SyncWriterStats)
    assert stats == {
        "published": 6,
        "published_over_http": 0,
        "failed": 0,
        "resent": 0,
        "coalesced_batches": 0,
        "coalesced_messages": 0,
        "coalesced_split": 0,
        "outstanding": 0,
        "max_pending_publishes": 11,
        "connection_losses": 0,
        "reconnects": 0,
        "nsqd_down": [],
        "connections": [
            {
                "address": nsqd.tcp_address,
                "connection_id": stats["connections"][0]["connection_id"],
                "state": "connected",
                "pending": 0,
                "buffered_bytes": 0,
            }
        ],
        "queued": 0,
        "written_by_threads": 5,  # every publish: the calling thread wrote it (plain TCP)
        # (which replies a thread read itself depends on timing: see test_thread_writes)
        "read_by_threads": stats["read_by_threads"],
    }
    assert 0 <= stats["read_by_threads"] <= 5


@pytest.mark.timeout(30)
def test_sync_reader_stats_keys_and_values(nsqd: NsqdProcess) -> None:
    """4 messages: 3 FIN'd, 1 REQ'd for a minute; then the stats after close."""
    topic, channel = unique(), unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b"fin0", b"fin1", b"req", b"fin2"])
    reader = SyncReader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=4)
    came_on = set()
    try:
        for n, msg in enumerate(reader, 1):
            came_on.add(msg.connection_id)  # through the thread bridge's stand-in
            if msg.body == b"req":
                msg.req(60_000, backoff=False)
            else:
                msg.fin()
            if n == 4:
                break

        def applied() -> bool:
            clients = (channel_stats(nsqd, topic, channel) or {}).get("clients") or []
            return (
                sum(c["finish_count"] for c in clients) == 3
                and sum(c["requeue_count"] for c in clients) == 1
            )

        wait_until(applied, what="nsqd to apply 3 FIN and 1 REQ")
        stats = reader.stats()
    finally:
        reader.close()
    check_shape(stats, SyncReaderStats)
    (conn,) = stats["connections"]
    check_shape(conn, ConnectionStats)
    assert came_on == {conn["connection_id"]}
    assert {k: v for k, v in conn.items() if k != "heartbeats_received"} == {
        "address": nsqd.tcp_address,
        "connection_id": conn["connection_id"],
        "state": "subscribed",
        "buffered_bytes": 0,
        "rdy": 4,
        "in_flight": 0,
        "received": 4,
        "finished": 3,
        "requeued": 1,
        "pending": 0,
    }
    counts = {k: v for k, v in stats.items() if k != "connections"}
    assert counts == {
        "topic": topic,
        "channel": channel,
        "state": "running",
        "received": 4,
        "finished": 3,
        "requeued": 1,
        "given_up": 0,
        "in_flight": 0,
        "lost_on_disconnect": 0,
        "response_errors": 0,
        "timed_out": 0,
        "queued": 0,
        "connecting": 0,
        "max_in_flight": 4,
        "total_rdy": 4,
        "backoff_level": 0,
        "in_backoff": False,
        "connection_losses": 0,
        "reconnects": 0,
        "nsqd_down": [],
        "local_buffered": 0,
    }
    after = reader.stats()  # after close: the last counters
    check_shape(after, SyncReaderStats)
    assert after["state"] == "closed" and after["connections"] == []
    assert (after["received"], after["finished"], after["requeued"]) == (4, 3, 1)
