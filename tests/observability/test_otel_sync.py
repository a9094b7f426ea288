"""OpenTelemetry instrumentation of SyncWriter and SyncReader against nsqd (both backends):
spans per publish and per message, the facade's queue metrics, no duplicate spans in run()."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from nsqclient.message import Message
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.otel_support import Telemetry, installed_telemetry
from tests.support import DEADLINE, frozen, unique, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    yield from installed_telemetry()


def test_sync_publishes_give_one_span_each_and_the_queue_is_observed(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(topic, b"1")
        writer.pub(topic, b"2")
        writer.mpub(topic, [b"3", b"4", b"5"])
        futures = [writer.pub_nowait(topic, b"6"), writer.pub_nowait(topic, b"7")]
        for future in futures:
            future.result(DEADLINE)
        writer.dpub(topic, 0, b"8")
        published = writer.stats()["published"]
        assert telemetry.value("nsq.sync.publish_queue.depth") == 0
    spans = telemetry.spans()
    assert sorted(s.name for s in spans) == sorted(
        [f"pub {topic}"] * 4 + [f"mpub {topic}", f"dpub {topic}"]
    )
    assert all(s.kind is SpanKind.PRODUCER for s in spans)
    assert telemetry.value("messaging.client.sent.messages") == 8 == published


def test_publishes_that_wait_for_a_full_queue_are_counted(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address], max_queued_publishes=1, max_pending_publishes=1) as writer:
        writer.pub(topic, b"connected")
        with frozen(nsqd):
            threads = [
                threading.Thread(target=writer.pub, args=(topic, b"x"), daemon=True)
                for _ in range(3)
            ]
            for thread in threads:
                thread.start()
            # one outstanding at nsqd, one in the queue, the third waits for room
            wait_until(lambda: telemetry.value("nsq.sync.publish_queue.waits") >= 1, what="a wait")
            # the depth can read 0 for an instant (the loop took the queued one, the waiting
            # thread has not put its own yet), so wait for it to settle at 1
            wait_until(lambda: telemetry.value("nsq.sync.publish_queue.depth") == 1, what="depth 1")
        for thread in threads:
            thread.join(DEADLINE)
        assert writer.stats()["published"] == 4


def test_iterated_messages_and_run_handlers_get_one_process_span_each(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b"a", b"b", b"c"])
    with SyncReader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        for n, msg in enumerate(reader, 1):
            msg.fin()
            if n == 3:
                break
        wait_until(lambda: len(telemetry.spans("process")) == 3, what="three spans")
        assert telemetry.value("nsq.sync.bridge.depth") == 0
    assert all(s.attributes["nsq.message.outcome"] == "fin" for s in telemetry.spans("process"))  # type: ignore[index]

    telemetry.spans_exporter.clear()
    topic, channel = unique(), unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b"ok", b"bad", b"ok"])
    handled: list[bytes] = []
    lock = threading.Lock()

    def handler(msg: Message) -> None:
        with lock:
            handled.append(msg.body)
            if len(handled) == 4:  # three, and the redelivery of "bad"
                reader.stop()
        if msg.body == b"bad" and msg.attempts == 1:
            raise ValueError("bad")

    reader = SyncReader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_backoff_duration=0,
        default_requeue_delay=0,
    )
    reader.run(handler, threads=2, timeout=DEADLINE)
    spans = telemetry.spans("process")
    assert len(spans) == 4 == len(handled)  # the handler's spans only, none from delivery
    [failed] = [s for s in spans if s.status.status_code is StatusCode.ERROR]
    assert failed.attributes["error.type"] == "ValueError"  # type: ignore[index]
    assert telemetry.value("messaging.process.duration") == 4


def test_sync_clients_export_every_counter_series_from_the_start(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    port = int(nsqd.tcp_address.rsplit(":", 1)[1])
    with (
        SyncReader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]),
        SyncWriter([nsqd.tcp_address]),
    ):
        reasons = {
            str(p.attributes["nsq.requeue.reason"]): p.value
            for p in telemetry.points("nsq.consumer.requeued.messages")
        }
        assert reasons == dict.fromkeys(("handler_failure", "neutral", "close", "timeout"), 0)
        for name in ("nsq.connection.losses", "nsq.connection.reconnects"):
            series = {
                (p.attributes["nsq.client.role"], p.attributes["server.port"]): p.value
                for p in telemetry.points(name)
            }
            assert series == {("consumer", port): 0, ("producer", port): 0}, name
        assert [p.value for p in telemetry.points("nsq.sync.publish_queue.waits")] == [0]
