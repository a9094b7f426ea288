"""The thread bridge: the only module that imports janus.

* :class:`ThreadSink` is the Reader's sink in the sync facade. It moves each delivered batch to
  user threads as one janus item (one wake-up per batch, not per message) and never blocks the
  loop: the queue is unbounded because RDY already bounds what nsqd can send.
* :class:`ThreadResponder` stands in for a connection as the responder of messages that crossed
  to threads: ``msg.fin()``/``req()``/``touch()`` from any thread append to a deque and schedule
  at most one loop wake-up (:class:`ResponseBatcher`), which applies every queued response in
  order.

janus is in maintenance mode; keeping it behind these classes keeps it swappable. The publish
direction (:mod:`.publish`) does not use it: janus wakes an awaiting consumer with one task and
one self-pipe write per ``put``, which was the largest cost of publishing from threads.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ..aio.connection import ConnectionState
from ..errors import ClosedError
from ..message import Message, reroute, responder_of
from . import portal

if TYPE_CHECKING:
    import janus

__all__ = [
    "Empty",
    "ResponseBatcher",
    "ThreadResponder",
    "ThreadSink",
    "is_live",
    "thread_responder",
]

log = logging.getLogger("nsqclient.sync")

_CLOSED_STATE = ConnectionState.CLOSED


class Empty(Exception):
    """No batch arrived within the wait slice."""


class ResponseBatcher:
    """Applies message responses made on user threads, on the loop, in batches.

    A FIN (the common response) is queued as the message itself; REQ and TOUCH as a call. The
    first response after a drain schedules the next drain (one wake-up for many responses).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, loop_thread_id: int | None) -> None:
        self._loop = loop
        self.loop_thread_id = loop_thread_id
        self.generation = portal.fork_generation
        self.ops: collections.deque[Message | tuple[Callable[..., None], tuple[Any, ...]]] = (
            collections.deque()
        )
        self.scheduled = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        if portal.fork_generation != self.generation:
            # a message delivered to the parent before a fork: the parent answers it (checked
            # first: a thread of the child may reuse the ident of the parent's loop thread)
            return
        if threading.get_ident() == self.loop_thread_id:
            fn(*args)
            return
        self.ops.append((fn, args))
        if not self.scheduled:
            self.schedule()

    def schedule(self) -> None:
        self.scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # loop closed: the connection is gone anyway
            self.scheduled = False
            self.ops.clear()

    def _drain(self) -> None:
        self.scheduled = False  # first: responses queued from now on schedule another drain
        ops = self.ops
        responder = thread_responder
        while ops:
            op = ops.popleft()
            try:
                if isinstance(op, Message):  # a FIN, queued by ThreadResponder.message_fin
                    responder(op).conn.message_fin(op)
                else:
                    fn, args = op
                    fn(*args)
            except Exception:
                log.exception("applying a message response failed")


class ThreadResponder:
    """The responder of a message handed to threads: hops each response to the loop."""

    __slots__ = ("_batcher", "conn")

    def __init__(self, conn: Any, batcher: ResponseBatcher) -> None:
        self.conn = conn
        self._batcher = batcher

    @property
    def address(self) -> str:
        return str(self.conn.address)

    @property
    def connection_id(self) -> int:
        return int(self.conn.connection_id)

    def message_fin(self, msg: Message) -> None:
        # the hot path of ``for msg in reader: msg.fin()``, so ``submit`` is inlined
        batcher = self._batcher
        if portal.fork_generation != batcher.generation:
            return  # the parent's message (see ResponseBatcher.submit)
        if threading.get_ident() == batcher.loop_thread_id:
            self.conn.message_fin(msg)
            return
        batcher.ops.append(msg)
        if not batcher.scheduled:
            batcher.schedule()

    def message_req(self, msg: Message, delay_ms: int | None, backoff: bool) -> None:
        self._batcher.submit(self.conn.message_req, msg, delay_ms, backoff)

    def message_touch(self, msg: Message) -> None:
        self._batcher.submit(self.conn.message_touch, msg)


#: ``responder_of`` for the messages this module handed to threads, whose responder
#: ``ThreadSink.put`` made a :class:`ThreadResponder`: typed so, once, rather than checked per
#: message (the FIN drain and ``SyncReader``'s iteration are per-message paths)
thread_responder = cast("Callable[[Message], ThreadResponder]", responder_of)


def is_live(msg: Message) -> bool:
    """Unanswered, and its connection is still up. A message whose connection died can no longer
    be answered (nsqd redelivers it), so it is not handed to the application."""
    if msg.has_responded:
        return False
    responder = responder_of(msg)
    return not isinstance(responder, ThreadResponder) or responder.conn.state is not _CLOSED_STATE


