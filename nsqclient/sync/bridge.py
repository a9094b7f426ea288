"""The thread bridge: the only module that imports janus.

* :class:`ThreadSink` is the Reader's sink in the sync facade. It moves each delivered batch to
  user threads as one janus item (one wake-up per batch, not per message) and never blocks the
  loop: the queue is unbounded because RDY already bounds what nsqd can send.
* :class:`ThreadResponder` stands in for a connection as the responder of messages that crossed
  to threads: ``msg.fin()``/``req()``/``touch()`` from any thread append to a deque and schedule
  at most one loop wake-up, which applies every queued response in order.
* :class:`PublishQueue` carries encoded publishes from threads to the loop through a *bounded*
  janus queue (a full queue blocks the publishing threads: that is the backpressure); a pump task
  drains it in batches and links each nsqd acknowledgement to the caller's future.

janus is in maintenance mode; keeping it behind these three classes keeps it swappable.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import janus

from ..errors import ClosedError, NSQTimeoutError
from ..message import Message
from ..protocol.frames import Event

__all__ = ["Empty", "PublishQueue", "ThreadResponder", "ThreadSink"]

log = logging.getLogger("nsqclient.sync")

_Event = Event  # re-exported type only for readers of this module


class Empty(Exception):
    """No batch arrived within the wait slice."""


class _Closed(Exception):
    """The sink was closed and drained."""


class ResponseBatcher:
    """Applies message responses made on user threads, on the loop, in batches."""

    def __init__(self, loop: asyncio.AbstractEventLoop, loop_thread_id: int | None) -> None:
        self._loop = loop
        self._loop_thread_id = loop_thread_id
        self._ops: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._scheduled = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread_id:
            fn(*args)
            return
        self._ops.append((fn, args))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # loop closed: the connection is gone anyway
                self._scheduled = False
                self._ops.clear()

    def _drain(self) -> None:
        self._scheduled = False  # first: responses queued from now on schedule another drain
        ops = self._ops
        while ops:
            fn, args = ops.popleft()
            try:
                fn(*args)
            except Exception:
                log.exception("applying a message response failed")


class ThreadResponder:
    """The responder of a message handed to threads: hops each response to the loop."""

    __slots__ = ("_batcher", "_conn")

    def __init__(self, conn: Any, batcher: ResponseBatcher) -> None:
        self._conn = conn
        self._batcher = batcher

    @property
    def address(self) -> str:
        return str(self._conn.address)

    def message_fin(self, msg: Message) -> None:
        self._batcher.submit(self._conn.message_fin, msg)

    def message_req(self, msg: Message, delay_ms: int | None, backoff: bool) -> None:
        self._batcher.submit(self._conn.message_req, msg, delay_ms, backoff)

    def message_touch(self, msg: Message) -> None:
        self._batcher.submit(self._conn.message_touch, msg)


class ThreadSink:
    """A Reader sink whose consumers are threads. Create it on the loop thread."""

    def __init__(self, loop_thread_id: int | None, *, split: int = 1) -> None:
        loop = asyncio.get_running_loop()
        self._queue: janus.Queue[list[Message]] = janus.Queue()
        self._batcher = ResponseBatcher(loop, loop_thread_id)
        self._responders: dict[Any, ThreadResponder] = {}
        self._split = max(1, split)
        self._closed = False

    # -- loop side (MessageSink) --

    def put(self, messages: list[Message]) -> None:
        if not messages:
            return
        conn = messages[0]._responder
        responder = self._responders.get(conn)
        if responder is None:
            responder = self._responders[conn] = ThreadResponder(conn, self._batcher)
        for msg in messages:
            if msg._responder is conn:
                msg._responder = responder
            else:  # batches normally come from one connection; be safe if not
                other = msg._responder
                resp = self._responders.get(other)
                if resp is None:
                    resp = self._responders[other] = ThreadResponder(other, self._batcher)
                msg._responder = resp
        put = self._queue.async_q.put_nowait
        if self._split > 1 and len(messages) > self._split:
            size = -(-len(messages) // self._split)
            for start in range(0, len(messages), size):
                put(messages[start : start + size])
        else:
            put(messages)

    def take_undelivered(self) -> list[Message]:
        taken: list[Message] = []
        get = self._queue.async_q.get_nowait
        while True:
            try:
                taken.extend(get())
            except (janus.AsyncQueueEmpty, janus.AsyncQueueShutDown):
                return taken

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.shutdown()

    def forget_connection(self, conn: Any) -> None:
        self._responders.pop(conn, None)

    # -- thread side --

    def get_batch(self, timeout: float) -> list[Message]:
        """Block up to ``timeout`` for the next batch; raises Empty, or ClosedError once closed."""
        try:
            return self._queue.sync_q.get(timeout=timeout)
        except janus.SyncQueueEmpty:
            raise Empty from None
        except janus.SyncQueueShutDown:
            raise ClosedError("the reader is closed") from None

    @property
    def batcher(self) -> ResponseBatcher:
        return self._batcher


class PublishQueue:
    """Bounded thread -> loop queue of encoded publishes. Create it on the loop thread."""

    def __init__(self, maxsize: int) -> None:
        self._queue: janus.Queue[tuple[bytes, int, float | None, concurrent.futures.Future[None]]]
        self._queue = janus.Queue(maxsize)
        self._closed = False

    def put(
        self, data: bytes, count: int, timeout: float | None, deadline: float
    ) -> concurrent.futures.Future[None]:
        """From a user thread: enqueue, blocking while the queue is full (backpressure)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        sync_q = self._queue.sync_q
        item = (data, count, timeout, future)
        while True:
            remaining = deadline - _now()
            if remaining <= 0:
                raise NSQTimeoutError(
                    "the publish queue stayed full until the timeout (nsqd is slow or down)"
                )
            try:
                sync_q.put(item, timeout=min(0.1, remaining))
                return future
            except janus.SyncQueueFull:
                continue
            except janus.SyncQueueShutDown:
                raise ClosedError("this SyncWriter was closed; create a new one") from None

    async def pump(self, publish: Callable[[bytes, int, float | None], Any]) -> None:
        """Loop side: drain batches and hand each item to ``publish``, which returns the
        acknowledgement future at once, or a coroutine that first waits until the Writer can
        send (connecting, or a free pending slot) and then returns it."""
        async_q = self._queue.async_q
        while True:
            try:
                first = await async_q.get()
            except janus.AsyncQueueShutDown:
                return
            batch = [first]
            try:
                while len(batch) < 1024:
                    batch.append(async_q.get_nowait())
            except (janus.AsyncQueueEmpty, janus.AsyncQueueShutDown):
                pass
            for data, count, timeout, future in batch:
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = publish(data, count, timeout)
                    if not asyncio.isfuture(result):
                        result = await result
                    result.add_done_callback(partial(_transfer, future))
                except BaseException as exc:  # the caller gets exactly what the core raised
                    if not future.done():
                        future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise

    def fail_pending(self, exc: BaseException) -> None:
        """Loop side: fail everything still queued (closing)."""
        get = self._queue.async_q.get_nowait
        while True:
            try:
                *_, future = get()
            except (janus.AsyncQueueEmpty, janus.AsyncQueueShutDown):
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.shutdown()

    async def aclose(self) -> None:
        self.close()
        await self._queue.aclose()


def _transfer(target: concurrent.futures.Future[None], source: asyncio.Future[Any]) -> None:
    if source.cancelled():
        target.set_exception(NSQTimeoutError("the publish was cancelled"))
        return
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(None)


def _now() -> float:
    import time

    return time.monotonic()
