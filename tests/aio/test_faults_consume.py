"""Consuming through network faults (FaultProxy between the Reader and a healthy nsqd).

A producer publishes straight to nsqd at a steady rate while the Reader, connected through the
proxy, consumes; the proxy cuts the connection (FIN, then RST), stalls it for longer than two
heartbeat intervals, slows it to a trickle and refuses new connections. Promises: consumption
resumes within a bound after each fault, a stall is detected and the connection replaced, the
RDY the Reader grants never exceeds ``max_in_flight`` (also across replacements), every
published message is finished in the end and nothing is left in flight at nsqd.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.aio.connection import Connection
from nsqclient.errors import NSQTimeoutError
from nsqclient.testing import FaultProxy
from tests.support import wait_for

from .conftest import DEADLINE, Stats, unique
from .fault_support import FAST_CLIENT, HEARTBEAT_MS, MARGIN, NSQD_FAST_REDELIVERY
from .reader_support import FAST, create_channel, wait_all_finished

pytestmark = pytest.mark.timeout(90)

MAX_IN_FLIGHT = 8
#: how soon after a cut messages must flow again: backoff (<= 250 ms here), dial, IDENTIFY, SUB
RESUME_BOUND = 3.0
STALL_DETECTED_BOUND = 2 * HEARTBEAT_MS / 1000 + MARGIN


class Consumer:
    """The Reader under test, what it handled and when, and the most RDY it ever granted."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.handled: set[bytes] = set()
        self.count = 0
        self.last_at = 0.0
        self.max_rdy = 0
        self._sampler: asyncio.Task[None] | None = None

    def record(self, body: bytes) -> None:
        self.handled.add(body)
        self.count += 1
        self.last_at = asyncio.get_running_loop().time()

    def start_sampling(self) -> None:
        async def sample() -> None:
            while True:
                granted = sum(c.rdy for c in self.reader.connections if c.is_open)
                self.max_rdy = max(self.max_rdy, granted)
                await asyncio.sleep(0.005)

        self._sampler = asyncio.create_task(sample())

    def stop_sampling(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()

    def open_connection(self) -> Connection | None:
        return next((c for c in self.reader.connections if c.is_open), None)

    async def wait_more(self, n: int, what: str, timeout: float = DEADLINE) -> float:
        """Wait until ``n`` more messages were handled; return how long it took."""
        loop = asyncio.get_running_loop()
        start, target = loop.time(), self.count + n
        await wait_for(lambda: self.count >= target, timeout, what=what)
        return loop.time() - start


@contextlib.contextmanager
def _instant(action: Callable[[], object]) -> Iterator[None]:
    action()
    yield


async def producer(writer: Writer, topic: str, sent: list[bytes], stop: asyncio.Event) -> None:
    """Publish straight to nsqd (not through the proxy) at about 300 messages a second."""
    n = 0
    while not stop.is_set():
        batch = [b"%06d" % (n + i) for i in range(3)]
        n += 3
        await writer.mpub(topic, batch)
        sent.extend(batch)
        await asyncio.sleep(0.01)


async def run_faults(
    consumer: Consumer, proxy: FaultProxy, steps: list[str], loop: asyncio.AbstractEventLoop
) -> None:
    for step in steps:
        await consumer.wait_more(20, f"messages before {step}")
        old = consumer.open_connection()
        assert old is not None
        if step in ("cut (FIN)", "cut (RST)"):
            proxy.cut(rst=step == "cut (RST)")
            gap = await consumer.wait_more(5, f"consumption to resume after {step}")
            assert gap < RESUME_BOUND, f"{gap:.2f}s without a message after {step}"
        elif step == "stall":
            start = loop.time()
            with proxy.stall():  # new connections are not stalled: the replacement works
                await wait_for(lambda o=old: not o.is_open, what="the stall to be detected")
                detected = loop.time() - start
                assert isinstance(old.close_exception, NSQTimeoutError)
                await consumer.wait_more(5, "consumption on the replacement connection")
            assert detected < STALL_DETECTED_BOUND, f"stall detected only after {detected:.2f}s"
        elif step == "slow":
            with proxy.slow(down=20_000, up=20_000):
                await consumer.wait_more(30, "consumption over a slow link")
            assert old.is_open  # slow is not dead: the same connection carried on
        elif step == "refuse":
            with proxy.refuse():
                proxy.cut()
                await wait_for(lambda o=old: not o.is_open, what="the cut to be noticed")
                await asyncio.sleep(1.0)  # how long connections are refused
            gap = await consumer.wait_more(5, "consumption after the refusals")
            assert gap < RESUME_BOUND
        else:
            raise AssertionError(step)


@pytest.mark.one_backend
@pytest.mark.parametrize(
    ("mode", "steps"),
    [
        ("handler", ["cut (FIN)", "cut (RST)", "stall", "slow", "refuse"]),
        ("async for", ["cut (RST)", "stall", "slow", "cut (FIN)", "refuse"]),
    ],
)
async def test_reader_consumes_through_network_faults(
    nsqd_factory: Any,
    nsq_fault_proxy_factory: Any,
    make_reader: Callable[..., Reader],
    stats: Stats,
    mode: str,
    steps: list[str],
) -> None:
    nsqd = nsqd_factory(extra_args=NSQD_FAST_REDELIVERY)
    proxy = nsq_fault_proxy_factory(nsqd)
    topic, channel = unique(), unique("c")
    await create_channel(nsqd, topic, channel)
    loop = asyncio.get_running_loop()
    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[proxy.address],
        max_in_flight=MAX_IN_FLIGHT,
        **{**FAST, **FAST_CLIENT},
    )
    consumer = Consumer(reader)
    iterating: asyncio.Task[None] | None = None
    if mode == "handler":

        async def handle(msg: Any) -> None:
            await asyncio.sleep(0.002)  # a little work, so that messages are in flight at a cut
            consumer.record(msg.body)

        reader.set_message_handler(handle)
        await reader.start()
    else:
        await reader.start()

        async def iterate() -> None:
            async for msg in reader:
                await asyncio.sleep(0.002)
                consumer.record(msg.body)
                await msg.fin()

        iterating = asyncio.create_task(iterate())
    consumer.start_sampling()
    sent: list[bytes] = []
    stop = asyncio.Event()
    async with Writer([nsqd.tcp_address]) as writer:
        producing = asyncio.create_task(producer(writer, topic, sent, stop))
        try:
            await run_faults(consumer, proxy, steps, loop)
        finally:
            stop.set()
            await asyncio.wait_for(producing, DEADLINE)
    # every message is finished in the end (those in flight on a cut connection come back after
    # nsqd's --msg-timeout), and nothing is left in flight
    await wait_for(
        lambda: consumer.handled >= set(sent), timeout=DEADLINE + 10, what="every message handled"
    )
    assert consumer.handled <= set(sent)
    await wait_all_finished(nsqd, topic, channel)
    consumer.stop_sampling()
    assert consumer.max_rdy <= MAX_IN_FLIGHT, f"RDY {consumer.max_rdy} > max_in_flight"
    await reader.graceful_close()
    if iterating is not None:
        await asyncio.wait_for(iterating, DEADLINE)
    assert proxy.counters().connections_accepted >= 1 + len(steps) - ("slow" in steps)