class ThreadSink:
    """A Reader sink whose consumers are threads. Create it on the loop thread."""

    def __init__(self, loop_thread_id: int | None, *, split: int = 1) -> None:
        import janus  # loads with the first SyncReader, not at import (issue 51: import time)

        loop = asyncio.get_running_loop()
        self._queue: janus.Queue[list[Message]] = janus.Queue()
        #: what the queue's two sides raise when empty or shut down
        self._async_done = (janus.AsyncQueueEmpty, janus.AsyncQueueShutDown)
        self._sync_empty = janus.SyncQueueEmpty
        self._sync_shut_down = janus.SyncQueueShutDown
        self._batcher = ResponseBatcher(loop, loop_thread_id)
        self._responders: dict[Any, ThreadResponder] = {}
        self.split = max(1, split)
        self._closed = False
        # messages in the queue (``stats()["queued"]``): added on the loop, taken by threads;
        # counted per batch under a lock, since ``+=`` from two threads could lose updates
        self._queued = 0
        self._count_lock = threading.Lock()
        #: the facade's thread-side buffers (see :meth:`buffer`): made once, on setup
        self._buffers: list[collections.deque[Message]] = []

    def __len__(self) -> int:
        return self._queued

    # -- loop side (MessageSink) --

    def put(self, messages: list[Message]) -> None:
        if not messages:
            return
        conn = responder_of(messages[0])
        responder = self._responders.get(conn)
        if responder is None:  # the Reader calls forget() when a connection dies
            responder = self._responders[conn] = ThreadResponder(conn, self._batcher)
        # batches normally come from one connection; be safe if not
        reroute(messages, conn, responder, self._responder_for)
        with self._count_lock:
            self._queued += len(messages)
        put = self._queue.async_q.put_nowait
        split = self.split
        if split > 1 and len(messages) > 1:
            size = -(-len(messages) // split)
            for start in range(0, len(messages), size):
                put(messages[start : start + size])
        else:
            put(messages)

    def _responder_for(self, conn: Any) -> ThreadResponder:
        resp = self._responders.get(conn)
        if resp is None:
            resp = self._responders[conn] = ThreadResponder(conn, self._batcher)
        return resp

    def forget(self, conn: Any) -> None:
        """On the loop: ``conn`` died; drop its responder (its queued batches are dropped when
        taken, and messages still in a thread's hand keep their own reference)."""
        self._responders.pop(conn, None)

    def flush(self) -> None:
        """On the loop: apply every response threads have queued so far (graceful close)."""
        self._batcher._drain()

    def buffer(self) -> collections.deque[Message]:
        """A new deque for batches threads take from this sink and have not handed out yet
        (iteration's, ``run()``'s work queue). :meth:`take_undelivered` empties these too, so a
        reader told to stop hands back at once what no thread has started. Threads and the loop
        pop from it concurrently: a deque's appends and pops are thread-safe, and each message
        goes to exactly one of them."""
        buffer: collections.deque[Message] = collections.deque()
        self._buffers.append(buffer)
        return buffer

    def take_undelivered(self) -> list[Message]:
        """On the loop: remove what no thread has started (queued here, or taken into a
        :meth:`buffer` and not handed out)."""
        taken: list[Message] = []
        get = self._queue.async_q.get_nowait
        while True:
            try:
                taken.extend(get())
            except self._async_done:
                break
        with self._count_lock:
            self._queued -= len(taken)
        for buffer in self._buffers:
            while True:
                try:
                    taken.append(buffer.popleft())
                except IndexError:
                    break
        return taken

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.shutdown()

    # -- thread side --

    def get_batch(self, timeout: float) -> list[Message]:
        """Block up to ``timeout`` for the next batch; raises Empty, or ClosedError once closed.

        A batch whose connection died meanwhile is dropped: nsqd redelivers those messages, and
        answers to them could no longer reach it.
        """
        deadline = time.monotonic() + timeout
        get = self._queue.sync_q.get
        while True:
            try:
                batch = get(timeout=max(0.0, deadline - time.monotonic()))
            except self._sync_empty:
                raise Empty from None
            except self._sync_shut_down:
                raise ClosedError("the reader is closed") from None
            with self._count_lock:
                self._queued -= len(batch)
            responder = responder_of(batch[0])
            if not isinstance(responder, ThreadResponder) or responder.conn.state is not (
                _CLOSED_STATE
            ):
                return batch

    @property
    def batcher(self) -> ResponseBatcher:
        return self._batcher
