"""Every asyncio call that takes a timeout returns or raises within it, whatever the fault.

Table-driven: each Writer and Reader call against each fault of ``tests/deadline_support.py``
(refused, blackholed, stalled, slowed, cut mid-call), on real nsqd behind a FaultProxy (the
embedded one with ``--nsq-backend=embedded``: the deadline is the client's, see ONE_BACKEND in
tests/conftest.py), timed on the call's own clock. The stated margin (``deadline_support.bound``):
``timeout + 0.5 s + 20%``. A call that succeeds is as good as one that raises an NSQError: the
bound is the promise here (what was stored is the fault tests' business).

Timeouts: publishes and closes 0.5 s; ``Writer.connect`` and ``Reader.start`` (which take no
timeout) are bounded by ``dial_timeout + read_timeout`` (Writer: dial, then the handshake) and
``dial_timeout + 2 * read_timeout`` (Reader: the handshake, then SUB), all short here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.errors import NSQError
from nsqclient.message import Message
from nsqclient.protocol import commands
from nsqclient.testing import FaultProxy
from nsqclient.testing.backends import NsqdServer
from tests.deadline_support import (
    CONNECT_FAULT_IDS,
    CONNECT_FAULTS,
    FAULT_IDS,
    FAULTS,
    Clock,
    Fault,
    check_bound,
    during_call,
)
from tests.support import unique, wait_for

pytestmark = [pytest.mark.timeout(30), pytest.mark.one_backend]  # the client's deadlines

T = 0.5  # the timeout of every call with one
DIAL, READ = 0.3, 0.5  # dial_timeout and read_timeout (seconds) of the clients here
CLIENT: dict[str, Any] = {
    "heartbeat_interval": 1000,
    "reconnect_delay": 50,
    "max_reconnect_delay": 250,
    "dial_timeout": int(DIAL * 1000),
    "read_timeout": int(READ * 1000),
}
#: the Writer's calls with a timeout must not depend on read_timeout: a long one shows it
PUBLISHER = {**CLIENT, "read_timeout": 3000}
#: a publish left waiting while the Writer closes (longer than any close here)
LONG = 5.0

WriterCall = Callable[[Writer, str], Awaitable[object]]


async def _publish_nowait(writer: Writer, topic: str) -> None:
    fut = writer.publish_nowait(commands.pub(topic, b"nowait"), 1, T)
    if fut is not None:  # None: no connection or slot now (the caller waits with wait_ready)
        await fut


async def _graceful_close(writer: Writer, topic: str) -> None:
    await writer.graceful_close(T)


async def _close(writer: Writer, topic: str) -> None:
    await writer.close()


#: name -> (its timeout, the call); the closes run with a publish outstanding
WRITER_CALLS: dict[str, tuple[float, WriterCall]] = {
    "pub": (T, lambda w, t: w.pub(t, b"one", timeout=T)),
    "mpub": (T, lambda w, t: w.mpub(t, [b"a", b"b"], timeout=T)),
    "dpub": (T, lambda w, t: w.dpub(t, 10, b"later", timeout=T)),
    "publish_nowait": (T, _publish_nowait),
    "wait_ready": (T, lambda w, t: w.wait_ready(T)),
    "graceful_close": (T, _graceful_close),
    "close": (0.0, _close),
}


@pytest.mark.parametrize("fault", FAULTS, ids=FAULT_IDS)
@pytest.mark.parametrize("name", list(WRITER_CALLS))
async def test_writer_call_returns_within_its_timeout(
    nsqd: NsqdServer, nsq_fault_proxy: FaultProxy, name: str, fault: Fault
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    timeout, call = WRITER_CALLS[name]
    writer = Writer([proxy.address], **PUBLISHER)
    background: asyncio.Task[None] | None = None
    try:
        if fault.warm:
            await writer.pub(topic, b"warm-up")
        fault.arm(proxy)
        if name.endswith("close"):  # something to wait for: a publish still outstanding
            background = asyncio.create_task(writer.pub(topic, b"outstanding", timeout=LONG))
            await asyncio.sleep(0)
        with during_call(proxy, fault), Clock() as clock, contextlib.suppress(NSQError):
            await call(writer, topic)
        check_bound(clock.elapsed, timeout, f"Writer.{name} ({fault.name})")
    finally:
        proxy.heal()
        await writer.close()
        if background is not None:
            await asyncio.gather(background, return_exceptions=True)


@pytest.mark.parametrize("fault", CONNECT_FAULTS, ids=CONNECT_FAULT_IDS)
async def test_writer_connect_within_dial_and_read_timeouts(
    nsqd: NsqdServer, nsq_fault_proxy: FaultProxy, fault: Fault
) -> None:
    proxy = nsq_fault_proxy
    writer = Writer([proxy.address], **CLIENT)
    try:
        fault.arm(proxy)
        with during_call(proxy, fault), Clock() as clock, contextlib.suppress(NSQError):
            await writer.connect()
        check_bound(clock.elapsed, DIAL + READ, f"Writer.connect ({fault.name})")
    finally:
        proxy.heal()
        await writer.close()


@pytest.mark.parametrize("fault", CONNECT_FAULTS, ids=CONNECT_FAULT_IDS)
async def test_reader_start_within_dial_and_read_timeouts(
    nsqd: NsqdServer, nsq_fault_proxy: FaultProxy, fault: Fault
) -> None:
    proxy = nsq_fault_proxy
    reader = Reader(unique(), "c", nsqd_tcp_addresses=[proxy.address], **CLIENT)
    try:
        fault.arm(proxy)
        with during_call(proxy, fault), Clock() as clock, contextlib.suppress(NSQError):
            await reader.start()
        check_bound(clock.elapsed, DIAL + 2 * READ, f"Reader.start ({fault.name})")
    finally:
        proxy.heal()
        await reader.close()


async def _hold_one(reader: Reader, held: list[Message]) -> None:
    """Take one message and keep it unanswered (an iterating task that is still alive)."""
    async for msg in reader:
        held.append(msg)
        await asyncio.Event().wait()


@pytest.mark.parametrize("fault", FAULTS, ids=FAULT_IDS)
@pytest.mark.parametrize("graceful", [True, False], ids=["graceful_close", "close"])
async def test_reader_close_returns_within_its_timeout(
    nsqd: NsqdServer, nsq_fault_proxy: FaultProxy, graceful: bool, fault: Fault
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    reader = Reader(topic, "c", nsqd_tcp_addresses=[proxy.address], **CLIENT)
    held: list[Message] = []
    holder: asyncio.Task[None] | None = None
    try:
        if fault.warm:  # connected, with a message in hand that nobody answers
            nsqd.pub(topic, b"in hand")
            holder = asyncio.create_task(_hold_one(reader, held))
            await wait_for(lambda: held, what="a message in hand")
        fault.arm(proxy)
        if not fault.warm:
            await reader.start()  # tried once; retried in the background
        timeout = T if graceful else 0.0
        with during_call(proxy, fault), Clock() as clock:
            if graceful:
                await reader.graceful_close(T)
            else:
                await reader.close()
        check_bound(clock.elapsed, timeout, f"Reader.{'graceful_' * graceful}close ({fault.name})")
    finally:
        proxy.heal()
        await reader.close()
        if holder is not None:
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