@pytest.mark.one_backend
@pytest.mark.parametrize("how", ["graceful_close", "close"])
async def test_reader_close_during_a_stall_is_bounded(
    nsqd_factory: Any,
    nsq_fault_proxy_factory: Any,
    make_reader: Callable[..., Reader],
    how: str,
) -> None:
    nsqd = nsqd_factory()
    proxy = nsq_fault_proxy_factory(nsqd)
    topic, channel = unique(), unique("c")
    got: list[bytes] = []
    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[proxy.address],
        close_timeout=1000,
        **{**FAST, **FAST_CLIENT, "heartbeat_interval": 30_000},  # the stall stays undetected
    )
    reader.set_message_handler(lambda m: got.append(m.body), direct=True)
    await reader.start()
    nsqd.pub(topic, b"x")
    await wait_for(lambda: got == [b"x"], what="the first message")
    loop = asyncio.get_running_loop()
    with proxy.stall():
        start = loop.time()
        if how == "graceful_close":
            await asyncio.wait_for(reader.graceful_close(), DEADLINE)
        else:
            await asyncio.wait_for(reader.close(), DEADLINE)
        took = loop.time() - start
    # close_timeout bounds the CLS wait; the connections then close at once
    assert took < 1.0 + 2.0 + MARGIN, f"closing during a stall took {took:.2f}s"
