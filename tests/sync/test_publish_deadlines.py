"""Every blocking publish returns or raises within its timeout plus the stated margin
(tests/deadline_support.py), whatever the fault, from one thread and from sixteen at once.

The case that started it: nsqd unreachable (refused) and ``publish_timeout=1.0``, 40
``SyncWriter.pub`` calls raised and the longest took 2.0 s (the thread waited 2 s beyond its
deadline for the loop). Now the thread gives up on its own clock, the ticket's state saying
whether the publish was sent.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.errors import NotSentTimeoutError, NSQError
from nsqclient.sync import SyncWriter
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.deadline_support import (
    FAULT_IDS,
    FAULTS,
    SYNC_CLIENT,
    Clock,
    Fault,
    check_bound,
    during_call,
)
from tests.support import unique

pytestmark = [pytest.mark.timeout(60), pytest.mark.one_backend]  # the client's deadlines

T = 0.5
CLIENT: dict[str, Any] = SYNC_CLIENT

SyncCall = Callable[[SyncWriter, str], object]
SYNC_CALLS: dict[str, SyncCall] = {
    "pub": lambda w, t: w.pub(t, b"one", timeout=T),
    "mpub": lambda w, t: w.mpub(t, [b"a", b"b"], timeout=T),
    "dpub": lambda w, t: w.dpub(t, 10, b"later", timeout=T),
    "pub_nowait": lambda w, t: w.pub_nowait(t, b"nw", timeout=T).result(T + 5),
    "mpub_nowait": lambda w, t: w.mpub_nowait(t, [b"a"], timeout=T).result(T + 5),
    "dpub_nowait": lambda w, t: w.dpub_nowait(t, 10, b"d", timeout=T).result(T + 5),
}


@pytest.mark.parametrize("fault", FAULTS, ids=FAULT_IDS)
@pytest.mark.parametrize("name", list(SYNC_CALLS))
def test_sync_publish_returns_within_its_timeout(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, name: str, fault: Fault
) -> None:
    proxy, topic, call = nsq_fault_proxy, unique(), SYNC_CALLS[name]
    writer = SyncWriter([proxy.address], **CLIENT)
    try:
        if fault.warm:
            writer.pub(topic, b"warm-up", timeout=10)
        fault.arm(proxy)
        with during_call(proxy, fault), Clock() as clock, contextlib.suppress(NSQError):
            call(writer, topic)
        check_bound(clock.elapsed, T, f"SyncWriter.{name} ({fault.name})")
    finally:
        proxy.heal()
        writer.close()


@pytest.mark.parametrize("fault", [FAULTS[0], FAULTS[2]], ids=[FAULTS[0].name, FAULTS[2].name])
def test_sixteen_threads_each_within_their_timeout(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, fault: Fault
) -> None:
    """The issue's case, 16 threads at once with publish_timeout=1.0: refused (never
    connected: never sent) and stalled (connected: sent, maybe stored)."""
    proxy, topic = nsq_fault_proxy, unique()
    writer = SyncWriter([proxy.address], **{**CLIENT, "publish_timeout": 1000})  # not connected
    try:
        if fault.warm:
            writer.pub(topic, b"warm-up", timeout=10)
        fault.arm(proxy)
        barrier = threading.Barrier(16)

        def one(_: int) -> tuple[float, BaseException | None]:
            barrier.wait(10)
            with Clock() as clock:
                try:
                    writer.pub(topic, b"x")
                except NSQError as exc:
                    return clock.elapsed, exc
            return clock.elapsed, None

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(one, range(16)))
    finally:
        proxy.heal()
        writer.close()
    for elapsed, error in outcomes:
        assert error is not None
        check_bound(elapsed, 1.0, f"SyncWriter.pub from 16 threads ({fault.name})")
        if not fault.warm:
            assert error.sent is False and (
                isinstance(error, NotSentTimeoutError)
                or type(error).__name__ == "NoConnectionsError"
            )
        else:
            assert error.sent is True
