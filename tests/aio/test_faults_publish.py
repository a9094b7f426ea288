"""Publishing through network faults (FaultProxy between the Writer and a healthy nsqd).

Three publishers (PUB, MPUB, DPUB) keep going while the proxy cuts every connection (FIN, then
RST), stalls the link longer than ``publish_timeout``, and refuses new connections (ECONNREFUSED,
then accept-and-reset). The promise, checked against nsqd by a draining Reader: every call
returns or raises within its timeout plus a small margin, every acknowledged message is in
nsqd, nothing else is there but messages whose publish raised, and nothing acknowledged is
there twice; publishing resumes after each fault. Closing during a stall is bounded too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

import pytest

from nsqclient.aio import Writer
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, Stats, unique
from .fault_support import FAST_CLIENT, MARGIN, Ledger, drain, publish_one

pytestmark = pytest.mark.timeout(90)

PUBLISH_TIMEOUT = 1.0
STALL = PUBLISH_TIMEOUT + 0.5  # longer than publish_timeout: every call in it must give up


@contextlib.contextmanager
def refused(proxy: FaultProxy, mode: str) -> Iterator[None]:
    """New connections refused, and the open ones cut so that the client needs a new one."""
    with proxy.refuse(mode):  # type: ignore[arg-type]
        proxy.cut()
        yield


def fault_steps(
    proxy: FaultProxy,
) -> list[tuple[str, Callable[[], contextlib.AbstractContextManager[object]]]]:
    """(name, a context manager that holds the fault) in the order the tests apply them."""
    return [
        ("cut (FIN)", lambda: _instant(lambda: proxy.cut())),
        ("cut (RST)", lambda: _instant(lambda: proxy.cut(rst=True))),
        ("stall", lambda: proxy.stall(new_connections=True)),
        ("refuse", lambda: refused(proxy, "refuse")),
        ("accept and reset", lambda: refused(proxy, "reset")),
    ]


@contextlib.contextmanager
def _instant(action: Callable[[], object]) -> Iterator[None]:
    action()
    yield


@pytest.mark.one_backend
async def test_writer_publishes_through_cuts_stalls_and_refusals(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy, stats: Stats
) -> None:
    topic, ledger = unique(), Ledger()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    options = {**FAST_CLIENT, "publish_timeout": int(PUBLISH_TIMEOUT * 1000)}

    async with Writer([nsq_fault_proxy.address], **options) as writer:

        async def publisher(how: str) -> None:
            while not stop.is_set():
                if not await publish_one(writer, ledger, topic, how, PUBLISH_TIMEOUT):
                    await asyncio.sleep(0.02)  # a caller that retries, not one that spins

        tasks = [asyncio.create_task(publisher(how)) for how in ("pub", "mpub", "dpub")]
        try:
            for name, fault in fault_steps(nsq_fault_proxy):
                before = len(ledger.acked)
                await wait_for(lambda b=before: len(ledger.acked) > b + 20, what=f"before {name}")
                with fault():
                    if name != "cut (FIN)" and name != "cut (RST)":
                        await asyncio.sleep(STALL)  # how long the fault lasts
                resumed_from, at = len(ledger.acked), loop.time()
                await wait_for(
                    lambda r=resumed_from: len(ledger.acked) > r + 20, what=f"resume after {name}"
                )
                # reconnect backoff is capped at 250 ms here; allow for a slow CI machine
                assert loop.time() - at < 5.0, (
                    f"publishing resumed {loop.time() - at:.1f}s after {name}"
                )
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
        assert writer.outstanding == 0
    assert ledger.raised, "no publish ever failed: the faults did not bite"
    assert ledger.worst_overrun <= MARGIN
    ledger.check(await drain(nsqd, topic, stats))
    counters = nsq_fault_proxy.counters()
    assert counters.connections_cut >= 4 and counters.connections_refused >= 1


@pytest.mark.parametrize("how", ["graceful_close", "close"])
async def test_writer_close_during_a_stall_is_bounded(
    nsq_fault_proxy: FaultProxy, how: str
) -> None:
    writer = Writer([nsq_fault_proxy.address], **FAST_CLIENT, close_timeout=1000)
    await writer.start()
    await writer.pub(unique(), b"before")
    loop = asyncio.get_running_loop()
    with nsq_fault_proxy.stall():
        pending = [asyncio.create_task(writer.pub(unique(), b"stuck")) for _ in range(5)]
        await wait_for(lambda: writer.outstanding == 5, what="publishes to be outstanding")
        start = loop.time()
        if how == "graceful_close":
            await asyncio.wait_for(writer.graceful_close(timeout=1.0), DEADLINE)
            bound = 1.0 + 2.0 + MARGIN  # the wait, then closing (write_timeout + 1 s at most)
        else:
            await asyncio.wait_for(writer.close(), DEADLINE)
            bound = MARGIN
        assert loop.time() - start < bound
        results = await asyncio.gather(*pending, return_exceptions=True)
        assert all(isinstance(r, Exception) for r in results)  # none acknowledged: the stall
        assert writer.outstanding == 0
