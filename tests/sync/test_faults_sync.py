"""The blocking facade through network faults (FaultProxy between it and a healthy nsqd).

SyncWriter: three publishing threads (PUB, MPUB, DPUB) through cuts (FIN, RST), a stall longer
than ``publish_timeout`` and refused connections; every call returns or raises within its
timeout plus a margin, and a drain finds every acknowledged message, nothing acknowledged twice
and nothing nobody published. SyncReader: consumption resumes after a cut, a stall (detected
after two heartbeat intervals) and refusals, carries on over a slow link on the same
connection; everything is finished, nothing left in flight.
Closing either while the link is stalled finishes within its bound.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nsqclient.errors import NSQError
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing import FaultProxy
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import channel_stats, drain_bodies, message_count, unique

pytestmark = pytest.mark.timeout(90)

FAST: dict[str, Any] = {
    "heartbeat_interval": 1000,
    "reconnect_delay": 50,
    "max_reconnect_delay": 250,
    "dial_timeout": 1000,
    "read_timeout": 2000,
}
PUBLISH_TIMEOUT = 1.0
MARGIN = 1.5


class SyncLedger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[bytes] = []
        self.raised: list[bytes] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.worst_overrun = 0.0
        self._n = 0

    def bodies(self, tag: str, n: int) -> list[bytes]:
        with self.lock:
            start, self._n = self._n, self._n + n
        return [f"{tag}-{i:06d}".encode() for i in range(start, start + n)]

    def publish(self, writer: SyncWriter, topic: str, how: str) -> bool:
        bodies = self.bodies(how, 3 if how == "mpub" else 1)
        start = time.monotonic()
        try:
            if how == "mpub":
                writer.mpub(topic, bodies, timeout=PUBLISH_TIMEOUT)
            elif how == "dpub":
                writer.dpub(topic, 10, bodies[0], timeout=PUBLISH_TIMEOUT)
            else:
                writer.pub(topic, bodies[0], timeout=PUBLISH_TIMEOUT)
        except NSQError as exc:
            ok = False
            with self.lock:
                self.raised.extend(bodies)
                self.errors[type(exc).__name__] += 1
        else:
            ok = True
            with self.lock:
                self.acked.extend(bodies)
        overrun = time.monotonic() - start - PUBLISH_TIMEOUT
        with self.lock:
            self.worst_overrun = max(self.worst_overrun, overrun)
        return ok

    def check(self, stored: list[bytes]) -> None:
        counts = collections.Counter(stored)
        acked, raised = set(self.acked), set(self.raised)
        assert not [b for b in acked if b not in counts], "acknowledged messages missing"
        assert not [b for b in counts if b not in acked and b not in raised], "strangers stored"
        assert not [b for b, n in counts.items() if n > 1 and b not in raised], "stored twice"
        assert self.worst_overrun <= MARGIN, f"a publish overran by {self.worst_overrun:.2f}s"


@contextlib.contextmanager
def fault(proxy: FaultProxy, name: str) -> Iterator[None]:
    if name.startswith("cut"):
        proxy.cut(rst=name == "cut (RST)")
        yield
        return
    if name == "stall":
        with proxy.stall(new_connections=True):
            yield
        return
    with proxy.refuse("refuse"):
        proxy.cut()
        yield


@pytest.mark.one_backend
def test_sync_writer_publishes_through_network_faults(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy
) -> None:
    topic, ledger = unique(), SyncLedger()
    stop = threading.Event()
    options = {**FAST, "publish_timeout": int(PUBLISH_TIMEOUT * 1000)}
    with SyncWriter([nsq_fault_proxy.address], **options) as writer:

        def publisher(how: str) -> None:
            while not stop.is_set():
                if not ledger.publish(writer, topic, how):
                    time.sleep(0.02)  # a caller that retries, not one that spins

        threads = [
            threading.Thread(target=publisher, args=(how,), daemon=True)
            for how in ("pub", "mpub", "dpub")
        ]
        for t in threads:
            t.start()
        try:
            for name in ("cut (FIN)", "cut (RST)", "stall", "refuse"):
                before = len(ledger.acked)
                wait_until(lambda b=before: len(ledger.acked) > b + 20, what=f"before {name}")
                with fault(nsq_fault_proxy, name):
                    if not name.startswith("cut"):
                        time.sleep(PUBLISH_TIMEOUT + 0.5)  # how long the fault lasts
                resumed, at = len(ledger.acked), time.monotonic()
                wait_until(
                    lambda r=resumed: len(ledger.acked) > r + 20, what=f"resume after {name}"
                )
                assert time.monotonic() - at < 5.0
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert not any(t.is_alive() for t in threads)
    assert ledger.raised, "no publish ever failed: the faults did not bite"
    stored = drain_bodies(nsqd, topic, message_count(nsqd, topic), **FAST)
    ledger.check(stored)


@pytest.mark.one_backend
def test_sync_reader_consumes_through_a_cut_a_stall_refusals_and_a_slow_link(
    nsqd_factory: Any, nsq_fault_proxy_factory: Any
) -> None:
    nsqd = nsqd_factory(extra_args=["--msg-timeout=2s"])
    proxy = nsq_fault_proxy_factory(nsqd)
    topic, channel = unique(), unique("c")
    published: list[bytes] = []
    handled: set[bytes] = set()
    count = [0]

    def more(n: int) -> None:
        """Publish ``n`` fresh messages, after reading the count a wait is for: each wait for
        ``n`` more handled has them to handle, however many the consumer took meanwhile (on a
        busy machine it emptied the channel between two steps, and a wait found nothing to
        come)."""
        fresh = [b"%05d" % i for i in range(len(published), len(published) + n)]
        writer.mpub(topic, fresh)
        published.extend(fresh)

    with SyncWriter([nsqd.tcp_address]) as writer:
        more(40)
        with SyncReader(
            topic, channel, nsqd_tcp_addresses=[proxy.address], max_in_flight=8, **FAST
        ) as reader:
            stop = threading.Event()

            def consume() -> None:
                while not stop.is_set():
                    msg = reader.get(timeout=0.1)
                    if msg is None:
                        continue
                    time.sleep(0.002)
                    handled.add(msg.body)
                    count[0] += 1
                    msg.fin()

            worker = threading.Thread(target=consume, daemon=True)
            worker.start()
            try:
                for n, step in enumerate(["cut (RST)", "stall", "refuse"], start=2):
                    target = count[0] + 20
                    more(20)
                    wait_until(lambda t=target: count[0] >= t, what=f"messages before the {step}")
                    # a stall of the open connection only: its replacement must get through
                    with proxy.stall() if step == "stall" else fault(proxy, step):
                        start = time.monotonic()
                        if step == "refuse":
                            time.sleep(1.0)  # how long connections are refused
                        else:
                            wait_until(
                                lambda n=n: proxy.counters().connections_accepted >= n,
                                what=f"a new connection after the {step}",
                            )
                    if step == "refuse":  # accepted again: the reader must come back soon
                        start = time.monotonic()
                        wait_until(
                            lambda n=n: proxy.counters().connections_accepted >= n,
                            what="a new connection after the refusals",
                        )
                    took = time.monotonic() - start
                    bound = (2.0 + MARGIN) if step == "stall" else 3.0
                    assert took < bound, f"{step}: the connection was replaced after {took:.2f}s"
                    resumed = count[0]
                    more(10)
                    wait_until(lambda r=resumed: count[0] > r, what=f"messages after the {step}")
                with proxy.slow(down=20_000, up=20_000):  # slow is not dead: no replacement
                    target = count[0] + 30
                    more(30)  # (straight to nsqd: these 30 come over the slow link)
                    wait_until(lambda t=target: count[0] >= t, what="messages over a slow link")
                assert proxy.counters().connections_accepted == 4
                more(100)
                wait_until(lambda: handled >= set(published), 25, what="every message handled")
                wait_until(
                    lambda: (
                        (c := channel_stats(nsqd, topic, channel)) is not None
                        and c["in_flight_count"] == 0
                        and c["depth"] == 0
                    ),
                    what="nothing left in flight",
                )
            finally:
                stop.set()
                worker.join(10)


@pytest.mark.one_backend
def test_sync_writer_and_reader_close_during_a_stall(
    nsqd: NsqdProcess, nsq_fault_proxy: FaultProxy
) -> None:
    topic, channel = unique(), unique("c")
    writer = SyncWriter([nsq_fault_proxy.address], **{**FAST, "heartbeat_interval": 30_000})
    writer.pub(topic, b"x")
    reader = SyncReader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsq_fault_proxy.address],
        close_timeout=1000,
        **{**FAST, "heartbeat_interval": 30_000},
    )
    reader.start()
    msg = reader.get(timeout=10)
    assert msg is not None and msg.body == b"x"
    msg.fin()
    with nsq_fault_proxy.stall():
        writer.pub_nowait(topic, b"stuck")
        start = time.monotonic()
        writer.graceful_close(timeout=1.0)
        reader.graceful_close(timeout=1.0)
        took = time.monotonic() - start
    assert took < 2 * (1.0 + 2.0) + MARGIN, f"closing during a stall took {took:.2f}s"
    assert writer.is_closed and reader.is_closed
