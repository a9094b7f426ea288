"""The blocking facade's other timeouts, each within its timeout plus the stated margin
(tests/deadline_support.py), whatever the fault: ``SyncReader.run(timeout=)`` (its start and its
close included), ``SyncReader.graceful_close(timeout)`` and ``SyncWriter.graceful_close(timeout)``
with something left to wait for, and ``run_in_loop(timeout=)``.

Before, ``run(timeout=)`` then closed with the default 30 s ``close_timeout``, and both
``graceful_close`` waited for the loop up to their limit plus 7-12 s.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from nsqclient.errors import NSQError
from nsqclient.sync import SyncReader, SyncWriter, run_in_loop
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.deadline_support import FAULTS, SYNC_CLIENT, Clock, Fault, check_bound, during_call
from tests.support import unique, wait_until

pytestmark = [pytest.mark.timeout(60), pytest.mark.one_backend]  # the client's deadlines

T = 0.5
CLIENT: dict[str, Any] = {**SYNC_CLIENT, "publish_timeout": 10_000}  # longer than T
#: refused, blackholed (never connected), stalled (connected), cut mid-call
CASES = [FAULTS[0], FAULTS[1], FAULTS[2], FAULTS[5]]
IDS = [f.name for f in CASES]


@contextlib.contextmanager
def holding(reader: SyncReader, nsqd: NsqdProcess, topic: str) -> Iterator[None]:
    """Another thread takes a message and keeps it unanswered: a graceful close waits for it."""
    nsqd.pub(topic, b"held")
    took, release = threading.Event(), threading.Event()

    def hold() -> None:
        if reader.get(timeout=10) is not None:
            took.set()
            release.wait(20)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        wait_until(took.is_set, what="a message held by another thread")
        yield
    finally:
        release.set()
        thread.join(5)


@pytest.mark.parametrize("fault", CASES, ids=IDS)
def test_sync_reader_run_returns_within_its_timeout(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, fault: Fault
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    reader = SyncReader(topic, "c", nsqd_tcp_addresses=[proxy.address], **CLIENT)
    gate = threading.Event()
    try:
        if fault.warm:  # connected, a handler busy with a message when the fault strikes
            nsqd.pub(topic, b"busy")
            reader.start(timeout=10)
        fault.arm(proxy)
        with during_call(proxy, fault), Clock() as clock, contextlib.suppress(NSQError):
            stopped = reader.run(lambda msg: gate.wait(20), timeout=T)
            assert stopped is False
        check_bound(clock.elapsed, T, f"SyncReader.run(timeout={T}) ({fault.name})")
    finally:
        gate.set()
        proxy.heal()
        reader.close()


@pytest.mark.parametrize("fault", CASES, ids=IDS)
def test_sync_reader_graceful_close_within_its_timeout(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, fault: Fault
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    reader = SyncReader(topic, "c", nsqd_tcp_addresses=[proxy.address], **CLIENT)
    try:
        with contextlib.ExitStack() as stack:
            if fault.warm:
                reader.start(timeout=10)
                stack.enter_context(holding(reader, nsqd, topic))
                fault.arm(proxy)
            else:  # never connected: retrying in the background (or still in the handshake)
                fault.arm(proxy)
                with contextlib.suppress(NSQError):
                    reader.start(timeout=1.0)
            with during_call(proxy, fault), Clock() as clock:
                reader.graceful_close(T)
            check_bound(clock.elapsed, T, f"SyncReader.graceful_close({T}) ({fault.name})")
    finally:
        proxy.heal()
        reader.close()


@pytest.mark.parametrize("fault", CASES, ids=IDS)
def test_sync_writer_graceful_close_within_its_timeout(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, fault: Fault
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    writer = SyncWriter([proxy.address], **CLIENT)
    try:
        if fault.warm:
            writer.pub(topic, b"warm-up", timeout=10)
        fault.arm(proxy)
        # something to wait for: queued (never connected) or sent and unanswered (stalled)
        futures = [writer.pub_nowait(topic, b"left %d" % i) for i in range(5)]
        with during_call(proxy, fault), Clock() as clock:
            writer.graceful_close(T)
        check_bound(clock.elapsed, T, f"SyncWriter.graceful_close({T}) ({fault.name})")
        for fut in futures:  # none is left hanging
            assert fut.done() or fut.exception(timeout=2) is not None
    finally:
        proxy.heal()
        writer.close()


@pytest.mark.parametrize("fault", CASES, ids=IDS)
def test_run_in_loop_returns_within_its_timeout(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, fault: Fault
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    writer = SyncWriter([proxy.address], **CLIENT)
    try:
        if fault.warm:
            writer.pub(topic, b"warm-up", timeout=10)
            fault.arm(proxy)
        else:
            fault.arm(proxy)
            writer.pub_nowait(topic, b"attach")  # the loop thread is up (this one fails later)
        with during_call(proxy, fault), Clock() as clock, contextlib.suppress(NSQError):
            # publish_timeout is 10 s: run_in_loop's own timeout is the one that ends it
            run_in_loop(writer.aio.pub(topic, b"via run_in_loop"), timeout=T)
        check_bound(clock.elapsed, T, f"run_in_loop(pub, timeout={T}) ({fault.name})")
    finally:
        proxy.heal()
        writer.close()
