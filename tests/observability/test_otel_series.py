"""Every counter series the instrumentation exports exists from the start, zero-valued until
its first event, so that a Prometheus ``rate()``/``increase()`` alert has a series to start from
(a series that first appears at 1 hides that first event from ``rate()``). Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.testing.daemons import NsqdProcess
from tests.otel_support import Telemetry, installed_telemetry
from tests.support import DEADLINE, unique, wait_for

pytestmark = pytest.mark.timeout(60)

REASONS = {"handler_failure", "neutral", "close", "timeout"}


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    yield from installed_telemetry()


def _series(telemetry: Telemetry, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    return {
        tuple(sorted(dict(p.attributes).items())): float(p.value) for p in telemetry.points(name)
    }


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _outage_series(telemetry: Telemetry, name: str, role: str) -> dict[int, float]:
    """server.port -> value of ``name``'s series for ``role``."""
    found: dict[int, float] = {}
    for point in telemetry.points(name):
        attrs = dict(point.attributes)
        if attrs.get("nsq.client.role") == role:
            found[int(attrs["server.port"])] = float(point.value)
    return found


async def test_every_counter_series_is_exported_zero_before_its_first_event(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    port = _port(nsqd.tcp_address)
    async with (
        Writer([nsqd.tcp_address]) as writer,
        Reader(
            topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_backoff_duration=0
        ) as reader,
    ):
        await wait_for(lambda: reader.connections, what="the Reader's connection")
        requeued = {
            dict(key)["nsq.requeue.reason"]: value
            for key, value in _series(telemetry, "nsq.consumer.requeued.messages").items()
            if dict(key).get("messaging.destination.name") == topic
        }
        assert requeued == dict.fromkeys(REASONS, 0.0)
        for name in ("nsq.connection.losses", "nsq.connection.reconnects"):
            assert _outage_series(telemetry, name, "consumer") == {port: 0.0}, name
            assert _outage_series(telemetry, name, "producer") == {port: 0.0}, name
        for name in (
            "messaging.client.consumed.messages",
            "nsq.consumer.finished.messages",
            "nsq.consumer.given_up.messages",
            "nsq.consumer.response_errors",
            "nsq.consumer.lost_on_disconnect.messages",
            "nsq.producer.http_fallback.messages",
            "nsq.producer.resent",
            "nsq.producer.coalesced.batches",
            "nsq.producer.coalesced.messages",
        ):
            assert list(_series(telemetry, name).values()) == [0.0], name

        # the zeros are not added to the real counts once events happen
        await writer.pub(topic, b"fail once")
        failed = reader.messages()
        msg = await anext(failed)
        msg.req(0)  # a handler failure (REQ with backoff)
        again = await anext(failed)
        again.fin()
        await wait_for(lambda: reader.stats()["finished"] == 1, what="the FIN")
        reader.connections[0].abort()
        await wait_for(lambda: reader.stats()["reconnects"] == 1, what="the reconnect")
        by_reason = {
            r: telemetry.value("nsq.consumer.requeued.messages", nsq__requeue__reason=r)
            for r in REASONS
        }
        assert by_reason == {"handler_failure": 1, "neutral": 0, "close": 0, "timeout": 0}
        assert _outage_series(telemetry, "nsq.connection.losses", "consumer") == {port: 1.0}
        assert _outage_series(telemetry, "nsq.connection.reconnects", "consumer") == {port: 1.0}
        assert _outage_series(telemetry, "nsq.connection.losses", "producer") == {port: 0.0}


async def test_an_nsqd_found_through_lookupd_gets_its_series_when_the_client_learns_it(
    nsq_cluster: Any, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    nsqd = nsq_cluster.nsqds[0]
    nsqd.pub(topic, b"registers the topic")
    nsq_cluster.lookupd.wait_for_topic(topic, [nsqd.tcp_address])
    reader = Reader(
        topic,
        channel,
        lookupd_http_addresses=[nsq_cluster.lookupd.http_address],
        lookupd_poll_interval=60_000,
    )
    async with reader:
        await wait_for(
            lambda: _outage_series(telemetry, "nsq.connection.losses", "consumer"),
            what="the series of the nsqd lookupd listed",
            timeout=DEADLINE,
        )
        for name in ("nsq.connection.losses", "nsq.connection.reconnects"):
            assert _outage_series(telemetry, name, "consumer") == {_port(nsqd.tcp_address): 0.0}, (
                name
            )
