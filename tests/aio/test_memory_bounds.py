"""What a Writer and a Reader hold while nsqd is away, and that it is all given back after.

The bounds are docs/configuration.md's ("Memory while nsqd is away"), measured with tracemalloc
on the library's own allocations (:mod:`tests.memory_support`: after ``gc.collect()``, the
test's bodies and tasks and the in-process fault proxy excluded):

* a Writer publishing at a steady rate through an outage (the proxy refusing, every connection
  cut) holds, at every sample, no more than the calls waiting for a connection at that moment
  (about ``rate x publish_timeout`` of them), each its encoded command and :data:`PER_CALL`
  bytes of bookkeeping, and a failed connection attempt, plus :data:`SLACK`; once nsqd is back
  and every publish resolved, it is back within :data:`SLACK` of its level before the outage;
* a Reader consuming through cuts (FIN, RST) and a stall holds no more than ``max_in_flight``
  messages (body plus :data:`PER_MESSAGE`) and a read buffer per connection, plus
  :data:`SLACK`; delivery goes on after each fault, and once every message is finished the
  Reader is back within :data:`SLACK` of its level before.

A leak of one small object per publish or per delivery fails these (keeping a 300-byte error per
failed publish left the embedded case 385 KB over its level before, three times the margin); so
does a Writer keeping the bodies of failed publishes.
"""

from __future__ import annotations

import asyncio
import collections
import tracemalloc
from collections.abc import Callable

import pytest

from nsqclient.aio import Message, Reader, Writer
from nsqclient.errors import NSQError
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.memory_support import KiB, library_bytes, snapshot, top_diff, traced, unrecorded_logs
from tests.support import wait_for

from .conftest import unique
from .fault_support import FAST_CLIENT, NSQD_FAST_REDELIVERY

pytestmark = pytest.mark.timeout(120)

#: seconds nsqd is unreachable under the publishing Writer (the issue's 30 s against real nsqd;
#: the embedded server, the same code path on the client's side, gets a shorter one)
OUTAGE = {"real": 30.0, "embedded": 5.0}
RATE = 200  # publishes a second, one task each
BODY = 1024
PUBLISH_TIMEOUT = 1.0
#: what one publish waiting for a connection costs besides its encoded command (its future,
#: its timeout's handle, the coroutine frames): the documented figure
PER_CALL = 2 * KiB
#: what one in-flight message costs besides its body (Message, its ledger entry): documented
PER_MESSAGE = 1 * KiB
#: a connection: its read buffer (64 KiB) and the rest of it (documented: 80 KiB)
CONNECTION = 80 * KiB
#: the decoder's partial frame: at most one frame (a message here), as a socket read's rest
FRAME = BODY + 64
#: the stated margin: what may differ from the bound, or from the level before, for reasons
#: no option controls (a reconnect's new connection objects, caches; measured: 3-21 KiB after)
SLACK = 128 * KiB
MAX_IN_FLIGHT = 50
SAMPLE_EVERY = 1.0


class Peak:
    """The most the library held above ``base`` (and the snapshot of that moment)."""

    def __init__(self, before: tracemalloc.Snapshot, bound: Callable[[], int]) -> None:
        self.before = before
        self.base = library_bytes(before)
        self.bound = bound  # the documented bound at the moment of a sample
        self.over = 0  # the most a sample was over its bound (negative: under by that much)
        self.held = 0  # what that sample held
        self.snap: tracemalloc.Snapshot | None = None

    async def sample(self) -> None:
        """Until cancelled, every :data:`SAMPLE_EVERY` seconds (a snapshot blocks the loop for
        a moment: not more often)."""
        self.over = -(1 << 62)
        while True:
            bound = self.bound()  # nothing runs on the loop between this and the snapshot
            snap = snapshot()
            held = library_bytes(snap) - self.base
            if held - bound > self.over:
                self.over, self.held, self.snap = held - bound, held, snap
            await asyncio.sleep(SAMPLE_EVERY)

    def check(self, what: str) -> None:
        assert self.snap is not None, "never sampled"
        assert self.over <= 0, (
            f"held {self.held} B {what}, {self.over} B over its bound:\n"
            + top_diff(self.snap, self.before)
        )


