"""Every delivery style reports to an instrumented client's observer, with no class swapped:
a Reader's handler (queue-backed and direct), ``async for``, and the SyncReader's ``get()``,
against real nsqd (or the embedded server)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.message import Message
from nsqclient.observability._clients import PublishObserver, ReaderObserver
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.aio.conftest import DEADLINE, unique
from tests.otel_support import Telemetry, installed_telemetry
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    yield from installed_telemetry()


def _outcomes(telemetry: Telemetry) -> list[object]:
    return sorted(str(s.attributes["nsq.message.outcome"]) for s in telemetry.spans("process"))  # type: ignore[index]


@pytest.mark.parametrize("direct", [False, True], ids=["queued", "direct"])
async def test_a_readers_handler_is_observed_without_a_class_swap(
    nsqd: NsqdProcess, telemetry: Telemetry, direct: bool
) -> None:
    topic, channel = unique(), unique()
    async with Writer([nsqd.tcp_address]) as writer:
        assert type(writer) is Writer and isinstance(writer._obs, PublishObserver)
        await writer.mpub(topic, [b"a", b"b"])
    done = asyncio.Event()
    seen: list[bytes] = []

    def handler(msg: Message) -> None:
        seen.append(msg.body)
        if len(seen) == 2:
            done.set()

    async with Reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        assert type(reader) is Reader and isinstance(reader._obs, ReaderObserver)
        reader.set_message_handler(handler, direct=direct)
        await asyncio.wait_for(done.wait(), DEADLINE)
    assert _outcomes(telemetry) == ["fin", "fin"]
    assert telemetry.value("messaging.process.duration") == 2


async def test_iterated_messages_are_observed_from_delivery_to_settle(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.mpub(topic, [b"a", b"b"])
    async with Reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        n = 0
        async for msg in reader:
            n += 1
            if n == 1:
                await msg.fin()
            else:
                await msg.req(60_000, backoff=False)  # not redelivered before the close
                break
    assert _outcomes(telemetry) == ["fin", "req"]
    assert telemetry.value("nsq.consumer.requeued.messages", nsq__requeue__reason="neutral") == 1


def test_sync_get_is_observed(nsqd: NsqdProcess, telemetry: Telemetry) -> None:
    topic, channel = unique(), unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(topic, b"a")
    with SyncReader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        assert type(reader) is SyncReader
        msg = reader.get(timeout=DEADLINE)
        assert msg is not None and msg.body == b"a"
        msg.fin()
        wait_until(lambda: len(telemetry.spans("process")) == 1, what="the get()'s span ended")
    assert _outcomes(telemetry) == ["fin"]
