"""SyncWriter: blocking publishes from any thread, over the asyncio Writer on the loop thread.

Bodies are validated and encoded in the calling thread (bad input raises before anything is
sent), then the calling thread writes the command to a connection it shares with the loop
(:mod:`.door`) and reads nsqd's reply itself when it is its turn (:mod:`.reading`); when no
connection can take it at once, the ticket goes the loop's way through a bounded queue
(:mod:`.publish`). ``pub()`` blocks until nsqd acknowledged or raises the core's exception
object; ``pub_nowait()`` returns a ``concurrent.futures.Future`` instead. When the queue is full
(nsqd slow or frozen), publishing threads block: that is the backpressure.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import warnings
from asyncio import _get_running_loop
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Unpack, overload

from ..aio.options import validate_client_options
from ..config import Config, lists_options
from ..errors import ClosedError, NotSentTimeoutError
from ..observer import Observer, observer_for
from ..protocol import commands
from ..protocol.names import Body, single_body_batch
from . import portal, wakes
from .door import Doors, Grouping
from .future import PublishFuture
from .lifecycle import FacadeLifecycle
from .portal import LoopThread
from .publish import Loopway, PublishQueue
from .reading import read_for, wait
from .ticket import DONE, Ticket

if TYPE_CHECKING:
    from ..aio.window import Window
    from ..aio.writer import Writer
    from ..options import ConfigOptions
    from ..stats import SyncWriterStats

__all__ = ["SyncWriter"]

_monotonic = time.monotonic
_GRACE = 2.0  # seconds a thread waits beyond the publish timeout before giving up on the loop
_SETUP_TIMEOUT = 10.0


@lists_options
class SyncWriter(FacadeLifecycle):
    """Publish to nsqd from blocking code. Thread-safe; share one per process.

    ``max_queued_publishes`` bounds the publishes waiting to cross to the loop; when it is full,
    publishing threads block (backpressure) until nsqd catches up or their timeout passes. Other
    options are :class:`~nsqclient.config.Config` fields (``publish_timeout``,
    ``max_pending_publishes``, ...). ``with SyncWriter(...) as writer`` connects at once and
    closes gracefully (every queued publish sent and acknowledged, bounded by ``close_timeout``).
    ``http_fallback_addresses`` are the core Writer's: nsqd HTTP addresses used while no TCP
    connection is up.
    """

    _kind = "SyncWriter"

    def __init__(
        self,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        *,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        http_fallback_addresses: Iterable[object] | str | None = None,
        max_queued_publishes: int = 4096,
        config: Config | None = None,
        **options: Unpack[ConfigOptions],
    ) -> None:
        self.config = Config.from_options(config, **options)
        # the core Writer is built on the loop thread on first use (so creating a SyncWriter
        # starts no thread, e.g. in a pre-fork server's master); its checks run here, at once,
        # in the caller's thread, and what they built (IDENTIFY options, the TLS context) is
        # what the core Writer uses
        self._checked = validate_client_options(
            self.config,
            nsqd_tcp_addresses=nsqd_tcp_addresses,
            lookupd_http_addresses=lookupd_http_addresses,
            http_fallback_addresses=http_fallback_addresses,
        )
        if (
            isinstance(max_queued_publishes, bool)
            or not isinstance(max_queued_publishes, int)
            or max_queued_publishes < 1
        ):
            raise ValueError("max_queued_publishes must be an int >= 1")
        self._max_queued = max_queued_publishes
        self._max_pending = self.config.max_pending_publishes
        self._rr = 0
        self._publish_timeout = self.config.sec.publish_timeout
        self._init_lifecycle()
        #: told of every publish call, in the calling thread (so a span's parent is the
        #: caller's); the core Writer's tickets settle its counters (see :mod:`nsqclient.observer`)
        self._obs: Observer | None = observer_for(self)

    def _bind(self, loop_thread: LoopThread) -> None:
        """Create the core objects on the (possibly new, after fork) loop thread."""
        self._writer, self._queue, self._doors, self._window = loop_thread.call(
            self._setup(), _SETUP_TIMEOUT
        )

    async def _setup(self) -> tuple[Writer, PublishQueue, Doors, Window]:
        from ..aio.writer import Writer

        writer = Writer._from_checked(self._checked)
        cfg = self.config
        grouping = None
        if cfg.coalesce:  # the Writer coalescer's tolerance (aio.writer), for the doors' batches
            half = max(2 * cfg.sec.linger, 0.01 * cfg.sec.publish_timeout) / 2
            grouping = Grouping(half, lambda: writer.max_body_size)
        doors = Doors(
            spill=lambda tickets: queue.put_back(tickets),
            max_msg_size=lambda: writer.max_msg_size,
            grouping=grouping,
        )
        seam = writer.share_with_threads(doors)
        window = seam.window
        doors.bind(window, seam.resend)
        queue = PublishQueue(
            self._max_queued,
            Loopway(
                ready=seam.ready,
                take=window.take,
                give=window.give,
                send=seam.send,
                wait_ready=writer.wait_ready,
                unreachable=seam.unreachable,
            ),
        )
        self._unreachable = seam.unreachable
        self._not_sent_error = self._not_sent  # (bound once: it is passed on every publish)
        return writer, queue, doors, window

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
        future: PublishFuture | None = None,
    ) -> tuple[Ticket, bool]:
        """Send an encoded publish from the calling thread: written through a connection's door
        (:mod:`.door`) when one can take it, else queued for the loop (:mod:`.publish`). The
        ticket, and whether this thread now holds the turn to read (its reply's)."""
        # the caller checked the object already (``_core()``, for the encoding's size limits)
        if future is None:
            # a thread's waker exists once this check passed in it (the loop thread never
            # gets one), so the check runs once per thread, not per publish
            waker = getattr(wakes._local, "waker", None)
            if waker is None:
                self._portal.check_not_in_loop("SyncWriter publishing")
                waker = wakes.thread_waker()
            if _get_running_loop() is not None:
                _blocking_in_loop()
        else:
            self._portal.check_not_in_loop("SyncWriter publishing")
            waker = None
        if timeout is None:
            deadline = _monotonic() + self._publish_timeout
        else:
            commands.check_timeout(timeout)
            deadline = _monotonic() + timeout
        ticket = Ticket(data, count, deadline, self._window, waker, future)
        if future is not None:
            future._ticket = ticket
        doors = self._doors.open
        door = doors[0] if len(doors) == 1 else self._doors.pick()
        if door is not None:  # the fast path: written by this thread
            written = door.publish(ticket)  # a max_pending_publishes slot; else the queue
            if written:
                return ticket, written == 2
        self._queue.put(ticket)
        return ticket, False

    def _not_sent(self) -> BaseException:
        """What a publish that timed out unsent raises: the core's NoConnectionsError while no
        nsqd connection is up (the thread's deadline and the loop's wait for a connection end
        together, and whichever looks first, an outage raises the same error), else
        NotSentTimeoutError."""
        return self._unreachable() or NotSentTimeoutError(
            "the publish was never sent (no connection could take it in time: nsqd is slow or "
            "unreachable, or max_pending_publishes were all taken); safe to retry"
        )

    def _call(
        self,
        verb: str,
        topic: str,
        count: int,
        encode: Callable[[Writer], bytes],
        timeout: float | None,
    ) -> None:
        """The one bracket of the blocking publishes: observed from the calling thread (so a
        span's parent is the caller's), encoded there (bad input raises before anything
        crosses), then waited for."""
        obs = self._obs
        token = None if obs is None else obs.publish_started(verb, topic, count)
        try:
            ticket, took = self._send(encode(self._core()), count, timeout)
            wait(ticket, took, self._not_sent_error)
        except BaseException as exc:
            if obs is not None:
                obs.publish_settled(token, exc)
            raise
        if obs is not None:
            obs.publish_settled(token, None)

    def _call_nowait(
        self,
        verb: str,
        topic: str,
        count: int,
        encode: Callable[[Writer], bytes],
        timeout: float | None,
    ) -> concurrent.futures.Future[None]:
        """:meth:`_call` for the ``_nowait`` forms: settled when the future is."""
        obs = self._obs
        token = None if obs is None else obs.publish_started(verb, topic, count)
        try:
            data = encode(self._core())  # (checks the object first)
            future = PublishFuture(self._generation, self._portal)
            self._send(data, count, timeout, future)  # (the future's result() reads)
        except BaseException as exc:
            if obs is not None:
                obs.publish_settled(token, exc)
            raise
        if obs is not None:
            future.add_done_callback(partial(_settle_future, obs, token))
        return future

    def _batch(self, verb: str, topic: str, bodies: object) -> list[object] | tuple[object, ...]:
        """An MPUB's bodies as a list; a single body instead is refused (observed as a refused
        batch of none)."""
        try:
            return commands.batch_bodies(bodies)
        except BaseException as exc:
            obs = self._obs
            if obs is not None:
                obs.publish_settled(obs.publish_started(verb, topic, 0), exc)
            raise

    def pub(self, topic: str, body: Body, *, timeout: float | None = None) -> None:
        """Publish one message; returns once nsqd acknowledged it, or raises.

        ``timeout`` (seconds >= 0, default ``publish_timeout``) covers waiting for room in the
        queue and for nsqd's acknowledgement. The errors, and which of them mean "maybe
        published" (``sent`` True: ConnectionClosedError, NSQTimeoutError), are
        :meth:`nsqclient.aio.Writer.pub`'s; a publish that timed out in the queue, never sent,
        raises NotSentTimeoutError.
        Any thread; NSQError if called from the nsqclient loop thread (it would deadlock).
        """
        if self._obs is None:  # the hot path, spelled out: encoded here, sent, waited for
            if self._closed or self._generation != portal.fork_generation:
                self._check()
            ticket, took = self._send(
                commands.pub(topic, body, max_msg_size=self._writer.max_msg_size), 1, timeout
            )
            if took:  # its reply is next to come, and this thread reads it (a script's way)
                read_for(ticket.door, ticket, ticket.deadline - _monotonic(), True)
                if ticket.state is DONE and ticket.error is None:
                    return
            wait(ticket, False, self._not_sent_error)
            return
        self._call("pub", topic, 1, partial(_pub, topic, body), timeout)

    @overload
    @single_body_batch("mpub takes a list of bodies: wrap a single body in a list")
    def mpub(self, topic: str, bodies: Body, *, timeout: float | None = None) -> None: ...
    @overload
    def mpub(self, topic: str, bodies: Iterable[Body], *, timeout: float | None = None) -> None: ...
    def mpub(
        self, topic: str, bodies: Iterable[Body] | Body, *, timeout: float | None = None
    ) -> None:
        """Publish a batch, ``mpub(topic, [a, b])``, atomically (all or none); ``timeout`` and
        errors as :meth:`pub` (a single body instead of a list: InvalidInputError)."""
        items = self._batch("mpub", topic, bodies)
        self._call("mpub", topic, len(items), partial(_mpub, topic, items), timeout)

    def dpub(self, topic: str, delay_ms: int, body: Body, *, timeout: float | None = None) -> None:
        """Publish one message that nsqd delivers after ``delay_ms`` milliseconds.

        ``timeout`` and errors as :meth:`pub`.
        """
        self._call("dpub", topic, 1, partial(_dpub, topic, delay_ms, body), timeout)

    def pub_nowait(
        self, topic: str, body: Body, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Queue a publish and return a future that resolves when nsqd acknowledges it.

        Blocks only while the bounded publish queue is full (backpressure). Cancelling the
        future withdraws the publish while it waits in the queue; once it is being sent,
        ``cancel()`` returns False (as for any running future). ``result()`` and
        ``exception()`` called from a thread read nsqd's reply in that thread where they can,
        as :meth:`pub` does (no hand-off through the loop thread). Done callbacks run in the
        thread that resolves the future: the nsqclient loop thread (where a blocking publish
        raises NSQError), or a publishing thread that read the OK, after it let go of reading
        (a blocking publish there works). Keep them short either way.
        """
        return self._call_nowait("pub", topic, 1, partial(_pub, topic, body), timeout)

    @overload
    @single_body_batch("mpub_nowait takes a list of bodies: wrap a single body in a list")
    def mpub_nowait(
        self, topic: str, bodies: Body, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]: ...
    @overload
    def mpub_nowait(
        self, topic: str, bodies: Iterable[Body], *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]: ...
    def mpub_nowait(
        self, topic: str, bodies: Iterable[Body] | Body, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Like :meth:`pub_nowait` for a batch published atomically (all or none), as :meth:`mpub`.

        Bad input (a single body, an empty batch, a body over the size limits) raises before
        anything is queued.
        """
        items = self._batch("mpub", topic, bodies)
        return self._call_nowait("mpub", topic, len(items), partial(_mpub, topic, items), timeout)

    def dpub_nowait(
        self, topic: str, delay_ms: int, body: Body, *, timeout: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Like :meth:`pub_nowait` for a message nsqd delivers after ``delay_ms`` milliseconds."""
        return self._call_nowait("dpub", topic, 1, partial(_dpub, topic, delay_ms, body), timeout)

    # ------------------------------------------------------------------ lifecycle

    def _connect_timeout(self) -> float:
        cfg = self.config
        return cfg.sec.dial_timeout + cfg.sec.read_timeout + _GRACE

    def start(self, timeout: float | None = None) -> None:
        """Connect now instead of on the first publish (surfaces bad addresses early); done
        for you in ``with``. The same verb as :meth:`SyncReader.start
        <nsqclient.sync.SyncReader.start>` and the asyncio Writer's ``start()``."""
        self._check()
        self._portal.check_not_in_loop("SyncWriter.start")
        limit = self._connect_timeout() if timeout is None else timeout
        if not self._life.entered:
            self._life.enter(self._writer.start, limit)
        else:
            self._portal.call(self._writer.start(), limit)

    def connect(self, timeout: float | None = None) -> None:
        """The same as :meth:`start`: the name pynsq's and asyncnsq's writers use, kept for
        code migrating from them."""
        self.start(timeout)

    def _open(self) -> None:
        self.start()

    def graceful_close(self, timeout: float | None = None) -> None:
        """Publish what is queued and wait for every acknowledgement, then close.

        ``timeout`` (seconds, default ``close_timeout``) bounds the wait; what is still
        unacknowledged then fails (ClosedError or ConnectionClosedError). Idempotent; any
        thread but the nsqclient loop thread.
        """
        if not self._claim_close("SyncWriter.graceful_close"):
            return  # closed already, never used, or the parent's (created before a fork)
        limit = self.config.sec.close_timeout if timeout is None else timeout
        try:
            self._exit_within(lambda: self._graceful(limit), limit, self._abort_now)
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
        if not self._claim_close("SyncWriter.close"):
            return
        try:
            self._life.exit(self._abort, 10)
        finally:
            self._detach()

    async def _abort(self) -> None:
        self._queue.abort(ClosedError("the SyncWriter was closed before this publish was sent"))
        await self._writer.close()

    def _abort_now(self) -> None:
        """On the loop: fail what is queued, close the connections (not waited for)."""
        self._queue.abort(ClosedError("the SyncWriter was closed before this publish was sent"))
        self._writer.close()

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

    def stats(self) -> SyncWriterStats:
        """The core Writer's stats (:class:`nsqclient.stats.WriterStats`) plus ``queued``:
        publishes waiting to cross to the loop. Any thread. Every key and its unit:
        :class:`nsqclient.stats.SyncWriterStats`."""
        self._check()
        return self._portal.call(_stats(self._writer, self._queue, self._doors), timeout=5)

    def __repr__(self) -> str:
        core = getattr(self, "_writer", None)
        return f"<SyncWriter {'closed' if self._closed else 'open'} {core!r}>"


async def _stats(writer: Writer, queue: PublishQueue, doors: Doors) -> SyncWriterStats:
    core = writer.stats()
    sent, read, _batches, _messages, _split = doors.totals()
    return {
        **core,
        "queued": queue.waiting() + doors.queued(),
        "written_by_threads": sent,
        "read_by_threads": read,
    }


def _blocking_in_loop() -> None:
    """A blocking publish from a thread that runs an event loop blocks that loop until nsqd
    answers: said once per process (a warning), with what to use instead."""
    global _warned_in_loop
    if _warned_in_loop:
        return
    _warned_in_loop = True
    warnings.warn(
        "SyncWriter.pub/mpub/dpub called from a running event loop blocks that loop until nsqd "
        "acknowledges each publish: use `await sync_writer.aio.pub(...)` (the same connections) "
        "or an asyncio Writer there, or `pub_nowait(...)` to not wait",
        RuntimeWarning,
        stacklevel=4,
    )


_warned_in_loop = False


def _settle_future(obs: Observer, token: Any, future: concurrent.futures.Future[None]) -> None:
    obs.publish_settled(
        token, concurrent.futures.CancelledError() if future.cancelled() else future.exception()
    )


# what each publish sends, encoded in the calling thread with the core Writer's current limits
def _pub(topic: str, body: Body, core: Writer) -> bytes:
    return commands.pub(topic, body, max_msg_size=core.max_msg_size)


def _mpub(topic: str, items: list[object] | tuple[object, ...], core: Writer) -> bytes:
    return commands.mpub(
        topic, items, max_msg_size=core.max_msg_size, max_body_size=core.max_body_size
    )


def _dpub(topic: str, delay_ms: int, body: Body, core: Writer) -> bytes:
    return commands.dpub(topic, delay_ms, body, max_msg_size=core.max_msg_size)
