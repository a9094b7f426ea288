"""Setup and independent checks over nsqd's HTTP API: topics, channels, preloading, counters.

"Independent" means from nsqd's point of view: after a scenario the runner asks every nsqd what
it saw (depth, in flight, requeues, timeouts, message counts) instead of trusting the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..aio import Writer
from ..errors import HTTPTimeoutError
from ..http import SyncNsqdHTTPClient
from .params import Params
from .scenarios import mpub_with

__all__ = ["ChannelCounts", "NsqdAdmin"]


class ChannelCounts(dict[str, int]):
    """Channel counters summed over every nsqd: depth, in_flight_count, deferred_count,
    message_count, requeue_count, timeout_count, client_count."""

    KEYS = (
        "depth",
        "in_flight_count",
        "deferred_count",
        "message_count",
        "requeue_count",
        "timeout_count",
        "client_count",
    )


class NsqdAdmin:
    def __init__(self, http_addresses: Iterable[str], timeout: float = 30.0) -> None:
        self.addresses = list(http_addresses)
        self._clients = [SyncNsqdHTTPClient(a, timeout=timeout) for a in self.addresses]

    # (setup and checks only: nothing here is timed)

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def __enter__(self) -> NsqdAdmin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def ping(self) -> None:
        for client in self._clients:
            client.ping()

    def create(self, topic: str, channels: Iterable[str] = ()) -> None:
        channels = list(channels)
        for client in self._clients:
            _retry(client.create_topic, topic)
            for channel in channels:
                _retry(client.create_channel, topic, channel)

    def delete_topic(self, topic: str) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.delete_topic(topic)

    def channel_counts(self, topic: str, channel: str) -> ChannelCounts:
        counts = ChannelCounts({key: 0 for key in ChannelCounts.KEYS})
        for client in self._clients:
            stats = client.stats(topic=topic, channel=channel, include_clients=False)
            for t in stats.get("topics") or []:
                if t.get("topic_name") != topic:
                    continue
                for c in t.get("channels") or []:
                    if c.get("channel_name") == channel:
                        for key in ChannelCounts.KEYS:
                            counts[key] += int(c.get(key) or 0)
        return counts

    def topic_message_count(self, topic: str) -> int:
        total = 0
        for client in self._clients:
            stats = client.stats(topic=topic, include_clients=False)
            for t in stats.get("topics") or []:
                if t.get("topic_name") == topic:
                    total += int(t.get("message_count") or 0)
        return total

    def wait_depth(self, topic: str, channel: str, depth: int, timeout: float = 60.0) -> None:
        """Wait (setup only, so polling is fine) until the channel holds ``depth`` messages."""
        deadline = time.monotonic() + timeout
        while True:
            counts = self.channel_counts(topic, channel)
            if counts["depth"] >= depth:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{topic}/{channel} holds {counts['depth']} messages, expected {depth}"
                )
            time.sleep(0.02)

    def check_consumed(
        self,
        topic: str,
        channel: str,
        *,
        messages: int,
        requeues: int | None = 0,
    ) -> list[str]:
        """What nsqd says went wrong after every message of ``topic/channel`` was consumed and
        every reader closed: [] when depth, in flight and deferred are 0, no message timed out,
        ``message_count == messages`` and requeues are as expected (None: not checked)."""
        counts = self.channel_counts(topic, channel)
        problems = [
            f"{key}={counts[key]}"
            for key in ("depth", "in_flight_count", "deferred_count", "timeout_count")
            if counts[key]
        ]
        if counts["message_count"] != messages:
            problems.append(f"message_count={counts['message_count']} (expected {messages})")
        if requeues is not None and counts["requeue_count"] != requeues:
            problems.append(f"requeue_count={counts['requeue_count']} (expected {requeues})")
        return problems

    def preload(self, nsqd_tcp: list[str], topic: str, channel: str, p: Params) -> None:
        """MPUB ``p.messages`` benchmark bodies (untimed) and wait until the channel holds them."""
        self.create(topic, [channel])
        asyncio.run(_preload(nsqd_tcp, p.replace(topic=topic)))
        self.wait_depth(topic, channel, p.messages, timeout=max(30.0, p.timeout))


def _retry(fn: Callable[..., Any], *args: Any, attempts: int = 3) -> Any:
    """Setup calls are idempotent; on a busy machine one may time out, so try again."""
    for attempt in range(attempts):
        try:
            return fn(*args)
        except HTTPTimeoutError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    return None


async def _preload(nsqd_tcp: list[str], p: Params) -> None:
    async with Writer(nsqd_tcp) as writer:
        acked, failed, ok = await mpub_with(writer, p.replace(mpub_concurrency=4))
    if failed or not ok or acked != p.messages:
        raise RuntimeError(f"preloading {p.topic} failed: {acked} acked, {failed} failed")


def summarize(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in counts.items())
