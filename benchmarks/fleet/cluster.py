"""The fleet: one nsqlookupd and N nsqd on free loopback ports, real processes or embedded.

Real binaries (``test_service/.bin``, ``$NSQ_BIN_DIR`` or PATH) are used when present; the
embedded server (:mod:`nsqclient.testing.embedded`, each nsqd on its own loop thread in this
process) otherwise, or when asked. Also the untimed setup and the independent checks: topics
and channels over HTTP, preloading with MPUB, paced publishing for the streaming scenarios,
waiting for a consumer to be subscribed everywhere, nsqd's own channel counters and (real
processes) nsqd's CPU time from ``/proc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nsqclient.aio import Writer
from nsqclient.benchmark.latency import nsqd_cpu_seconds
from nsqclient.benchmark.nsqd_admin import ChannelCounts
from nsqclient.testing.daemons import NsqBinaryNotFound, find_nsq_binary

from .body import make_bodies

__all__ = ["Fleet", "resolve_backend"]

MEM_QUEUE_SIZE = 10_000_000  # nothing spills to disk, as in the comparison (BENCHMARKS.md)
BATCH = 250


def resolve_backend(backend: str) -> str:
    """``auto`` -> ``real`` when nsqd and nsqlookupd binaries are found, else ``embedded``."""
    if backend != "auto":
        return backend
    try:
        find_nsq_binary("nsqd")
        find_nsq_binary("nsqlookupd")
    except NsqBinaryNotFound:
        return "embedded"
    return "real"


def nsqd_version() -> str:
    try:
        out = subprocess.run(
            [str(find_nsq_binary("nsqd")), "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, NsqBinaryNotFound, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


class Fleet:
    """``count`` nsqd registered with one nsqlookupd. ``nsqds[:n]`` serve a scenario of ``n``."""

    def __init__(self, count: int, backend: str, nsqd_flags: Sequence[str] = ()) -> None:
        self.backend = resolve_backend(backend)
        self.count = count
        self.nsqd_flags = list(nsqd_flags)
        self.lookupd: Any = None
        self.nsqds: list[Any] = []

    def start(self, timeout: float = 60.0) -> Fleet:
        try:
            if self.backend == "real":
                self._start_real(timeout)
            else:
                self._start_embedded(timeout)
            self.lookupd.wait_for_nodes([n.tcp_address for n in self.nsqds], timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_real(self, timeout: float) -> None:
        from nsqclient.testing.daemons import NsqdProcess, NsqlookupdProcess

        self.lookupd = NsqlookupdProcess()
        self.lookupd.start(timeout)
        self.nsqds = [
            NsqdProcess(
                lookupd_tcp_addresses=[self.lookupd.tcp_address],
                mem_queue_size=MEM_QUEUE_SIZE,
                extra_args=self.nsqd_flags,
            )
            for _ in range(self.count)
        ]
        with ThreadPoolExecutor(8) as pool:  # 64+ processes: start them a few at a time
            list(pool.map(lambda n: n.start(timeout), self.nsqds))

    def _start_embedded(self, timeout: float) -> None:
        from nsqclient.testing.embedded import ThreadedEmbeddedLookupd, ThreadedEmbeddedNsqd

        self.lookupd = ThreadedEmbeddedLookupd()
        self.lookupd.start(timeout)
        for _ in range(self.count):
            nsqd = ThreadedEmbeddedNsqd(
                lookupd_tcp_addresses=[self.lookupd.tcp_address],
                mem_queue_size=MEM_QUEUE_SIZE,
                extra_args=self.nsqd_flags,
            )
            self.nsqds.append(nsqd)
            nsqd.start(timeout)

    def stop(self) -> None:
        for daemon in [*reversed(self.nsqds), self.lookupd]:
            if daemon is not None:
                with contextlib.suppress(Exception):
                    daemon.stop()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- setup (untimed)

    def create(self, nsqds: Sequence[Any], topic: str, channel: str, timeout: float = 30.0) -> None:
        """Topic and channel on every nsqd of ``nsqds``, and wait until lookupd lists them all
        as producers of ``topic`` (so a consumer's first lookup finds every one)."""
        for nsqd in nsqds:
            nsqd.http_post("/topic/create", params={"topic": topic}, timeout=10)
            nsqd.http_post(
                "/channel/create", params={"topic": topic, "channel": channel}, timeout=10
            )
        self.lookupd.wait_for_topic(topic, [n.tcp_address for n in nsqds], timeout)

    def delete(self, nsqds: Sequence[Any], topic: str) -> None:
        for nsqd in nsqds:
            with contextlib.suppress(Exception):
                nsqd.http_post("/topic/delete", params={"topic": topic}, timeout=10)

    def preload(
        self, nsqds: Sequence[Any], topic: str, counts: Sequence[int], payload_size: int
    ) -> list[tuple[int, int]]:
        """MPUB ``counts[i]`` bodies with source ``i`` to ``nsqds[i]`` (seq numbered across all
        of them); returns each nsqd's (first seq, count)."""
        ranges, seq = [], 0
        for count in counts:
            ranges.append((seq, count))
            seq += count

        async def load(nsqd: Any, source: int, first: int, count: int) -> None:
            if not count:
                return
            async with Writer([nsqd.tcp_address]) as writer:
                for lo in range(0, count, BATCH):
                    n = min(BATCH, count - lo)
                    await writer.mpub(topic, make_bodies(first + lo, n, source, payload_size))

        async def load_all() -> None:
            sem = asyncio.Semaphore(8)

            async def one(i: int) -> None:
                async with sem:
                    await load(nsqds[i], i, *ranges[i])

            await asyncio.gather(*(one(i) for i in range(len(nsqds))))

        asyncio.run(load_all())
        return ranges

    def channel_counts(
        self, nsqds: Sequence[Any], topic: str, channel: str
    ) -> list[dict[str, int]]:
        """nsqd's own counters of ``topic/channel``, one dict per nsqd."""
        keys = ChannelCounts.KEYS
        out = []
        for nsqd in nsqds:
            counts = dict.fromkeys(keys, 0)
            for t in nsqd.stats(topic=topic, channel=channel).get("topics") or []:
                for c in t.get("channels") or [] if t.get("topic_name") == topic else []:
                    if c.get("channel_name") == channel:
                        counts.update({k: int(c.get(k) or 0) for k in keys})
            out.append(counts)
        return out

    def wait_subscribed(
        self,
        nsqds: Sequence[Any],
        topic: str,
        channel: str,
        timeout: float,
        alive: Callable[[], bool],
    ) -> float:
        """Wait until every nsqd of ``nsqds`` has a client on the channel; returns the seconds
        waited. ``alive()`` false (the consumer exited) ends the wait early with an error."""
        start = time.monotonic()
        waiting = list(nsqds)
        while waiting:
            waiting = [
                n
                for n in waiting
                if not self.channel_counts([n], topic, channel)[0]["client_count"]
            ]
            if not waiting:
                break
            if not alive():
                raise RuntimeError("the consumer exited before it subscribed everywhere")
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{len(waiting)} nsqd have no consumer after {timeout:g}s")
            time.sleep(0.05)
        return time.monotonic() - start

    def cpu_seconds(self, nsqds: Sequence[Any]) -> float | None:
        """User+system CPU seconds the nsqd processes used so far (None when embedded)."""
        if self.backend != "real":
            return None
        cpu = (nsqd_cpu_seconds(nsqd.pid) for nsqd in nsqds)  # None: gone, or not a process
        return sum((c for c in cpu if c is not None), 0.0)


async def paced_publish(
    nsqds: Sequence[Any],
    topic: str,
    targets: Callable[[float], list[int]],
    duration: float,
    payload_size: int,
    tick: float = 0.02,
) -> tuple[list[int], float, float]:
    """Publish so that nsqd ``i`` has received ``targets(elapsed)[i]`` messages (cumulative,
    non-decreasing) at each tick, until ``duration``; the last tick tops up to
    ``targets(duration)`` exactly. Returns (published per nsqd, start and end as Unix time).
    ``seq`` runs over all nsqd in publish order; the caller's ``--expect`` is their sum."""
    sent = [0] * len(nsqds)
    seq = 0
    writers = [Writer([n.tcp_address]) for n in nsqds]
    for w in writers:
        await w.start()
    try:
        t0 = time.perf_counter()
        start_unix = time.time()
        while True:
            elapsed = min(time.perf_counter() - t0, duration)
            want = targets(elapsed)
            jobs = []
            for i, w in enumerate(writers):
                n = want[i] - sent[i]
                while n > 0:
                    k = min(n, BATCH)
                    jobs.append(w.mpub(topic, make_bodies(seq, k, i, payload_size)))
                    seq += k
                    sent[i] += k
                    n -= k
            if jobs:
                await asyncio.gather(*jobs)
            if elapsed >= duration:
                break
            await asyncio.sleep(max(0.0, tick - (time.perf_counter() - t0 - elapsed)))
        return sent, start_unix, time.time()
    finally:
        for w in writers:
            await w.close()
