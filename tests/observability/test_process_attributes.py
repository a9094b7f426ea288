"""``set_attributes``: what tells processes apart (a worker's children carry
``nsq.worker.process``) is on every metric point and span of a Writer and a Reader."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.message import Message
from nsqclient.observability import set_attributes
from nsqclient.testing.daemons import NsqdProcess
from tests.otel_support import Telemetry, installed_telemetry
from tests.support import unique, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    set_attributes({"nsq.worker.process": 3})
    try:
        yield from installed_telemetry()
    finally:
        set_attributes(None)


async def test_every_point_and_span_carries_the_process(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic = unique()
    handled: list[Message] = []
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.mpub(topic, [b"a", b"b"])
        async with Reader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address],
                          message_handler=handled.append, max_in_flight=2):  # fmt: skip
            await wait_for(lambda: len(handled) == 2)
            await asyncio.sleep(0)  # the FINs go out
            data = telemetry.reader.get_metrics_data()
    names, points = set(), 0
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    names.add(metric.name)
                    points += 1
                    assert point.attributes.get("nsq.worker.process") == 3, metric.name
    assert {"messaging.client.sent.messages", "messaging.process.duration",
            "messaging.client.consumed.messages", "nsq.connection.losses"} <= names  # fmt: skip
    spans = telemetry.spans()
    assert spans and all(s.attributes.get("nsq.worker.process") == 3 for s in spans)
    assert points > 10


def test_attributes_are_checked() -> None:
    with pytest.raises(TypeError, match="str -> str, bool, int or float"):
        set_attributes({"nsq.worker.process": [1]})  # type: ignore[dict-item]