@pytest.mark.slow
@pytest.mark.one_backend
async def test_writer_through_an_outage_holds_its_bound_and_gives_it_back(
    nsq_backend: str, nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy
) -> None:
    proxy, topic = nsq_fault_proxy, unique()
    loop = asyncio.get_running_loop()
    outcomes: collections.Counter[str] = collections.Counter()
    tasks: set[asyncio.Task[None]] = set()
    body = b"x" * BODY
    options = {**FAST_CLIENT, "publish_timeout": int(PUBLISH_TIMEOUT * 1000)}

    async def one() -> None:
        try:
            await writer.pub(topic, body)
            outcomes["acked"] += 1
        except NSQError as exc:
            outcomes[type(exc).__name__] += 1

    async def steady(seconds: float) -> int:
        """Publish at RATE for `seconds`; return how many were started (fewer on a busy machine)."""
        start, n = loop.time(), 0
        while loop.time() < start + seconds:
            n += 1
            task = loop.create_task(one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(max(0.0, start + n / RATE - loop.time()))
        return n

    with traced(), unrecorded_logs():
        async with Writer([proxy.address], **options) as writer:
            await steady(1.0)  # warm: every code path of a publish has run
            await wait_for(lambda: not tasks and not writer.outstanding, what="warm-up resolved")
            before = snapshot()
            base = library_bytes(before)

            # the calls waiting for a connection, each its encoded PUB and its bookkeeping, and
            # a failed connection attempt's read buffer
            peak = Peak(before, lambda: len(tasks) * (BODY + 64 + PER_CALL) + CONNECTION + SLACK)
            with proxy.refuse():
                proxy.cut()
                sampler = loop.create_task(peak.sample())
                warm = outcomes.copy()
                try:
                    started = await steady(OUTAGE[nsq_backend])
                finally:
                    sampler.cancel()
                # each resolved while nsqd is still unreachable (on a loop that lags behind a
                # busy machine, publishes started late would otherwise meet the reconnection)
                await wait_for(lambda: not tasks, what="the outage's publishes resolved")
            peak.check("during the outage")
            outage = outcomes - warm
            # none acknowledged with no nsqd to reach; those written before the cut was seen
            # fail as maybe sent, every later one found no connection (never sent)
            assert outage.total() == started and not outage["acked"], (started, outage)
            assert outage["NoConnectionsError"] > started / 2, (started, outage)

            acked = outcomes["acked"]
            await steady(1.0)  # nsqd is back: publishing resumes
            await wait_for(lambda: not tasks and not writer.outstanding, what="all resolved")
            assert outcomes["acked"] > acked, outcomes
            after = snapshot()
            grown = library_bytes(after) - base
            assert grown <= SLACK, (
                f"{grown} B more than before the outage (margin {SLACK} B):\n"
                + top_diff(after, before)
            )


@pytest.mark.slow
@pytest.mark.one_backend
async def test_reader_through_cuts_and_stalls_holds_its_bound_and_gives_it_back(
    nsqd_factory: Callable[..., NsqdProcess], nsq_fault_proxy_factory: Callable[..., FaultProxy]
) -> None:
    nsqd = nsqd_factory(extra_args=NSQD_FAST_REDELIVERY)  # cut deliveries come back soon
    proxy, topic = nsq_fault_proxy_factory(nsqd), unique()
    seen: set[bytes] = set()
    body_pad = b"y" * BODY

    async def handler(msg: Message) -> None:
        seen.add(bytes(msg.body[:12]))
        await asyncio.sleep(0.002)  # a consumer that takes a moment: messages stay in flight

    def publish(first: int, count: int) -> None:
        bodies = [b"%012d" % i + body_pad for i in range(first, first + count)]
        nsqd.http_post("/mpub", b"\n".join(bodies), {"topic": topic})

    options = {**FAST_CLIENT, "max_in_flight": MAX_IN_FLIGHT}
    with traced(), unrecorded_logs():
        reader = Reader(
            topic, "c", message_handler=handler, nsqd_tcp_addresses=[proxy.address], **options
        )
        async with reader:
            publish(0, 200)
            await wait_for(lambda: len(seen) == 200 and not reader.stats()["in_flight"])
            before = snapshot()
            base = library_bytes(before)

            # in flight at most max_in_flight messages, a connection and a reconnect's more
            bound = MAX_IN_FLIGHT * (BODY + PER_MESSAGE) + 2 * CONNECTION + FRAME + SLACK
            peak = Peak(before, lambda: bound)
            sampler = asyncio.create_task(peak.sample())
            try:
                publish(200, 800)
                await wait_for(lambda: len(seen) >= 320, what="delivery before the faults")
                proxy.cut()
                await wait_for(lambda: len(seen) >= 480, what="delivery after a cut (FIN)")
                proxy.cut(rst=True)
                await wait_for(lambda: len(seen) >= 640, what="delivery after a cut (RST)")
                with proxy.stall():
                    await asyncio.sleep(2.5)  # past two heartbeats: the Reader drops the link
                await wait_for(lambda: len(seen) >= 1000, what="delivery after a stall")
            finally:
                sampler.cancel()
            await wait_for(lambda: not reader.stats()["in_flight"], what="nothing in flight")
            peak.check("under the faults")
            after = snapshot()
            grown = library_bytes(after) - base
            assert grown <= SLACK, (
                f"{grown} B more than before the faults (margin {SLACK} B):\n"
                + top_diff(after, before)
            )
