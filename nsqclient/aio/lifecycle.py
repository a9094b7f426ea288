"""A Reader's life: its states, and how it ends (the graceful close, the immediate close, signals).

:class:`ReaderState` is where a :class:`~.reader.Reader` is in its life. :class:`ReaderLife` is
its end: ``graceful_close()`` guarantees that nothing delivered to the Reader is left to nsqd's
timeout (RDY 0 everywhere, REQ what was never handed out, let handlers finish (bounded), REQ
whatever is still unanswered, CLS and wait for CLOSE_WAIT, then close). It waits only for those
who can still answer: handlers, and tasks iterating the Reader that are neither done nor closing
it themselves. ``close()`` is the immediate close; ``stop_on_signals()`` starts the graceful one
on SIGTERM. The Reader's public methods carry the contract; this module carries it out.

The close reads and changes every part of the Reader (its state, RDY, sink, nodes, tracker,
handlers, auto-touch): :class:`ClosingReader` declares exactly what it uses, with underscore
names so they stay off the Reader's public surface (as :class:`~.connection.ConnectionOwner`).
Nothing here runs per message.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from ..config import Config
from ..errors import ClosedError, ConfigError
from ..message import _DONE, Message
from .connection import CLOSE_FLOOR, ConnectionState
from .delivery import ITERATING, MessageSink
from .handlers import HandlerTasks
from .nodes import NodeSet
from .rdy import RdyDriver
from .signals import DEFAULT_STOP_SIGNALS, StopSignals, signal_name
from .touch import AutoTouch
from .tracker import MessageTracker

__all__ = ["ClosingReader", "ReaderLife", "ReaderState"]

log = logging.getLogger("nsqclient.reader")

_HOLDER_POLL = 0.05  # seconds: how often a closing Reader asks whether holders can still answer


class ReaderState(enum.Enum):
    """A :class:`Reader`'s life: ``NEW`` until started, ``RUNNING``, ``CLOSING``, ``CLOSED``."""

    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class ClosingReader(Protocol):
    """What the close reads and changes of its Reader. Loop thread only."""

    topic: str | None
    channel: str | None
    config: Config
    tracker: MessageTracker
    _state: ReaderState
    _loop: asyncio.AbstractEventLoop | None
    _sink: MessageSink
    _nodes: NodeSet
    _handlers: HandlerTasks
    _rdy: RdyDriver
    _touch: AutoTouch

    async def graceful_close(self, timeout: float | None = None) -> None: ...


