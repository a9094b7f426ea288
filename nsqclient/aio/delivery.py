"""Getting delivered messages to the application: sinks, the queue, and handler invocation.

The Reader's read path hands each decoded batch to a *sink* in one call. The default sink is
:class:`MessageQueue` (a deque plus waiters: one wake-up per batch, not per message) that feeds
``async for`` and the handler workers; the sync facade supplies its own sink that moves batches
to threads. A sink never blocks the loop: RDY already bounds how many messages can arrive.

:class:`HandlerRunner` applies the handler contract shared by every delivery style: returning
means FIN (``False`` means REQ, as in pynsq), raising means REQ with backoff, a message the handler
answered itself or took over (``disable_auto_response``) is left alone. :func:`run_worker` is
one handler worker taking from the queue; :class:`QueueIterator` is ``async for`` over it.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from ..flow.requeue import requeue_delay_ms
from ..message import Message, Responder, responder_of

if TYPE_CHECKING:
    from ..config import Config

__all__ = [
    "ITERATING",
    "Handler",
    "HandlerRunner",
    "MessageQueue",
    "MessageSink",
    "QueueIterator",
    "run_worker",
]

log = logging.getLogger("nsqclient.reader")

Handler = Callable[[Message], Any]

_YIELD_EVERY = 64  # sync handlers in a worker: let the loop breathe this often
#: the task that iterated a Reader, seen from that task and from every task it started since
#: (they inherit its context): a close asked for through ``asyncio.wait_for`` or ``gather`` runs
#: in such a task while the iterating task waits for it
ITERATING: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "nsqclient_iterating_task", default=None
)


class MessageSink(Protocol):
    """Where a Reader puts delivered messages: everything the Reader asks of one (it probes
    for nothing else). Called on the loop thread; no method may block."""

    def put(self, messages: list[Message]) -> None:
        """Take one read's worth of delivered messages (in delivery order). Must not block."""

    def take_undelivered(self) -> list[Message]:
        """Remove and return messages not yet handed to the application (the Reader closes and
        requeues them)."""

    def forget(self, responder: Responder) -> None:
        """``responder``'s connection died: its messages can no longer be answered (nsqd
        redelivers them), so drop those not yet handed out and anything kept for it."""

    def flush(self) -> None:
        """Apply the answers given elsewhere (other threads) and not yet sent, before a close
        requeues what is still unanswered. Nothing to do for a sink on the loop alone."""

    def __len__(self) -> int:
        """Messages delivered and not yet handed to the application (``stats()["queued"]``)."""
        ...

    def close(self) -> None:
        """No more messages will come: wake whoever waits for one. Idempotent."""


class QueueClosed(Exception):
    """The queue was closed and is empty."""


class MessageQueue:
    """Default sink: a deque with waiters, shared by ``async for`` and handler workers."""

    def __init__(self) -> None:
        self._items: collections.deque[Message] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, messages: list[Message]) -> None:
        self._items.extend(messages)
        waiters = self._waiters
        if waiters:
            for _ in range(min(len(waiters), len(messages))):
                fut = waiters.popleft()
                if not fut.done():
                    fut.set_result(None)

    def get_nowait(self) -> Message | None:
        items = self._items
        return items.popleft() if items else None

    async def get(self) -> Message:
        """The next message; raises :class:`QueueClosed` once closed and drained."""
        items = self._items
        while not items:
            if self._closed:
                raise QueueClosed
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                elif items and self._waiters:  # pass our wake-up on to another waiter
                    nxt = self._waiters.popleft()
                    if not nxt.done():
                        nxt.set_result(None)
                raise
        return items.popleft()

    def take_undelivered(self) -> list[Message]:
        taken = list(self._items)
        self._items.clear()
        return taken

    def forget(self, responder: Responder) -> None:
        """Drop the queued messages ``responder`` delivered (its connection died)."""
        kept: list[Message] = []
        dropped = False
        for msg in self._items:
            if responder_of(msg) is responder:
                dropped = True
            else:
                kept.append(msg)
        if dropped:  # in place: iterators hold this very deque
            self._items.clear()
            self._items.extend(kept)

    def flush(self) -> None:
        """Answers are given on the loop itself: nothing is ever pending."""

    def close(self) -> None:
        self._closed = True
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    @property
    def closed(self) -> bool:
        return self._closed


