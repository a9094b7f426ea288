"""Helpers for the fault tests (tests/aio/test_faults_*.py): publish accounting, draining a
topic with a second Reader, and the short timeouts that keep each fault test to seconds.

The accounting is the promise itself: every acknowledged publish is in nsqd, a publish that
raised may or may not be, nothing else is there and nothing is there twice.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nsqclient.aio import Reader, Writer
from nsqclient.errors import NSQError
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, Stats

#: nsqd's minimum heartbeat interval: dead links are found in about two seconds
HEARTBEAT_MS = 1000
#: how late a publish may return or raise after its publish_timeout
MARGIN = 1.5
FAST_CLIENT: dict[str, Any] = {
    "heartbeat_interval": HEARTBEAT_MS,
    "reconnect_delay": 50,
    "max_reconnect_delay": 250,
    "dial_timeout": 1000,
    "read_timeout": 2000,
}
#: nsqd flags that make a cut consumer's in-flight messages come back quickly
NSQD_FAST_REDELIVERY = ["--msg-timeout=2s"]


@dataclass
class Ledger:
    """What a publisher was told: acknowledged bodies, bodies whose publish raised, and how long
    the slowest call took past its timeout."""

    acked: list[bytes] = field(default_factory=list)
    raised: list[bytes] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    worst_overrun: float = 0.0
    _n: int = 0

    def next_body(self, tag: str = "m") -> bytes:
        self._n += 1
        return f"{tag}-{self._n:06d}".encode()

    async def call(
        self, bodies: list[bytes], publish: Awaitable[object], timeout: float, loop_time: float
    ) -> bool:
        """Await one publish of ``bodies``; record its outcome and how long it took."""
        try:
            await publish
        except NSQError as exc:
            self.raised.extend(bodies)
            self.errors[type(exc).__name__] += 1
            ok = False
        else:
            self.acked.extend(bodies)
            ok = True
        took = asyncio.get_running_loop().time() - loop_time
        self.worst_overrun = max(self.worst_overrun, took - timeout)
        return ok

    def check(self, stored: list[bytes]) -> None:
        """The promise, against what a drain found in nsqd."""
        counts = collections.Counter(stored)
        missing = [b for b in self.acked if b not in counts]
        assert not missing, f"{len(missing)} acknowledged messages missing: {missing[:5]}"
        raised = set(self.raised)
        strangers = [b for b in counts if b not in raised and b not in set(self.acked)]
        assert not strangers, f"messages nobody published: {strangers[:5]}"
        twice = [b for b, n in counts.items() if n > 1 and b not in raised]
        assert not twice, f"acknowledged once, stored twice: {twice[:5]}"
        assert self.worst_overrun <= MARGIN, (
            f"a publish overran its timeout by {self.worst_overrun}"
        )


async def publish_one(writer: Writer, ledger: Ledger, topic: str, how: str, timeout: float) -> bool:
    """One PUB, MPUB (3 bodies) or DPUB (10 ms), accounted in ``ledger``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    if how == "mpub":
        bodies = [ledger.next_body(how) for _ in range(3)]
        call: Awaitable[object] = writer.mpub(topic, bodies, timeout=timeout)
    elif how == "dpub":
        bodies = [ledger.next_body(how)]
        call = writer.dpub(topic, 10, bodies[0], timeout=timeout)
    else:
        bodies = [ledger.next_body(how)]
        call = writer.pub(topic, bodies[0], timeout=timeout)
    return await ledger.call(bodies, call, timeout, start)


async def drain(nsqd: NsqdProcess, topic: str, stats: Stats, channel: str = "drain") -> list[bytes]:
    """Every body nsqd holds for ``topic`` (read by a second, direct Reader on a new channel;
    nsqd keeps a topic's messages until its first channel exists)."""
    expect = await stats.message_count(nsqd, topic)
    got: list[bytes] = []
    reader = Reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=200, **FAST_CLIENT
    )
    reader.set_message_handler(lambda m: got.append(m.body), direct=True)
    try:
        await reader.start()
        await wait_for(lambda: len(got) >= expect, what=f"the drain to read {expect} messages")
    finally:
        await reader.graceful_close()
    return got


async def wait_replaced(
    conns: Callable[[], list[Any]], old: Any, timeout: float = DEADLINE, what: str = ""
) -> Any:
    """Wait until the client's open connection is a new one; return it."""
    return await wait_for(
        lambda: next((c for c in conns() if c is not old and c.is_open), None),
        timeout,
        what=what or "the connection to be replaced",
    )
