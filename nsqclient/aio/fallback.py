"""The Writer's HTTP fallback: publish over nsqd's ``/pub`` or ``/mpub`` while no TCP connection
is up, instead of waiting for a reconnect.

Only publishes not yet sent over TCP come here, so a fallback never duplicates; each address is
tried at most once per publish, and one that broke after sending is not retried elsewhere (that
could duplicate). Each publish runs in a task the Writer's ``close()`` can cancel, its caller then
getting ClosedError. The HTTP clients are made on first use, on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ClosedError, NoConnectionsError, NSQTimeoutError
from .connection import ReplyWaiter

if TYPE_CHECKING:
    from ..http import NsqdHTTPClient

__all__ = ["HTTPFallback", "complete_waiter"]

log = logging.getLogger("nsqclient.writer")


class HTTPFallback:
    """Publishes over HTTP for one Writer.

    ``limits()`` gives the Writer's current (publish timeout, max message size, max body size);
    ``closed()`` says it was closed (a cancelled publish then raises ClosedError); ``dial_now``
    asks the node set to get a TCP connection back before the given loop time.
    """

    def __init__(
        self,
        addresses: list[str],
        ssl_context: ssl.SSLContext | None,
        *,
        limits: Callable[[], tuple[float, int, int]],
        closed: Callable[[], bool],
        dial_now: Callable[[float], None],
    ) -> None:
        self.addresses = addresses
        self._ssl_context = ssl_context
        self._limits = limits
        self._closed = closed
        self._dial_now = dial_now
        self._clients: list[NsqdHTTPClient] = []
        self._rr = 0
        self.tasks: set[asyncio.Task[bytes]] = set()
        self.published = 0  # messages acknowledged over HTTP

    def __bool__(self) -> bool:
        return bool(self.addresses)

    def send(self, waiter: ReplyWaiter, data: bytes, count: int, timeout: float) -> None:
        """Publish ``data`` (``count`` messages) in a task; its outcome completes ``waiter``."""
        task = self.task(data, count, timeout)
        task.add_done_callback(lambda t: complete_waiter(waiter, t))

    def task(self, data: bytes, count: int, timeout: float) -> asyncio.Task[bytes]:
        """Publish over HTTP in a task :meth:`cancel` can cancel."""
        loop = asyncio.get_running_loop()
        self._dial_now(loop.time() + timeout)  # no TCP connection: get one back soon
        task = loop.create_task(self._publish(data, count, timeout), name="nsq-writer-http")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def cancel(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    async def aclose(self) -> None:
        """Cancel what is in flight (graceful_close waited for it, bounded) and close clients."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        clients, self._clients = self._clients, []
        for client in clients:
            await client.aclose()

    def _make_clients(self) -> list[NsqdHTTPClient]:
        from ..http import NsqdHTTPClient

        publish_timeout, max_msg_size, max_body_size = self._limits()
        verify: Any = self._ssl_context if self._ssl_context is not None else True
        return [
            NsqdHTTPClient(
                url,
                timeout=max(publish_timeout, 0.001),
                verify=verify if url.startswith("https://") else True,
                max_msg_size=max_msg_size,
                max_body_size=max_body_size,
            )
            for url in self.addresses
        ]

    async def _publish(self, data: bytes, count: int, timeout: float) -> bytes:
        loop = asyncio.get_running_loop()
        if not self._clients:
            self._clients = self._make_clients()
        from ..errors import HTTPConnectError

        deadline = loop.time() + timeout
        clients = self._clients
        last: BaseException | None = None
        try:
            for _ in range(len(clients)):  # each address at most once
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._rr = (self._rr + 1) % len(clients)
                client = clients[self._rr]
                try:
                    async with asyncio.timeout(remaining):
                        await client.publish_command(data)
                    self.published += count
                except HTTPConnectError as exc:
                    if exc.sent:  # it broke after sending: trying another would duplicate
                        raise
                    last = exc  # never reached nsqd: the next one may
                    log.info("HTTP fallback to %s failed: %s", client.base_url, exc)
                    continue
                except TimeoutError:
                    raise NSQTimeoutError(
                        "no HTTP answer from nsqd before the publish timeout; the message may or "
                        "may not have been published"
                    ) from None
                return b"OK"
        except asyncio.CancelledError:
            if self._closed():
                raise ClosedError(
                    "the Writer was closed while this publish was in flight over HTTP; it may "
                    "or may not have been published",
                    sent=True,
                ) from None
            raise
        raise NoConnectionsError(
            "no nsqd connection over TCP, and the HTTP fallback "
            f"({', '.join(self.addresses)}) could not be reached"
            + (f": {last}" if last is not None else " before the publish timeout")
        ) from last


def complete_waiter(waiter: ReplyWaiter, task: asyncio.Task[bytes]) -> None:
    """Pass an HTTP fallback publish's outcome on to the waiter of the publish it carried."""
    if waiter.done():
        return
    if task.cancelled():
        waiter.set_exception(
            ClosedError(
                "the Writer was closed during an HTTP fallback publish; it may or may not have "
                "been published",
                sent=True,
            )
        )
        return
    exc = task.exception()
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(task.result())