class HandlerRunner:
    """Calls a handler for one message and answers it per the handler contract."""

    __slots__ = ("auto_fin", "config", "handler", "is_async")

    def __init__(
        self, handler: Handler, *, auto_fin: bool = True, config: Config | None = None
    ) -> None:
        if not callable(handler):
            raise TypeError(f"message handler must be callable, got {handler!r}")
        self.handler = handler
        self.auto_fin = auto_fin
        #: the Reader's options: the failure log says what they make of a failure
        self.config = config
        self.is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - async callable objects
        )

    def run_sync(self, msg: Message) -> Awaitable[Any] | None:
        """Run the handler; returns the awaitable if it produced one (caller must ``finish``).

        The one statement of the handler contract: returning ``None`` or a true value FINs
        (unless the handler answered the message or took it over); a false value other than
        ``None`` (``False``, ``0``, ``""``, as pynsq reads them) REQs; raising REQs with backoff.
        """
        try:
            result = self.handler(msg)
        except Exception:
            self.failed(msg)
            return None
        if result is None:  # the common case: FIN unless answered or taken over
            if self.auto_fin and not msg.has_responded and msg.auto_response:
                msg.fin()
            return None
        if inspect.isawaitable(result):
            return result
        self.succeeded(msg, result)
        return None

    def run_batch(
        self, messages: list[Message], spawn: Callable[[Coroutine[Any, Any, None]], object]
    ) -> None:
        """Run the handler on the loop for each message (direct delivery); an awaitable result
        is finished by a task made with ``spawn``."""
        run_sync = self.run_sync
        for msg in messages:
            pending = run_sync(msg)
            if pending is not None:
                spawn(self.finish(msg, pending))

    async def finish(self, msg: Message, pending: Awaitable[Any]) -> None:
        """Await what :meth:`run_sync` returned and answer the message by its outcome."""
        try:
            result = await pending
        except Exception:
            self.failed(msg)
        else:
            self.succeeded(msg, result)

    async def run(self, msg: Message) -> None:
        pending = self.run_sync(msg)
        if pending is not None:
            await self.finish(msg, pending)

    def succeeded(self, msg: Message, result: object) -> None:
        if msg.has_responded or not msg.auto_response:
            return
        if result is False or (result is not None and result is not True and _falsy(result)):
            msg.req()
        elif self.auto_fin:
            msg.fin()

    def failed(self, msg: Message) -> None:
        if msg.has_responded:
            then = "it was already answered, so nothing more is sent"
        elif not msg.auto_response:
            then = (
                "auto-response is off for it: answer it with fin()/req(), or nsqd redelivers it "
                "after its msg_timeout"
            )
        else:
            then = failure_action(msg.attempts, self.config)
        log.exception(
            "message handler failed for message %s (attempt %d); %s",
            msg.id.decode("ascii", "replace"),
            msg.attempts,
            then,
        )
        if not msg.has_responded and msg.auto_response:
            msg.req(backoff=True)


def failure_action(attempts: int, config: Config | None) -> str:
    """What the Reader does, with ``config`` in force, about a message whose handler failed on
    delivery ``attempts`` (REQ with backoff): the failure log says it, so it must be exact."""
    if config is None:
        return "requeueing it (REQ with backoff)"
    msec = config.msec
    delay = requeue_delay_ms(attempts, msec.default_requeue_delay, msec.max_requeue_delay)
    if delay:
        req = (
            f"requeueing it with a delay of {delay / 1000:g}s (REQ: default_requeue_delay x "
            "attempts, at most max_requeue_delay)"
        )
    else:
        zero = "default_requeue_delay" if not msec.default_requeue_delay else "max_requeue_delay"
        req = f"requeueing it at once (REQ with no delay: {zero}=0)"
    multiplier, cap = msec.backoff_multiplier, msec.max_backoff_duration
    if cap <= 0:
        backoff = "no backoff (max_backoff_duration=0)"
    elif 2 * multiplier > cap:  # the first window (level 1) is already over the cap
        backoff = "no backoff (2 x backoff_multiplier is over max_backoff_duration)"
    elif multiplier == 0:
        backoff = (
            "backing off without a pause (backoff_multiplier=0): one message at a time until "
            "handlers succeed again (max_backoff_duration=0 turns backoff off)"
        )
    else:
        backoff = (
            "backing off: consumption pauses (backoff_multiplier x 2^level, at most "
            "max_backoff_duration), then resumes one message at a time until handlers succeed "
            "(max_backoff_duration=0 turns backoff off)"
        )
    last = ""
    if config.max_attempts and attempts >= config.max_attempts:
        last = f"; its next delivery is given up (max_attempts={config.max_attempts})"
    return f"{req}; {backoff}{last}"


def _falsy(result: object) -> bool:
    """pynsq's reading of a handler's result: false REQs. An object whose truth cannot be
    told (``bool()`` raises, e.g. a NumPy array) counts as a success, as any other value."""
    try:
        return not result
    except Exception:
        return False


async def run_worker(queue: MessageQueue, runner: HandlerRunner) -> None:
    """One handler worker: take messages from ``queue`` and run the handler on each, until the
    queue is closed (a task; cancelling it stops the worker)."""
    run_sync = runner.run_sync
    is_async = runner.is_async
    done = 0
    while True:
        msg = queue.get_nowait()
        if msg is None:
            try:
                msg = await queue.get()
            except QueueClosed:
                return
            done = 0
        if msg.has_responded:
            continue
        if is_async:
            await runner.run(msg)
            continue
        awaitable = run_sync(msg)
        if awaitable is not None:
            await runner.finish(msg, awaitable)
        done += 1
        if done >= _YIELD_EVERY:
            done = 0
            await asyncio.sleep(0)


class QueueIterator:
    """``async for`` over a Reader's queue. Records the task that iterates in ``holders`` (on
    its first step and whenever it waits for a batch, never per message): a graceful close waits
    for what it holds only while it can still answer. ``start`` runs on the first step (it
    starts a Reader that is not started yet)."""

    __slots__ = ("_holders", "_items", "_queue", "_start", "_started")

    def __init__(
        self,
        queue: MessageQueue,
        holders: set[asyncio.Task[Any]],
        start: Callable[[], Awaitable[None]],
    ) -> None:
        self._queue = queue
        self._items = queue._items  # the deque itself: no call per message
        self._holders = holders
        self._start = start
        self._started = False

    def __aiter__(self) -> QueueIterator:
        return self

    async def __anext__(self) -> Message:
        if not self._started:
            self._started = True
            _hold(self._holders)
            await self._start()
        items = self._items
        while True:
            if items:
                msg = items.popleft()
            else:
                _hold(self._holders)
                try:
                    msg = await self._queue.get()
                except QueueClosed:
                    raise StopAsyncIteration from None
            if not msg.has_responded:
                return msg


def _hold(holders: set[asyncio.Task[Any]]) -> None:
    """Record the current task as one that holds messages (until it is done)."""
    task = asyncio.current_task()
    if task is not None and task not in holders:
        holders.add(task)
        task.add_done_callback(holders.discard)
        ITERATING.set(task)
