"""A lookupd poll ends within ``lookupd_poll_timeout`` plus the stated margin
(tests/deadline_support.py), whatever the fault, with three lookupd addresses that all fail.

A poll tries up to three lookupd in turn; before, each try had the whole poll timeout, so a poll
of three hanging lookupd took three times it. Now the tries share one deadline. Each lookupd
address here is a FaultProxy in front of the same nsqlookupd's HTTP port.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from nsqclient.aio.discovery import LookupdPoller
from nsqclient.config import Config
from nsqclient.testing import FaultProxy
from nsqclient.testing.backends import LookupdServer
from tests.deadline_support import DURING_AFTER, FAULTS, Fault, check_bound

pytestmark = [pytest.mark.timeout(30), pytest.mark.one_backend]  # the client's deadlines

T = 0.5  # lookupd_poll_timeout, seconds
#: refused, blackholed, slowed, cut mid-call (a lookupd's HTTP has no "connected" state to keep)
CASES = [FAULTS[0], FAULTS[1], FAULTS[3], FAULTS[5]]


@pytest.mark.parametrize("fault", CASES, ids=[f.name for f in CASES])
async def test_a_poll_of_three_failing_lookupd_ends_within_its_timeout(
    nsqlookupd: LookupdServer,
    nsq_fault_proxy_factory: Callable[..., FaultProxy],
    fault: Fault,
) -> None:
    proxies = [nsq_fault_proxy_factory(nsqlookupd.http_address) for _ in range(3)]
    poller = LookupdPoller(
        [p.address for p in proxies],
        config=Config(lookupd_poll_timeout=int(T * 1000)),
        on_producers=lambda producers: None,
        topic="t",
    )
    try:
        for _ in proxies:  # healthy: each lookupd answers (no producers), its connection kept
            assert await poller.poll_once() == []
        for proxy in proxies:
            fault.arm(proxy)
            if not fault.warm:  # the HTTP clients' kept-alive connections go too
                proxy.cut()
        loop = asyncio.get_running_loop()
        if fault.during is not None:
            for proxy in proxies:
                loop.call_later(DURING_AFTER, fault.during, proxy)
        start = time.monotonic()
        result = await poller.poll_once()
        check_bound(time.monotonic() - start, T, f"a lookupd poll ({fault.name})")
        assert result is None, poller._errors  # failed: retried on the short backoff
    finally:
        await poller.close()
        for proxy in proxies:
            proxy.heal()
