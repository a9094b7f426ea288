"""Every HTTP client call returns or raises within the client's ``timeout``, whatever the fault.

Table-driven: the nsqd clients (async and blocking: ping, stats, pub, mpub; the publish calls go
over nsqclient's own keep-alive wire, the others over httpx) and the lookupd clients (ping,
lookup, nodes: what a Reader's discovery asks) against each fault of
``tests/deadline_support.py`` through a FaultProxy in front of the daemon's HTTP port, on real
daemons (``one_backend``: the deadline is the client's, the daemon behind the proxy only
stands by; ``--nsq-backend=embedded`` runs them on the embedded ones). The stated margin
(``deadline_support.bound``): ``timeout + 0.5 s + 20%``. ``timeout`` is the whole request
(connect, send, every read), not each read: a server trickling a byte at a time must not
stretch it.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest

from nsqclient.errors import NSQError
from nsqclient.http import (
    LookupdHTTPClient,
    NsqdHTTPClient,
    SyncLookupdHTTPClient,
    SyncNsqdHTTPClient,
)
from nsqclient.testing import FaultProxy
from tests.deadline_support import FAULT_IDS, FAULTS, Clock, Fault, check_bound, during_call
from tests.support import unique

pytestmark = [pytest.mark.timeout(30), pytest.mark.one_backend]  # the client's deadlines

T = 0.5  # every client's timeout here

Call = Callable[[Any], Any]
NSQD_CALLS: dict[str, Call] = {
    "ping": lambda c: c.ping(),
    "stats": lambda c: c.stats(),
    "pub": lambda c: c.pub("deadline", b"one"),
    "mpub": lambda c: c.mpub("deadline", [b"a", b"b"]),
}
LOOKUPD_CALLS: dict[str, Call] = {
    "ping": lambda c: c.ping(),
    "lookup": lambda c: c.lookup(unique()),
    "nodes": lambda c: c.nodes(),
}


async def _run(client: Any, call: Call) -> None:
    result = call(client)
    if inspect.isawaitable(result):
        await result


async def _warm(client: Any, call: Call) -> None:
    """One call that succeeds before the fault (its kept-alive connection is what the fault
    then meets): on a loaded machine the first may take longer than T, so it is tried again
    (the timing under test is the faulted call's, not this one's)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            await _run(client, call)
            return
        except NSQError:
            if time.monotonic() > deadline:
                raise


async def _close(client: Any) -> None:
    if isinstance(client, NsqdHTTPClient | LookupdHTTPClient):
        await client.aclose()
    else:
        client.close()


async def _check(client: Any, proxy: FaultProxy, call: Call, fault: Fault, what: str) -> None:
    try:
        if fault.warm:  # a kept-alive connection, through the proxy, before the fault
            await _warm(client, call)
        fault.arm(proxy)
        with during_call(proxy, fault), Clock() as clock, contextlib.suppress(NSQError):
            await _run(client, call)
        check_bound(clock.elapsed, T, f"{what} ({fault.name})")
    finally:
        proxy.heal()
        await _close(client)


@pytest.mark.parametrize("fault", FAULTS, ids=FAULT_IDS)
@pytest.mark.parametrize("name", list(NSQD_CALLS))
@pytest.mark.parametrize("cls", [NsqdHTTPClient, SyncNsqdHTTPClient], ids=["async", "sync"])
async def test_nsqd_http_call_returns_within_its_timeout(
    nsqd: Any, nsq_fault_proxy_factory: Callable[..., FaultProxy], cls: Any, name: str, fault: Fault
) -> None:
    proxy = nsq_fault_proxy_factory(nsqd.http_address)
    client = cls(proxy.address, timeout=T)
    await _check(client, proxy, NSQD_CALLS[name], fault, f"{cls.__name__}.{name}")


@pytest.mark.parametrize("fault", FAULTS, ids=FAULT_IDS)
@pytest.mark.parametrize("name", list(LOOKUPD_CALLS))
@pytest.mark.parametrize("cls", [LookupdHTTPClient, SyncLookupdHTTPClient], ids=["async", "sync"])
async def test_lookupd_http_call_returns_within_its_timeout(
    nsqlookupd: Any,
    nsq_fault_proxy_factory: Callable[..., FaultProxy],
    cls: Any,
    name: str,
    fault: Fault,
) -> None:
    proxy = nsq_fault_proxy_factory(nsqlookupd.http_address)
    client = cls(proxy.address, timeout=T)
    await _check(client, proxy, LOOKUPD_CALLS[name], fault, f"{cls.__name__}.{name}")
