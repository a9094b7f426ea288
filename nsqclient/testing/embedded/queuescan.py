"""nsqd's queue scan: when timed-out in-flight messages and due deferred messages are found.

nsqd keeps no timer per message. Its ``queueScanLoop`` wakes every ``queue_scan_interval``
(100 ms), takes ``queue_scan_selection_count`` (20) channels at random from a cached list of all
channels and has each move its expired in-flight and due deferred messages back to the queue; if
more than ``queue_scan_dirty_percent`` (25 %) of them had any, it samples again at once. The
cached list is rebuilt only every ``queue_scan_refresh_interval`` (5 s, counted from nsqd's
start), so a channel created after the last refresh is not scanned until the next one: with
``--msg-timeout=2s``, a message on a new channel comes back after up to ~5 s, not 2 s. That is
what a client of real nsqd observes, so it is what this scanner does, on the server's loop.

nsqd runs the sampled channels on a pool of up to ``queue_scan_worker_pool_max`` goroutines; here
they run one after another on the loop (the same messages move, in the same scan). With
``precise_timeouts=True`` the embedded nsqd skips the scan and uses one exact timer per channel.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from typing import Protocol

__all__ = ["QueueScanner", "Scanned"]

_MAX_PASSES = 1000  # dirty passes in a row before yielding to the loop (nsqd has no cap)


class Scanned(Protocol):
    """What the scan asks of a channel (``Channel``)."""

    exiting: bool

    def process_in_flight(self, now: float) -> bool: ...

    def process_deferred(self, now: float) -> bool: ...


class QueueScanner:
    """The scan loop for one nsqd; ``channels()`` lists every channel (the refresh's source)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        channels: Callable[[], Iterable[Scanned]],
        *,
        interval: float,
        refresh_interval: float,
        selection_count: int,
        dirty_percent: float,
    ) -> None:
        self.loop = loop
        self._source = channels
        self.interval = max(interval, 0.001)
        self.refresh_interval = max(refresh_interval, 0.001)
        self.selection_count = max(selection_count, 1)
        self.dirty_percent = dirty_percent
        self._channels: list[Scanned] = []
        self._next_tick = self._next_refresh = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Take the first channel list and start ticking (nsqd's start of queueScanLoop)."""
        self.stop()
        start = self.loop.time()
        self._channels = list(self._source())
        self._next_tick = start + self.interval
        self._next_refresh = start + self.refresh_interval
        self._timer = self.loop.call_at(self._next_tick, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        now = self.loop.time()
        if now >= self._next_refresh:  # the refresh ticker (also when both are due at once)
            self._channels = list(self._source())
            while self._next_refresh <= now:
                self._next_refresh += self.refresh_interval
        if self._channels:
            self.scan()
        while self._next_tick <= now:  # a Go ticker drops the ticks a slow reader missed
            self._next_tick += self.interval
        self._timer = self.loop.call_at(self._next_tick, self._tick)

    def scan(self) -> None:
        """One wake-up: sample, process, and sample again while enough were dirty."""
        channels = self._channels
        count = min(self.selection_count, len(channels))
        for _ in range(_MAX_PASSES):
            dirty = 0
            for channel in random.sample(channels, count):
                if channel.exiting:
                    continue
                now = self.loop.time()
                in_flight = channel.process_in_flight(now)
                deferred = channel.process_deferred(now)
                dirty += in_flight or deferred
            if dirty / count <= self.dirty_percent:
                return
