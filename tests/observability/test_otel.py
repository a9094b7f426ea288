"""OpenTelemetry instrumentation of the asyncio Reader and Writer against nsqd (both backends):
exact spans and metrics after a known workload, and the failure paths' ``error.type``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from nsqclient.aio import Reader, Writer
from nsqclient.errors import ConnectionClosedError, NSQTimeoutError
from nsqclient.message import Message
from nsqclient.observability import unwrap_body, wrap_body
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.aio.reader_support import channel_stats
from tests.otel_support import Telemetry, installed_telemetry
from tests.support import DEADLINE, frozen, unique, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    yield from installed_telemetry()


def _server(nsqd: NsqdProcess) -> dict[str, object]:
    host, port = nsqd.tcp_address.rsplit(":", 1)
    return {"server.address": host, "server.port": int(port)}


async def test_publishes_give_one_producer_span_and_duration_each(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address]) as writer:
        for n in range(3):
            await writer.pub(topic, b"p%d" % n)
        await writer.mpub(topic, [b"a", b"b", b"c", b"d"])
        await writer.dpub(topic, 0, b"later")
        stats = writer.stats()

    spans = telemetry.spans()
    assert sorted(s.name for s in spans) == [
        f"dpub {topic}",
        f"mpub {topic}",
        *[f"pub {topic}"] * 3,
    ]
    for span in spans:
        assert span.kind is SpanKind.PRODUCER
        attrs = dict(span.attributes or {})
        assert attrs["messaging.system"] == "nsq"
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.destination.name"] == topic
        assert {k: attrs[k] for k in ("server.address", "server.port")} == _server(nsqd)
        assert span.status.status_code is StatusCode.UNSET
    [mpub] = [s for s in spans if s.name.startswith("mpub")]
    assert mpub.attributes["messaging.batch.message_count"] == 4  # type: ignore[index]

    assert stats["published"] == 8
    assert telemetry.value("messaging.client.sent.messages") == 8  # the same count as stats()
    assert telemetry.value("messaging.client.sent.messages", messaging__operation__name="mpub") == 4
    assert telemetry.value("messaging.client.operation.duration") == 5  # one per call
    [hist] = [p for p in telemetry.points("messaging.client.operation.duration")][:1]
    assert list(hist.explicit_bounds)[:3] == [0.005, 0.01, 0.025]  # the convention's buckets


async def test_handler_spans_are_current_and_record_the_outcome(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.mpub(topic, [b"ok-1", b"fail-once", b"ok-2"])
    telemetry.spans_exporter.clear()
    done: set[bytes] = set()
    inner: list[object] = []

    async def handler(msg: Message) -> None:
        inner.append(trace.get_current_span().get_span_context().span_id)
        if msg.body == b"fail-once" and msg.attempts == 1:
            raise ValueError("first attempt fails")
        done.add(msg.body)

    reader = Reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        message_handler=handler,
        max_backoff_duration=0,
        default_requeue_delay=0,
    )
    async with reader:
        await wait_for(lambda: len(done) == 3 and reader.stats()["in_flight"] == 0)
        await asyncio.sleep(0)
        stats = reader.stats()

    spans = telemetry.spans("process")
    assert len(spans) == 4 == stats["received"]  # one per delivery, the redelivery too
    assert {s.context.span_id for s in spans} == set(inner)  # current while the handler ran
    failed = [s for s in spans if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1
    assert failed[0].attributes["error.type"] == "ValueError"  # type: ignore[index]
    assert failed[0].attributes["nsq.message.outcome"] == "req"  # type: ignore[index]
    for span in spans:
        attrs = dict(span.attributes or {})
        assert span.kind is SpanKind.CONSUMER
        assert attrs["messaging.consumer.group.name"] == channel
        assert attrs["messaging.operation.type"] == "process"
        assert len(str(attrs["messaging.message.id"])) == 16
        assert {k: attrs[k] for k in ("server.address", "server.port")} == _server(nsqd)

    assert telemetry.value("messaging.process.duration") == 4
    assert telemetry.value("messaging.process.duration", error__type="ValueError") == 1
    assert telemetry.value("messaging.client.consumed.messages") == 4
    assert telemetry.value("nsq.consumer.finished.messages") == 3 == stats["finished"]
    assert telemetry.value("nsq.consumer.requeued.messages") == 1 == stats["requeued"]
    reason = "handler_failure"
    assert telemetry.value("nsq.consumer.requeued.messages", nsq__requeue__reason=reason) == 1


async def test_iterated_messages_get_a_span_from_delivery_to_fin_or_req(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.mpub(topic, [b"1", b"2", b"3"])
    telemetry.spans_exporter.clear()
    async with Reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        seen = 0
        async for msg in reader:
            seen += 1
            if msg.body == b"2" and msg.attempts == 1:
                msg.req(0, backoff=False)
            else:
                msg.fin()
            if seen == 4:
                break
        await wait_for(lambda: len(telemetry.spans("process")) == 4, what="four spans")
        gauge = telemetry.value("nsq.consumer.rdy")
        assert gauge == reader.stats()["total_rdy"] > 0

    spans = telemetry.spans("process")
    outcomes = sorted(str(s.attributes["nsq.message.outcome"]) for s in spans)  # type: ignore[index]
    assert outcomes == ["fin", "fin", "fin", "req"]
    assert telemetry.value("nsq.consumer.requeued.messages", nsq__requeue__reason="neutral") == 1


async def test_envelope_links_the_consumer_span_to_the_producer(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    tracer = telemetry.instrumentation.tracer
    async with Writer([nsqd.tcp_address]) as writer:
        with tracer.start_as_current_span("request") as request:
            await writer.pub(topic, wrap_body(b"payload"))
    bodies: list[bytes] = []

    def handler(msg: Message) -> None:
        bodies.append(unwrap_body(msg.body)[0])

    async with Reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        reader.set_message_handler(handler)
        await wait_for(lambda: bodies, what="the message")
    assert bodies == [b"payload"]
    [process] = telemetry.spans("process")
    [link] = process.links
    assert link.context.trace_id == request.get_span_context().trace_id
    [pub] = telemetry.spans("pub")
    assert pub.parent is not None and pub.parent.span_id == request.get_span_context().span_id


async def test_publish_timeout_and_connection_loss_give_their_error_type(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address], reconnect_delay=50, max_reconnect_delay=300) as writer:
        with frozen(nsqd):
            with pytest.raises(NSQTimeoutError):
                await writer.pub(topic, b"timed out", timeout=0.3)
            pending = asyncio.ensure_future(writer.pub(topic, b"lost", timeout=DEADLINE))
            await wait_for(lambda: writer.outstanding == 1, what="the publish in flight")
            writer.connections[0].abort()
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(pending, DEADLINE)
        await wait_for(lambda: writer.stats()["reconnects"] == 1, what="the reconnect")
        stats = writer.stats()

    errors = sorted(str(s.attributes["error.type"]) for s in telemetry.spans("pub"))  # type: ignore[index]
    assert errors == ["ConnectionClosedError", "NSQTimeoutError"]
    assert (
        telemetry.value("messaging.client.operation.duration", error__type="NSQTimeoutError") == 1
    )
    losses = telemetry.value(
        "nsq.connection.losses", **{"server__port": _server(nsqd)["server.port"]}
    )
    assert losses == stats["connection_losses"] >= 1
    assert telemetry.value("nsq.connection.reconnects") == stats["reconnects"] == 1


@pytest.mark.slow
@pytest.mark.one_backend
async def test_a_lost_consumer_connection_ends_its_spans_and_is_counted_per_nsqd(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.pub(topic, b"held")
    async with Reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        reconnect_delay=50,
        max_reconnect_delay=300,
        msg_timeout=1000,  # nsqd redelivers a lost connection's messages after their timeout
    ) as reader:
        iterator = reader.messages()
        held = await asyncio.wait_for(iterator.__anext__(), DEADLINE)
        reader.connections[0].abort()  # the held message is lost with its connection
        again = await asyncio.wait_for(iterator.__anext__(), DEADLINE)  # nsqd redelivers it
        assert again.body == held.body
        again.fin()
        await wait_for(lambda: len(telemetry.spans("process")) == 2, what="both spans")
        stats = reader.stats()
    fin, lost = sorted(
        telemetry.spans("process"),
        key=lambda s: str(s.attributes["nsq.message.outcome"]),  # type: ignore[index]
    )
    assert lost.attributes["nsq.message.outcome"] == "lost"  # type: ignore[index]
    assert lost.attributes["error.type"] == "connection_lost"  # type: ignore[index]
    assert fin.attributes["nsq.message.outcome"] == "fin"  # type: ignore[index]
    assert fin.attributes["nsq.message.attempts"] == 2  # type: ignore[index]
    role = {"nsq__client__role": "consumer", "server__port": _server(nsqd)["server.port"]}
    assert telemetry.value("nsq.connection.losses", **role) == 1
    assert (
        telemetry.value("nsq.consumer.lost_on_disconnect.messages")
        == stats["lost_on_disconnect"]
        == 1
    )


async def test_give_ups_and_http_fallback_publishes_are_observed(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    dead = f"127.0.0.1:{free_port()}"
    async with Writer([dead], http_fallback_addresses=[nsqd.http_address]) as writer:
        await writer.pub(topic, b"over http")
        await writer.mpub(topic, [b"a", b"b"])
        assert writer.stats()["published_over_http"] == 3
        assert telemetry.value("nsq.producer.http_fallback.messages") == 3
    given_up = asyncio.Event()
    reader = Reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_attempts=1,
        default_requeue_delay=0,
        max_backoff_duration=0,
        on_giving_up=lambda msg: given_up.set(),
    )
    async with reader:
        reader.set_message_handler(lambda msg: msg.body != b"over http")  # False: REQ
        await asyncio.wait_for(given_up.wait(), DEADLINE)
        await wait_for(lambda: reader.stats()["in_flight"] == 0, what="all answered")
        assert telemetry.value("nsq.consumer.given_up.messages") == reader.stats()["given_up"] == 1


@pytest.mark.slow
@pytest.mark.one_backend
async def test_a_message_nsqd_timed_out_is_counted_as_a_timeout_requeue(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic, channel = unique(), unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.pub(topic, b"slow")
    # msg_timeout 1 s (nsqd's minimum through IDENTIFY): the FIN below comes after it
    async with Reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], msg_timeout=1000
    ) as reader:
        it = reader.messages()
        msg = await anext(it)
        reader.set_max_in_flight(0)  # so nsqd cannot hand the timed-out message straight back
        await wait_for(lambda: channel_stats(nsqd, topic, channel)["timeout_count"] == 1)
        await msg.fin()  # E_FIN_FAILED: nsqd requeued it itself
        await wait_for(lambda: reader.stats()["timed_out"] == 1, what="the refused FIN")
        assert reader.stats()["response_errors"] == 1
        requeued = telemetry.value("nsq.consumer.requeued.messages", nsq__requeue__reason="timeout")
        assert requeued == 1
        assert telemetry.value("nsq.consumer.requeued.messages") == 1  # no REQ was sent
        reader.set_max_in_flight(1)
        again = await anext(it)
        assert again.id == msg.id and again.attempts == 2
        await again.fin()
