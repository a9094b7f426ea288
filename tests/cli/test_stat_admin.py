"""``nsqclient stat``, ``topics``, ``channels``, ``topic ...`` and ``channel ...`` against nsqd."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nsqclient.http import SyncNsqdHTTPClient

from .conftest import channel_stats, channels_of, cli, topic_stats, unique

pytestmark = pytest.mark.timeout(60)


def http(nsqd: Any) -> list[str]:
    return ["--nsqd-http-address", nsqd.http_address]


def test_stat_count_1_json_matches_stats(nsqd: Any) -> None:
    topic, busy, idle = unique(), unique("busy"), unique("idle")
    with SyncNsqdHTTPClient(nsqd.http_address) as client:
        client.create_topic(topic)
        client.create_channel(topic, busy)
        client.create_channel(topic, idle)
        client.mpub(topic, [b"a", b"b", b"c"])
        client.pub(topic, b"later", defer_ms=600_000)
        client.pause_channel(topic, idle)
    result = cli("stat", "--count", "1", "--json", "--topic", topic, *http(nsqd))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    snapshot = json.loads(lines[0])
    assert snapshot["nsqd"] == [nsqd.http_address] and snapshot["errors"] == []
    [row] = snapshot["topics"]
    stats = topic_stats(nsqd, topic)
    assert stats is not None
    assert row["topic"] == topic
    assert (row["depth"], row["messages"]) == (stats["depth"], stats["message_count"]) == (0, 4)
    assert row["msgs_per_sec"] is None  # one poll: no rate yet
    assert [c["channel"] for c in row["channels"]] == sorted([busy, idle])
    for crow in row["channels"]:
        c = channel_stats(nsqd, topic, crow["channel"])
        assert c is not None
        assert crow == {
            "channel": c["channel_name"],
            "depth": c["depth"],
            "in_flight": c["in_flight_count"],
            "deferred": c["deferred_count"],
            "requeued": c["requeue_count"],
            "timed_out": c["timeout_count"],
            "messages": c["message_count"],
            "clients": c["client_count"],
            "paused": c["paused"],
            "msgs_per_sec": None,
        }
        assert (crow["depth"], crow["deferred"]) == (3, 1)
    assert [c["paused"] for c in row["channels"]] == [c == idle for c in sorted([busy, idle])]


def test_stat_table_two_polls_has_rates(nsqd: Any) -> None:
    topic = unique()
    nsqd.pub(topic, b"x")
    result = cli("stat", "--count", "2", "--interval", "0.2", *http(nsqd))
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert out.count("TOPIC / CHANNEL") == 2
    assert f"\n{topic} " in out


def test_topics_and_channels_list(nsqd: Any) -> None:
    topic, channel = unique(), unique("c")
    assert cli("topic", "create", topic, *http(nsqd)).returncode == 0
    result = cli("channel", "create", topic, channel, *http(nsqd))
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == (
        f"created channel '{topic}/{channel}' on {nsqd.http_address}"
    )
    topics = cli("topics", "--json", *http(nsqd))
    assert topics.returncode == 0 and topic in json.loads(topics.stdout)
    channels = cli("channels", "--topic", topic, *http(nsqd))
    assert channels.returncode == 0 and channels.stdout.decode().split() == [channel]


def test_topic_pause_unpause_empty_delete(nsqd: Any) -> None:
    topic = unique()
    nsqd.pub(topic, b"x")
    assert cli("topic", "pause", topic, *http(nsqd)).returncode == 0
    assert topic_stats(nsqd, topic)["paused"] is True
    assert cli("topic", "unpause", topic, *http(nsqd)).returncode == 0
    assert topic_stats(nsqd, topic)["paused"] is False
    assert cli("topic", "empty", topic, "--yes", *http(nsqd)).returncode == 0
    assert topic_stats(nsqd, topic)["depth"] == 0
    assert cli("topic", "delete", topic, "--yes", *http(nsqd)).returncode == 0
    assert topic_stats(nsqd, topic) is None


def test_delete_and_empty_ask_first(nsqd: Any) -> None:
    topic, channel = unique(), unique("c")
    with SyncNsqdHTTPClient(nsqd.http_address) as client:
        client.create_topic(topic)
        client.create_channel(topic, channel)
        client.pub(topic, b"keep me")
    refused = cli("channel", "delete", topic, channel, *http(nsqd), input=b"n\n")
    assert refused.returncode == 1
    assert b"[y/N]" in refused.stderr and b"nothing done" in refused.stderr
    refused = cli("channel", "empty", topic, channel, *http(nsqd), input=b"")
    assert refused.returncode == 1
    assert channel_stats(nsqd, topic, channel)["depth"] == 1
    agreed = cli("channel", "empty", topic, channel, *http(nsqd), input=b"y\n")
    assert agreed.returncode == 0, agreed.stderr
    assert channel_stats(nsqd, topic, channel)["depth"] == 0
    assert cli("channel", "delete", topic, channel, "-y", *http(nsqd)).returncode == 0
    assert channels_of(nsqd, topic) == []


def test_admin_through_lookupd(nsq_cluster: Any) -> None:
    topic = unique()
    lookupd = ["--lookupd-http-address", nsq_cluster.lookupd.http_address]
    result = cli("topic", "create", topic, *lookupd)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(nsq_cluster.nsqds)  # one line per nsqd
    for nsqd in nsq_cluster.nsqds:
        assert topic_stats(nsqd, topic) is not None
    stat = cli("stat", "--count", "1", "--json", "--topic", topic, *lookupd)
    assert stat.returncode == 0, stat.stderr
    assert sorted(json.loads(stat.stdout)["nsqd"]) == sorted(
        n.http_address for n in nsq_cluster.nsqds
    )


def test_pub_and_tail_through_lookupd(nsq_cluster: Any) -> None:
    topic = unique()
    lookupd = ["--lookupd-http-address", nsq_cluster.lookupd.http_address]
    for i, nsqd in enumerate(nsq_cluster.nsqds):
        nsqd.pub(topic, b"direct-%d" % i)
    nsq_cluster.lookupd.wait_for_topic(topic, nsq_cluster.nsqd_tcp_addresses)  # 404 until then
    pub = cli("pub", "--topic", topic, *lookupd, input=b"".join(b"p%d\n" % i for i in range(6)))
    assert pub.returncode == 0, pub.stderr
    total = sum(topic_stats(n, topic)["message_count"] for n in nsq_cluster.nsqds)
    assert total == 9
    tail = cli("tail", "--topic", topic, "-n", "9", *lookupd)
    assert tail.returncode == 0, tail.stderr
    assert sorted(tail.stdout.split()) == sorted(
        [b"direct-0", b"direct-1", b"direct-2", *(b"p%d" % i for i in range(6))]
    )
