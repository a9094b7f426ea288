"""Finding nsqd nodes through nsqlookupd: periodic, jittered, one lookupd per poll in rotation.

Each poll asks one lookupd (go-nsq's rotation; on failure the next one, up to three tries, all
within one ``lookupd_poll_timeout``: a lookupd that hangs cannot make a poll take three) and
reports the producers' TCP addresses to a callback. The first poll runs at once, the next after
``rand * jitter * interval``, then every ``interval``; :meth:`LookupdPoller.poke` asks for an early
poll (a connection died), rate-limited by the caller's reconnect backoff.

A poll that fails (every lookupd tried) is retried after a short backoff
(:func:`~nsqclient.flow.lookupd_retry_backoff`: 1 s, doubling, at most 10 s), not a whole
interval later, so a client started before its lookupd (docker-compose) finds its nsqd within
seconds of lookupd coming up. The WARNING says when it retries; while the failures go on, one
more WARNING at most once a minute (DEBUG in between), and an INFO when lookupd answers again.
An answer that lists no nsqd is asked again on the same backoff (nsqd may be starting and not
registered yet): an idle client of a topic nobody produces queries every 10 s, not every 60 s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..addresses import Address, parse_address
from ..config import Config
from ..errors import NSQTimeoutError
from ..flow import lookupd_retry_backoff
from ..flow.backoff import new_rng

if TYPE_CHECKING:
    import random

__all__ = ["LookupdPoller"]

log = logging.getLogger("nsqclient.lookupd")

_TRIES = 3
#: seconds between two WARNINGs about lookupd queries that keep failing
REPEAT_WARNING_AFTER = 60.0


class LookupdPoller:
    """Polls nsqlookupd for the producers of one topic (or all nodes, for writers)."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        config: Config,
        on_producers: Callable[[list[Address]], None],
        topic: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        from ..http import LookupdHTTPClient

        if not addresses:
            raise ValueError("LookupdPoller needs at least one lookupd address")
        self.topic = topic
        self._config = config
        self._on_producers = on_producers
        self._rng = rng or new_rng()
        timeout = self._timeout = config.sec.lookupd_poll_timeout
        headers = {}
        secret = config.auth_secret_bytes
        if secret:
            headers["Authorization"] = "Bearer " + secret.decode("utf-8", "replace")
        self._clients = [
            LookupdHTTPClient(address, timeout=timeout, headers=headers) for address in addresses
        ]
        self._index = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.polls = 0
        self.failures = 0
        #: the failed tries of the last poll: (lookupd URL, error)
        self._errors: list[tuple[str, Exception]] = []

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="nsq-lookupd")

    def poke(self) -> None:
        """Poll as soon as possible (a lookupd-discovered connection closed)."""
        self._wake.set()

    async def poll_once(self) -> list[Address] | None:
        """Query one lookupd (rotating, retrying the next on failure); None if all tries failed.
        The tries share one ``lookupd_poll_timeout``: the poll ends by it, whatever each does."""
        self._errors = []
        client = self._clients[self._index % len(self._clients)]
        try:
            async with asyncio.timeout(self._timeout):
                for _ in range(min(_TRIES, len(self._clients)) or 1):
                    client = self._clients[self._index % len(self._clients)]
                    self._index += 1
                    try:
                        if self.topic is not None:
                            result = await client.lookup(self.topic)
                            producers = result.producers
                        else:
                            producers = await client.nodes()
                    except Exception as exc:
                        self.failures += 1
                        self._errors.append((client.base_url, exc))
                        continue
                    self.polls += 1
                    return [parse_address(p.tcp_address) for p in producers]
        except TimeoutError:
            self.failures += 1
            self._errors.append(
                (
                    client.base_url,
                    NSQTimeoutError(
                        f"no answer within lookupd_poll_timeout ({self._timeout:g}s), "
                        "every try of this poll included"
                    ),
                )
            )
        return None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._config.sec.lookupd_poll_interval
        jitter = self._config.lookupd_poll_jitter
        retry = lookupd_retry_backoff(interval, rng=self._rng)
        first = True
        failing_since: float | None = None  # loop time of the first failed poll in a row
        failed_polls = 0
        warned_at = 0.0
        while True:
            self._wake.clear()  # a poke arriving during this poll asks for another one
            found = await self.poll_once()
            if found is None:
                failed_polls += 1
                delay = retry.next_delay()
                now = loop.time()
                if failing_since is None:
                    failing_since = warned_at = now
                    level = logging.WARNING
                elif now - warned_at >= REPEAT_WARNING_AFTER:
                    warned_at = now
                    level = logging.WARNING
                else:
                    level = logging.DEBUG
                log.log(level, "%s; retrying in %.1fs", self._failure_text(), delay)
            else:
                if failing_since is not None:
                    log.info(
                        "lookupd answered again after %d failed polls over %.1fs",
                        failed_polls,
                        loop.time() - failing_since,
                    )
                    failing_since, failed_polls = None, 0
                for url, exc in self._errors:  # another lookupd answered for this one
                    log.warning("lookupd %s query failed: %s; asked the next lookupd", url, exc)
                try:
                    self._on_producers(found)
                except Exception:
                    log.exception("error handling lookupd results")
                if found:
                    retry.reset()
                    delay = self._rng.random() * jitter * interval if first else interval
                    first = False
                else:  # no nsqd registered (yet): they may be starting too, so ask again soon
                    delay = retry.next_delay()
                    log.debug("lookupd lists no nsqd %s; asking again in %.1fs", self._what, delay)
            try:
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass

    @property
    def _what(self) -> str:
        return "at all" if self.topic is None else f"for topic {self.topic!r}"

    def _failure_text(self) -> str:
        errors = self._errors
        if len(errors) == 1:
            url, exc = errors[0]
            return f"lookupd {url} query failed: {exc}"
        return "lookupd queries failed (" + "; ".join(f"{u}: {e}" for u, e in errors) + ")"

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for client in self._clients:
            await client.aclose()
