"""SyncWriter: blocking publishes from any thread, over the asyncio Writer on the loop thread.

Bodies are validated and encoded in the calling thread (bad input raises before anything crosses),
then the encoded command goes through a bounded queue to the loop, where a pump hands batches to
the core Writer without a task per publish. ``pub()`` blocks until nsqd acknowledged or raises the
core's exception object; ``pub_nowait()`` returns a ``concurrent.futures.Future`` instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterable
from typing import Any

from ..config import Config
from ..errors import ClosedError, NoConnectionsError
from ..protocol import commands
from ..protocol.identify import IdentifyOptions
from . import portal
from .bridge import PublishQueue
from .portal import LoopThread, register_open, unregister_open, wait_future

__all__ = ["SyncWriter"]

_GRACE = 2.0  # seconds a thread waits beyond the publish timeout before giving up on the loop


class SyncWriter:
    """Publish to nsqd from blocking code. Thread-safe; share one per process.

    ``max_queued_publishes`` bounds the publishes waiting to cross to the loop; when it is full,
    publishing threads block (backpressure) until nsqd catches up or their timeout passes.
    """

    def __init__(
        self,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        *,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        max_queued_publishes: int = 4096,
        config: Config | None = None,
        **options: Any,
    ) -> None:
        self.config = Config.from_options(config, **options)
        IdentifyOptions.from_config(self.config)  # bad options fail here, in the caller's thread
        if not isinstance(max_queued_publishes, int) or max_queued_publishes < 1:
            raise ValueError("max_queued_publishes must be an int >= 1")
        self._nsqd = nsqd_tcp_addresses
        self._lookupd = lookupd_http_addresses
        self._max_queued = max_queued_publishes
        self._publish_timeout = self.config.seconds("publish_timeout")
        self._max_msg_size = self.config.max_msg_size
        self._max_body_size = self.config.max_body_size
        self._closed = False
        self._attach()

    def _attach(self) -> None:
        """Create the core objects on the (possibly new, after fork) loop thread."""
        self._generation = portal.fork_generation
        self._portal = LoopThread.acquire()
        try:
            self._writer, self._queue, self._pump = self._portal.call(self._setup(), timeout=10)
        except BaseException:
            self._portal.release()
            raise
        register_open(self)

    async def _setup(self) -> tuple[Any, PublishQueue, asyncio.Task[None]]:
        from ..aio.writer import Writer

        writer = Writer(self._nsqd, lookupd_http_addresses=self._lookupd, config=self.config)
        queue = PublishQueue(self._max_queued)
        pump = asyncio.get_running_loop().create_task(
            queue.pump(self._make_publisher(writer)), name="nsq-sync-publish-pump"
        )
        return writer, queue, pump

    @staticmethod
    def _make_publisher(writer: Any) -> Any:
        async def slow(data: bytes, count: int, timeout: float | None) -> asyncio.Future[bytes]:
            await writer.wait_ready(timeout)
            fut = writer.publish_nowait(data, count, timeout)
            if fut is None:
                raise NoConnectionsError("no nsqd connection was ready to publish")
            return fut  # type: ignore[no-any-return]

        def publish(data: bytes, count: int, timeout: float | None) -> Any:
            fut = writer.publish_nowait(data, count, timeout)
            if fut is not None:
                return fut
            return slow(data, count, timeout)

        return publish

    def _check(self) -> None:
        if self._generation != portal.fork_generation:
            # forked: the parent's loop and sockets are not ours; start afresh in this process
            self._attach()
        if self._closed:
            raise ClosedError("this SyncWriter was closed; create a new one")

    # ------------------------------------------------------------------ publishing

    def _submit(
        self, data: bytes, count: int, timeout: float | None
    ) -> concurrent.futures.Future[None]:
        self._check()
        self._portal.check_not_in_loop("SyncWriter publishing")
        limit = self._publish_timeout if timeout is None else timeout
        return self._queue.put(data, count, limit, time.monotonic() + limit)

    def _wait(self, future: concurrent.futures.Future[None], timeout: float | None) -> None:
        limit = self._publish_timeout if timeout is None else timeout
        wait_future(future, limit + _GRACE)

    def pub(self, topic: str, body: object, *, timeout: float | None = None) -> None:
        """Publish one message; returns once nsqd acknowledged it, or raises."""
        data = commands.pub(topic, body, max_msg_size=self._max_msg_size)
        self._wait(self._submit(data, 1, timeout), timeout)

    def mpub(self, topic: str, bodies: Iterable[object], *, timeout: float | None = None) -> None:
        """Publish a batch atomically (all or none)."""
        items = list(bodies)
        data = commands.mpub(
            topic, items, max_msg_size=self._max_msg_size, max_body_size=self._max_body_size
        )
        self._wait(self._submit(data, len(items), timeout), timeout)

    def dpub(
        self, topic: str, delay_ms: int, body: object, *, timeout: float | None = None
    ) -> None:
        """Publish one message that nsqd delivers after ``delay_ms`` milliseconds."""
        data = commands.dpub(topic, delay_ms, body, max_msg_size=self._max_msg_size)
        self._wait(self._submit(data, 1, timeout), timeout)

    def pub_nowait(
        self, topic: str, body: object, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Queue a publish and return a future that resolves when nsqd acknowledges it.

        Blocks only while the bounded publish queue is full (backpressure).
        """
        data = commands.pub(topic, body, max_msg_size=self._max_msg_size)
        return self._submit(data, 1, timeout)

    def mpub_nowait(
        self, topic: str, bodies: Iterable[object], *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        items = list(bodies)
        data = commands.mpub(
            topic, items, max_msg_size=self._max_msg_size, max_body_size=self._max_body_size
        )
        return self._submit(data, len(items), timeout)

    def dpub_nowait(
        self, topic: str, delay_ms: int, body: object, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        data = commands.dpub(topic, delay_ms, body, max_msg_size=self._max_msg_size)
        return self._submit(data, 1, timeout)

    # ------------------------------------------------------------------ lifecycle

    def connect(self, timeout: float | None = None) -> None:
        """Connect now instead of on the first publish (surfaces bad addresses early)."""
        self._check()
        self._portal.call(self._writer.connect(), timeout)

    def __enter__(self) -> SyncWriter:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.graceful_close()

    def graceful_close(self, timeout: float | None = None) -> None:
        """Publish what is queued, wait (bounded) for every acknowledgement, then close."""
        if self._closed:
            return
        self._closed = True
        if self._generation != portal.fork_generation:
            return  # created before fork: the parent owns those connections
        limit = self.config.seconds("close_timeout") if timeout is None else timeout
        try:
            self._portal.call(self._graceful(limit), limit + _GRACE + 1)
        finally:
            self._detach()

    async def _graceful(self, timeout: float) -> None:
        self._queue.close()  # new puts raise; the pump drains what is queued, then stops
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._pump)
        except TimeoutError:
            self._pump.cancel()
        self._queue.fail_pending(ClosedError("the SyncWriter closed before this was sent"))
        await self._writer.graceful_close(timeout)

    def close(self) -> None:
        """Close at once: queued and unacknowledged publishes raise ConnectionClosedError."""
        if self._closed:
            return
        self._closed = True
        if self._generation != portal.fork_generation:
            return
        try:
            self._portal.call(self._abort(), timeout=10)
        finally:
            self._detach()

    async def _abort(self) -> None:
        self._queue.close()
        self._pump.cancel()
        self._queue.fail_pending(ClosedError("the SyncWriter was closed before this was sent"))
        await self._writer.close()

    def _detach(self) -> None:
        unregister_open(self)
        self._portal.release()

    def _close_at_exit(self, timeout: float) -> None:
        if not self._closed:
            self.graceful_close(timeout)

    # ------------------------------------------------------------------ sharing

    @property
    def aio(self) -> Any:
        """The core :class:`nsqclient.aio.Writer`, for coroutines on the shared loop."""
        self._check()
        return self._writer

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._portal.loop

    def stats(self) -> dict[str, Any]:
        self._check()
        result: dict[str, Any] = self._portal.call(_stats(self._writer), timeout=5)
        return result

    @property
    def is_closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"<SyncWriter {'closed' if self._closed else 'open'} {self._writer!r}>"


async def _stats(writer: Any) -> dict[str, Any]:
    return writer.stats()  # type: ignore[no-any-return]
