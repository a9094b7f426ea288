"""Every publish path reports to the observer: an instrumented client's spans and sent-message
counts for ``publish_nowait`` (which ``nsqclient pub`` uses), the HTTP fallback, resends after a
refusal, and the sync facade's blocking and ``*_nowait`` calls, against real nsqd (or the
embedded server). ``aio`` and ``sync`` reach the adapter only through :mod:`nsqclient.observer`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from nsqclient.aio import Writer
from nsqclient.errors import BadMessageError
from nsqclient.observer import Observer
from nsqclient.protocol import commands
from nsqclient.sync import SyncWriter
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.aio.conftest import DEADLINE, unique
from tests.otel_support import Telemetry, installed_telemetry

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    yield from installed_telemetry()


def _names(telemetry: Telemetry) -> list[str]:
    return sorted(s.name for s in telemetry.spans())


async def test_publish_nowait_is_observed(nsqd: NsqdProcess, telemetry: Telemetry) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address]) as writer:
        futures = [
            writer.publish_nowait(commands.pub(topic, b"a")),
            writer.publish_nowait(commands.mpub(topic, [b"b", b"c"]), 2),
            writer.publish_nowait(commands.dpub(topic, 0, b"d")),
        ]
        await asyncio.gather(*[f for f in futures if f is not None])
        assert None not in futures
    assert _names(telemetry) == [f"dpub {topic}", f"mpub {topic}", f"pub {topic}"]
    assert telemetry.value("messaging.client.sent.messages") == 4
    assert telemetry.value("messaging.client.operation.duration") == 3


async def test_http_fallback_publishes_are_observed_on_every_door(
    nsqd: NsqdProcess, telemetry: Telemetry
) -> None:
    topic = unique()
    dead = f"127.0.0.1:{free_port()}"
    async with Writer([dead], http_fallback_addresses=[nsqd.http_address]) as writer:
        await writer.pub(topic, b"a")
        fut = writer.publish_nowait(commands.pub(topic, b"b"))
        assert fut is not None
        await fut
        assert writer.stats()["published_over_http"] == 2
    assert _names(telemetry) == [f"pub {topic}"] * 2
    assert telemetry.value("messaging.client.sent.messages") == 2


async def test_resent_publishes_are_observed_once_each(
    nsqd_factory: Any, telemetry: Telemetry
) -> None:
    small = nsqd_factory(extra_args=["--max-msg-size=1024"])
    topic = unique()
    fast = {"reconnect_delay": 50, "max_reconnect_delay": 300}
    async with Writer([small.tcp_address], max_msg_size=1_000_000, **fast) as writer:
        calls = [writer.pub(topic, b"%03d" % i) for i in range(20)]
        calls.insert(5, writer.pub(topic, b"x" * 2048))
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), DEADLINE)
        assert [type(r) for r in results if r is not None] == [BadMessageError]
        assert writer.resent >= 1
    spans = telemetry.spans()
    assert len(spans) == 21  # one per call, resent or not
    assert [s.status.status_code for s in spans].count(StatusCode.ERROR) == 1
    assert telemetry.value("messaging.client.sent.messages", error__type="BadMessageError") == 1


def test_the_sync_facades_publishes_are_observed(nsqd: NsqdProcess, telemetry: Telemetry) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(topic, b"a")
        writer.mpub(topic, [b"b", b"c"])
        writer.dpub(topic, 0, b"d")
        writer.pub_nowait(topic, b"e").result(timeout=DEADLINE)
        writer.mpub_nowait(topic, [b"f"]).result(timeout=DEADLINE)
        writer.dpub_nowait(topic, 0, b"g").result(timeout=DEADLINE)
    names = _names(telemetry)
    assert names == sorted([f"dpub {topic}", f"mpub {topic}", f"pub {topic}"] * 2)
    assert telemetry.value("messaging.client.sent.messages") == 7


class _Recorder(Observer):
    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def publish_started(self, verb: str, topic: str, count: int) -> Any:
        self.events.append(("start", verb, str(count)))
        return len(self.events)

    def publish_settled(self, token: Any, error: BaseException | None) -> None:
        self.events.append(("settle", str(token), type(error).__name__))


async def test_a_plain_observer_gets_start_and_settle_with_its_token(nsqd: NsqdProcess) -> None:
    topic = unique()
    writer = Writer([nsqd.tcp_address])
    recorder = _Recorder()
    writer._obs = recorder  # what an installed factory's observe() returns
    async with writer:
        await writer.pub(topic, b"a")
        with pytest.raises(Exception, match="wrap"):
            await writer.mpub(topic, b"single")  # type: ignore[call-overload]
    assert recorder.events == [
        ("start", "pub", "1"),
        ("settle", "1", "NoneType"),
        ("start", "mpub", "0"),
        ("settle", "3", "InvalidArgumentError"),
    ]


def test_the_clients_do_not_import_the_observability_package() -> None:
    code = (
        "import sys, nsqclient.aio, nsqclient.sync, nsqclient.aio.writer, nsqclient.sync.writer, "
        "nsqclient.aio.reader, nsqclient.sync.reader; "
        "print(sorted(m for m in sys.modules if m.startswith('nsqclient.observability')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
