"""SyncWriter: blocking publishes from any thread, over the asyncio Writer on the loop thread.

Bodies are validated and encoded in the calling thread (bad input raises before anything crosses),
then the encoded command goes through a bounded queue to the loop, where a drain hands batches to
the core Writer without a task per publish. ``pub()`` blocks until nsqd acknowledged or raises the
core's exception object; ``pub_nowait()`` returns a ``concurrent.futures.Future`` instead. When
the queue is full (nsqd slow or frozen), publishing threads block: that is the backpressure.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..errors import ClosedError
from ..protocol import commands
from ..protocol.identify import IdentifyOptions
from ..protocol.names import Body
from . import portal
from .portal import Lifetime, LoopThread, register_open, unregister_open
from .publish import PublishQueue, PublishTicket

if TYPE_CHECKING:
    from ..aio.writer import Writer

__all__ = ["SyncWriter"]

_GRACE = 2.0  # seconds a thread waits beyond the publish timeout before giving up on the loop
_SETUP_TIMEOUT = 10.0


class SyncWriter:
    """Publish to nsqd from blocking code. Thread-safe; share one per process.

    ``max_queued_publishes`` bounds the publishes waiting to cross to the loop; when it is full,
    publishing threads block (backpressure) until nsqd catches up or their timeout passes. Other
    options are :class:`~nsqclient.config.Config` fields (``publish_timeout``,
    ``max_pending_publishes``, ...). ``with SyncWriter(...) as writer`` connects at once and
    closes gracefully (every queued publish sent and acknowledged, bounded by ``close_timeout``).
    ``http_fallback_addresses`` are the core Writer's: nsqd HTTP addresses used while no TCP
    connection is up.
    """

    def __init__(
        self,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        *,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        http_fallback_addresses: Iterable[object] | str | None = None,
        max_queued_publishes: int = 4096,
        config: Config | None = None,
        **options: Any,
    ) -> None:
        self.config = Config.from_options(config, **options)
        IdentifyOptions.from_config(self.config)  # bad options fail here, in the caller's thread
        if (
            isinstance(max_queued_publishes, bool)
            or not isinstance(max_queued_publishes, int)
            or max_queued_publishes < 1
        ):
            raise ValueError("max_queued_publishes must be an int >= 1")
        self._nsqd = nsqd_tcp_addresses
        self._lookupd = lookupd_http_addresses
        self._http_fallback = http_fallback_addresses
        self._max_queued = max_queued_publishes
        self._publish_timeout = self.config.seconds("publish_timeout")
        self._closed = False
        # The core Writer is built on the loop thread on first use (so creating a SyncWriter
        # starts no thread, e.g. in a pre-fork server's master); building one here checks the
        # addresses and TLS options in the caller's thread, at once.
        _validate(self._nsqd, self._lookupd, self._http_fallback, self.config)
        self._close_claim = threading.Lock()
        self._generation = -1  # != portal.fork_generation: attach on first use

    def _attach(self) -> None:
        """Create the core objects on the (possibly new, after fork) loop thread."""
        generation = portal.fork_generation
        loop_thread = LoopThread.acquire()
        try:
            self._writer, self._queue = loop_thread.call(self._setup(), _SETUP_TIMEOUT)
        except BaseException:
            loop_thread.release()
            raise
        self._portal = loop_thread
        self._life: Lifetime[None] = Lifetime(loop_thread)
        if self._generation != -1:  # rebuilding in a forked child: the parent's claim is moot
            self._close_claim = threading.Lock()
        register_open(self)
        self._generation = generation  # last: other threads now see a complete object

    async def _setup(self) -> tuple[Writer, PublishQueue]:
        from ..aio.writer import Writer

        writer = Writer(
            self._nsqd,
            lookupd_http_addresses=self._lookupd,
            http_fallback_addresses=self._http_fallback,
            config=self.config,
        )
        queue = PublishQueue(
            self._max_queued, writer.publish_to, writer.wait_ready, writer.publish_done
        )
        return writer, queue

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("this SyncWriter was closed; create a new one")
        if self._generation != portal.fork_generation:
            with portal.fork_lock():  # forked: the parent's loop and sockets are not ours
                if self._generation != portal.fork_generation:
                    self._attach()

    # ------------------------------------------------------------------ publishing

    def _core(self) -> Writer:
        """The core Writer (attached first): its size limits include what nsqd reported."""
        self._check()
        return self._writer

    def _send(
        self,
        data: bytes,
        count: int,
        timeout: float | None,
        future: concurrent.futures.Future[None] | None = None,
    ) -> PublishTicket:
        self._check()
        self._portal.check_not_in_loop("SyncWriter publishing")
        limit = self._publish_timeout if timeout is None else timeout
        ticket = PublishTicket(data, count, time.monotonic() + limit, future)
        self._queue.put(ticket)
        return ticket

    def _publish(self, data: bytes, count: int, timeout: float | None) -> None:
        ticket = self._send(data, count, timeout)
        ticket.wait(ticket.deadline + _GRACE)

    def _publish_nowait(
        self, data: bytes, count: int, timeout: float | None
    ) -> concurrent.futures.Future[None]:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._send(data, count, timeout, future)
        return future

    def pub(self, topic: str, body: Body, *, timeout: float | None = None) -> None:
        """Publish one message; returns once nsqd acknowledged it, or raises.

        ``timeout`` (seconds, default ``publish_timeout``) covers waiting for room in the queue
        and for nsqd's acknowledgement. The errors, and which of them mean "maybe published"
        (ConnectionClosedError, NSQTimeoutError), are :meth:`nsqclient.aio.Writer.pub`'s.
        Any thread; NSQError if called from the nsqclient loop thread (it would deadlock).
        """
        core = self._core()
        self._publish(commands.pub(topic, body, max_msg_size=core.max_msg_size), 1, timeout)

    def mpub(self, topic: str, bodies: Iterable[Body], *, timeout: float | None = None) -> None:
        """Publish a batch atomically (all or none); ``timeout`` and errors as :meth:`pub`."""
        items = list(bodies)
        core = self._core()
        data = commands.mpub(
            topic, items, max_msg_size=core.max_msg_size, max_body_size=core.max_body_size
        )
        self._publish(data, len(items), timeout)

    def dpub(self, topic: str, delay_ms: int, body: Body, *, timeout: float | None = None) -> None:
        """Publish one message that nsqd delivers after ``delay_ms`` milliseconds.

        ``timeout`` and errors as :meth:`pub`.
        """
        data = commands.dpub(topic, delay_ms, body, max_msg_size=self._core().max_msg_size)
        self._publish(data, 1, timeout)

    def pub_nowait(
        self, topic: str, body: Body, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Queue a publish and return a future that resolves when nsqd acknowledges it.

        Blocks only while the bounded publish queue is full (backpressure). Cancelling the
        future withdraws the publish while it waits in the queue; once it is being sent,
        ``cancel()`` returns False (as for any running future).
        """
        data = commands.pub(topic, body, max_msg_size=self._core().max_msg_size)
        return self._publish_nowait(data, 1, timeout)

    def mpub_nowait(
        self, topic: str, bodies: Iterable[Body], *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Like :meth:`pub_nowait` for a batch published atomically (all or none), as :meth:`mpub`.

        Bad input (empty batch, a body over the size limits) raises before anything is queued.
        """
        items = list(bodies)
        core = self._core()
        data = commands.mpub(
            topic, items, max_msg_size=core.max_msg_size, max_body_size=core.max_body_size
        )
        return self._publish_nowait(data, len(items), timeout)

    def dpub_nowait(
        self, topic: str, delay_ms: int, body: Body, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Like :meth:`pub_nowait` for a message nsqd delivers after ``delay_ms`` milliseconds."""
        data = commands.dpub(topic, delay_ms, body, max_msg_size=self._core().max_msg_size)
        return self._publish_nowait(data, 1, timeout)

    # ------------------------------------------------------------------ lifecycle

    def _connect_timeout(self) -> float:
        cfg = self.config
        return cfg.seconds("dial_timeout") + cfg.seconds("read_timeout") + _GRACE

    def connect(self, timeout: float | None = None) -> None:
        """Connect now instead of on the first publish (surfaces bad addresses early)."""
        self._check()
        self._portal.check_not_in_loop("SyncWriter.connect")
        limit = self._connect_timeout() if timeout is None else timeout
        if not self._life.entered:
            self._life.enter(self._writer.connect, limit)
        else:
            self._portal.call(self._writer.connect(), limit)

    def __enter__(self) -> SyncWriter:
        try:
            self.connect()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.graceful_close()

    def _claim_close(self) -> bool:
        """True for the one caller that gets to close (the first)."""
        if self._closed or not self._close_claim.acquire(blocking=False):
            return False
        self._closed = True
        return True

    def graceful_close(self, timeout: float | None = None) -> None:
        """Publish what is queued and wait for every acknowledgement, then close.

        ``timeout`` (seconds, default ``close_timeout``) bounds the wait; what is still
        unacknowledged then fails (ClosedError or ConnectionClosedError). Idempotent; any
        thread but the nsqclient loop thread.
        """
        if self._closed:
            return
        if self._generation == portal.fork_generation:
            self._portal.check_not_in_loop("SyncWriter.graceful_close")
        if not self._claim_close():
            return
        if self._generation != portal.fork_generation:
            return  # created before a fork and never used here: the parent owns those sockets
        limit = self.config.seconds("close_timeout") if timeout is None else timeout
        try:
            self._life.exit(lambda: self._graceful(limit), limit + _GRACE + 5)
        finally:
            self._detach()

    async def _graceful(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self._queue.close(timeout)
        await self._writer.graceful_close(max(0.0, deadline - loop.time()))

    def close(self) -> None:
        """Close at once: queued and unacknowledged publishes raise (ClosedError or
        ConnectionClosedError)."""
        if self._closed:
            return
        if self._generation == portal.fork_generation:
            self._portal.check_not_in_loop("SyncWriter.close")
        if not self._claim_close():
            return
        if self._generation != portal.fork_generation:
            return
        try:
            self._life.exit(self._abort, 10)
        finally:
            self._detach()

    async def _abort(self) -> None:
        self._queue.abort(ClosedError("the SyncWriter was closed before this publish was sent"))
        await self._writer.close()

    def _detach(self) -> None:
        unregister_open(self)
        self._portal.release()

    def _close_at_exit(self, timeout: float) -> None:
        if not self._closed:
            self.graceful_close(timeout)

    # ------------------------------------------------------------------ sharing

    @property
    def aio(self) -> Writer:
        """The core :class:`nsqclient.aio.Writer`, for coroutines on the shared loop."""
        self._check()
        return self._writer

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The shared loop this writer's core object lives on."""
        self._check()
        return self._portal.loop

    def stats(self) -> dict[str, Any]:
        """The core Writer's counters, plus ``queued``: publishes waiting to cross."""
        self._check()
        result = self._portal.call(_stats(self._writer), timeout=5)
        result["queued"] = len(self._queue)
        return result

    @property
    def is_closed(self) -> bool:
        """True once close() or graceful_close() began; publishing then raises ClosedError."""
        return self._closed

    def __repr__(self) -> str:
        core = getattr(self, "_writer", None)
        return f"<SyncWriter {'closed' if self._closed else 'open'} {core!r}>"


async def _stats(writer: Writer) -> dict[str, Any]:
    return writer.stats()


def _validate(nsqd: object, lookupd: object, http_fallback: object, config: Config) -> None:
    from ..aio.writer import Writer

    Writer(
        nsqd,  # type: ignore[arg-type]
        lookupd_http_addresses=lookupd,  # type: ignore[arg-type]
        http_fallback_addresses=http_fallback,  # type: ignore[arg-type]
        config=config,
    )
