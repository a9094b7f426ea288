"""examples/prometheus_consumer.py, run for real: a consumer process exposing ``/metrics``,
scraped after a known number of messages (the Prometheus text format read back)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nsqclient.sync import SyncWriter
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.support import wait_until

from .support import DEADLINE, unique

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 7

pytestmark = pytest.mark.timeout(90)


def scrape(port: int) -> dict[str, list[Any]] | None:
    """Samples by name, or None while the endpoint is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str) -> float:
    return sum(s.value for s in samples.get(name, []))


def test_prometheus_consumer_exposes_the_metrics(nsqd: NsqdProcess) -> None:
    topic, channel, port = unique(), unique(), free_port()
    env = dict(
        os.environ,
        NSQD_TCP_ADDRESSES=nsqd.tcp_address,
        NSQ_TOPIC=topic,
        NSQ_CHANNEL=channel,
        METRICS_PORT=str(port),
        PYTHONPATH=str(ROOT),
    )
    consumer = subprocess.Popen(
        [sys.executable, "-m", "examples.prometheus_consumer"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: consumer.poll() is not None or scrape(port), what="/metrics")
        assert consumer.poll() is None, consumer.communicate(timeout=DEADLINE)[0]
        with SyncWriter([nsqd.tcp_address]) as writer:
            writer.mpub(topic, [b"m%d" % i for i in range(MESSAGES)])

        def finished() -> dict[str, list[Any]] | None:
            samples = scrape(port)
            done = samples and value(samples, "nsq_consumer_finished_messages_total") == MESSAGES
            return samples if done else None

        samples = wait_until(finished, what=f"{MESSAGES} messages finished")
    finally:
        consumer.send_signal(signal.SIGTERM)  # graceful: run() returns, the reader closes
        try:
            output, _ = consumer.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            consumer.kill()
            output, _ = consumer.communicate(timeout=DEADLINE)
    assert consumer.returncode == 0, output
    assert value(samples, "messaging_client_consumed_messages_total") == MESSAGES
    assert value(samples, "messaging_process_duration_seconds_count") == MESSAGES
    assert value(samples, "nsq_consumer_in_flight_messages") == 0
    assert value(samples, "nsq_consumer_given_up_messages_total") == 0
    [consumed] = samples["messaging_client_consumed_messages_total"]
    assert consumed.labels["messaging_destination_name"] == topic
    assert consumed.labels["messaging_consumer_group_name"] == channel
    [rdy] = samples["nsq_consumer_connection_rdy"]
    assert rdy.labels["server_port"] == nsqd.tcp_address.rsplit(":", 1)[1]
    buckets = [s for s in samples["messaging_process_duration_seconds_bucket"]]
    assert [s.labels["le"] for s in buckets][:3] == ["0.005", "0.01", "0.025"]