class ReaderLife:
    """The close sequence of one Reader, and who waits for it."""

    def __init__(self, reader: ClosingReader) -> None:
        self._reader = reader
        #: tasks that took messages from the queue by iterating (recorded per wait, not per
        #: message); done ones drop out. A close waits for what they hold only while they live.
        self.holders: set[asyncio.Task[Any]] = set()
        self._close_waiters: set[asyncio.Task[Any]] = set()  # tasks awaiting graceful_close()
        self._stop_signals: StopSignals | None = None
        self._signal_close: asyncio.Task[None] | None = None
        self._closing_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._closed_event = asyncio.Event()
        #: messages delivered but never handed out, requeued when deliveries stopped or on
        #: arrival after RDY 0 (the Reader counts those): the close's log reports them
        self.handed_back = 0

    # ------------------------------------------------------------------ stopping deliveries

    def stop_delivering(self) -> None:
        """The graceful close's first step, on its own: RDY 0 everywhere, and REQ (no delay)
        every message delivered but not yet handed out, at once. The blocking facade takes it
        the moment it is told to stop (a signal, ``stop()``), while its threads still finish
        what they hold; the rest of the close follows when it closes. Loop thread; a no-op
        unless running."""
        reader = self._reader
        if reader._state is ReaderState.RUNNING:
            reader._state = ReaderState.CLOSING
            self._hand_back_undelivered()

    def _hand_back_undelivered(self) -> None:
        reader = self._reader
        rdy = reader._rdy
        rdy.apply(rdy.flow.close())  # RDY 0 everywhere, first
        sink = reader._sink
        undelivered = sink.take_undelivered()
        _requeue(undelivered)
        sink.close()
        if undelivered:
            self.handed_back += len(undelivered)
            log.info(
                "stopping %s/%s: RDY 0; %d messages delivered but not yet handed out (to a "
                "handler or an iteration) requeued at once (REQ, no delay)",
                reader.topic,
                reader.channel,
                len(undelivered),
            )

    # ------------------------------------------------------------------ the graceful close

    async def graceful_close(
        self,
        timeout: float | None,
        requeue_in_hand: bool | None,
        holders: Callable[[], bool] | None,
        waited: float,
    ) -> None:
        """:meth:`Reader.graceful_close <nsqclient.aio.Reader.graceful_close>`."""
        reader = self._reader
        if reader._state is ReaderState.CLOSED:
            return
        if reader._state is ReaderState.NEW:
            self.close_unstarted()
            return
        current = asyncio.current_task()
        task = self._close_task or self._closing_task
        if task is None:
            wait = reader.config.sec.close_timeout if timeout is None else timeout
            task = self._closing_task = asyncio.get_running_loop().create_task(
                self._close_gracefully(wait, requeue_in_hand, holders, waited),
                name="nsq-reader-close",
            )
        if current is not None and reader._handlers.runs(current):
            # called from a handler: the close waits for this very handler to return, so
            # waiting for the close here would only burn the timeout
            return
        if current is None:
            await asyncio.shield(task)
            return
        # from now on this task answers nothing it holds; nor does the iterating task that
        # asked for this close through a task of its own (asyncio.wait_for on 3.11, gather)
        closing = {current, ITERATING.get() or current}
        self._close_waiters.update(closing)
        try:
            await asyncio.shield(task)
        finally:
            self._close_waiters.difference_update(closing)

    def _holders_can_answer(self) -> bool:
        """The default ``holders`` rule: handlers answer (or took over) what they were given;
        an iterating task can answer while it runs and is not waiting for the close itself."""
        if self._reader._handlers.runner is not None:
            return True
        waiting = self._close_waiters
        return any(not t.done() and t not in waiting for t in self.holders)

    async def _close_gracefully(
        self,
        timeout: float,
        requeue_in_hand: bool | None,
        holders: Callable[[], bool] | None,
        waited: float = 0.0,
    ) -> None:
        reader = self._reader
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + max(0.0, timeout)
        reader._state = ReaderState.CLOSING
        self._hand_back_undelivered()  # RDY 0, and REQ what was never handed out (if not yet)
        await reader._nodes.stop_discovery()
        timed_out = False
        if requeue_in_hand:
            self._requeue_in_flight()
        else:
            can_answer = (
                _always if requeue_in_hand is False else holders or self._holders_can_answer
            )
            timed_out = await self._wait_for_answers(deadline, can_answer)
        await reader._handlers.stop()
        requeued = self._requeue_in_flight()
        if timed_out and requeued:
            log.warning(
                "graceful close: %d messages still unanswered after %.1fs; requeued them"
                " (%d more, never handed out, were requeued at once)",
                requeued,
                waited + loop.time() - started,
                self.handed_back,
            )
        conns = [c for c in reader._nodes.conns.values() if c.state is ConnectionState.SUBSCRIBED]
        # CLS and the closing itself get what is left of the timeout (at least CLOSE_FLOOR, so
        # that a close with timeout 0 still says goodbye to a healthy nsqd): the whole close
        # ends within its timeout plus the stated margin, however stuck nsqd is
        cls_timeout = min(max(1.0, min(5.0, reader.config.sec.read_timeout)), _left(deadline))
        if conns:
            await asyncio.gather(*(c.cls(cls_timeout) for c in conns), return_exceptions=True)
            # anything that raced RDY 0 arrived before CLOSE_WAIT and was requeued on arrival
            self._requeue_in_flight()
        await self._close_connections(_left(deadline))

    async def _wait_for_answers(self, deadline: float, can_answer: Callable[[], bool]) -> bool:
        """Wait until every message handed out is answered, the deadline passes, or nobody who
        holds one can answer any more (asked every ``_HOLDER_POLL``: threads have no callback).
        True when the deadline passed with messages unanswered."""
        loop = asyncio.get_running_loop()
        tracker = self._reader.tracker
        while len(tracker) and can_answer():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return True
            poll = remaining if can_answer is _always else min(remaining, _HOLDER_POLL)
            await tracker.wait_empty(poll)
        return False

    def _requeue_in_flight(self) -> int:
        """REQ everything the connections still hold, even messages whose answer was given on
        another thread but has not reached the loop yet: closing must not strand them.
        Returns how many were requeued."""
        reader = self._reader
        reader._sink.flush()  # apply answers already queued by threads first
        count = 0
        for conn, msg in reader.tracker.items():
            count += 1
            if not msg.has_responded:
                msg.req(0, backoff=False)
            else:  # answered elsewhere, not yet applied: the late answer will find nothing
                conn.message_req(msg, 0, False)
        return count

    # ------------------------------------------------------------------ the immediate close

    def close(self) -> Awaitable[None]:
        """:meth:`Reader.close <nsqclient.aio.Reader.close>`."""
        if self._close_task is not None:
            return self._close_task
        reader = self._reader
        if reader._state is ReaderState.CLOSED or reader._loop is None:
            self.close_unstarted()
            return _DONE
        reader._state = ReaderState.CLOSING
        rdy = reader._rdy
        rdy.apply(rdy.flow.close())
        sink = reader._sink
        _requeue(sink.take_undelivered())
        sink.close()
        _requeue(reader.tracker.messages())
        reader._handlers.cancel()
        nodes = reader._nodes
        nodes.cancel()
        nodes.close_each()  # flushes the REQs above first
        self._close_task = reader._loop.create_task(self._finish_close(), name="nsq-reader-close")
        return self._close_task

    def close_unstarted(self) -> None:
        """Close a Reader that never started (or whose loop is gone): nothing to hand back."""
        self._reader._sink.close()  # an iteration waiting on it ends
        self._set_closed()

    async def _finish_close(self) -> None:
        reader = self._reader
        await reader._nodes.stop_discovery()
        await reader._handlers.stop()
        await self._close_connections()

    async def _close_connections(self, timeout: float | None = None) -> None:
        reader = self._reader
        await reader._nodes.close_connections(timeout)
        reader._rdy.stop()
        reader._touch.cancel()
        self._set_closed()

    def _set_closed(self) -> None:
        self._reader._state = ReaderState.CLOSED
        self.holders.clear()
        if self._stop_signals is not None:
            self._stop_signals.restore()  # the previous handlers, once there is nothing to stop
            self._stop_signals = None
        self._closed_event.set()

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    # ------------------------------------------------------------------ signals

    def stop_on_signals(self, signals: tuple[int, ...]) -> None:
        """:meth:`Reader.stop_on_signals <nsqclient.aio.Reader.stop_on_signals>`."""
        if self._reader._state is ReaderState.CLOSED:
            raise ClosedError("this Reader was closed; create a new one")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ConfigError(
                "call stop_on_signals() from a coroutine (inside asyncio.run)"
            ) from None
        if self._stop_signals is not None:
            self._stop_signals.restore()
        self._stop_signals = StopSignals(signals or DEFAULT_STOP_SIGNALS, self._on_stop_signal)
        self._stop_signals.install_on_loop(loop)

    def _on_stop_signal(self, signum: int) -> None:
        reader = self._reader
        name = signal_name(signum)
        if self._signal_close is not None or reader._state in (
            ReaderState.CLOSING,
            ReaderState.CLOSED,
        ):
            log.info("%s received while closing; the close goes on", name)
            return
        log.info("%s received: closing %s/%s gracefully", name, reader.topic, reader.channel)
        self._signal_close = asyncio.get_running_loop().create_task(
            reader.graceful_close(),
            name="nsq-reader-stop-signal",
            context=contextvars.Context(),  # nobody's own close: iterating tasks keep their time
        )


def _requeue(messages: Iterable[Message]) -> None:
    for msg in messages:
        if not msg.has_responded:
            msg.req(0, backoff=False)


def _left(deadline: float) -> float:
    """Seconds left until ``deadline`` (loop time), at least ``CLOSE_FLOOR``."""
    return max(CLOSE_FLOOR, deadline - asyncio.get_running_loop().time())


def _always() -> bool:
    return True
