"""The Reader: one topic/channel consumed from many nsqd, with go-nsq's RDY and backoff rules.

Connections come from direct ``nsqd_tcp_addresses`` and/or nsqlookupd discovery; the
:class:`~.nodes.NodeSet` owns them (connecting, SUB, reconnects with backoff). Flow control is
decided by :class:`~nsqclient.flow.RdyController` (pure, clock-injected); this module only carries
its decisions out and keeps its single timer armed. Delivered messages go to a sink in one call
per read: the default queue feeds ``async for`` and handler workers (:mod:`.delivery`), or a
``direct=True`` handler runs on the read path itself.

``graceful_close()`` guarantees that nothing delivered to this Reader is left to nsqd's timeout:
RDY 0 everywhere, REQ what was never handed out, let handlers finish (bounded), REQ whatever is
still unanswered, CLS and wait for CLOSE_WAIT, then close. It waits only for those who can still
answer: handlers, and tasks iterating the Reader that are neither done nor closing it themselves.
``stop_on_signals()`` starts that close on SIGTERM.

(Longer than most modules: flow control, the delivery styles and the close sequence share one
state machine, the Reader's state with its in-flight tracker, RDY budget and holders; the close
reads and changes all of it at every step, and split across files it would be harder to check.)
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ..config import Config
from ..errors import (
    ClosedError,
    ConfigError,
    ResponseFailedError,
    ServerError,
    TouchFailedError,
)
from ..flow import (
    Outcome,
    RdyChange,
    RdyController,
    should_give_up,
)
from ..message import _DONE, Message
from ..observer import Observer, observer_for
from ..stats import ReaderStats
from .connection import Connection, ConnectionState, Pending
from .delivery import (
    ITERATING,
    Handler,
    HandlerRunner,
    MessageQueue,
    MessageSink,
    QueueIterator,
    run_worker,
)
from .nodes import NodeSet
from .options import ClientOptions, validate_client_options
from .signals import DEFAULT_STOP_SIGNALS, StopSignals, signal_name
from .touch import AutoTouch
from .tracker import MessageTracker

if TYPE_CHECKING:
    from ..options import ConfigOptions

__all__ = ["Reader", "ReaderState"]

log = logging.getLogger("nsqclient.reader")

GiveUpHook = Callable[[Message], Any]
_SUCCESS = Outcome.SUCCESS
_FAILURE = Outcome.FAILURE
_NEUTRAL = Outcome.NEUTRAL
_HOLDER_POLL = 0.05  # seconds: how often a closing Reader asks whether holders can still answer


class ReaderState(enum.Enum):
    """A :class:`Reader`'s life: ``NEW`` until started, ``RUNNING``, ``CLOSING``, ``CLOSED``."""

    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class Reader:
    """Consume ``topic``/``channel`` from nsqd.

    Options are :class:`~nsqclient.config.Config` fields, passed as keywords or as ``config=``.
    """

    def __init__(
        self,
        topic: str | None = None,
        channel: str | None = None,
        *,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        message_handler: Handler | None = None,
        on_giving_up: GiveUpHook | None = None,
        config: Config | None = None,
        sink: MessageSink | None = None,
        _checked: ClientOptions | None = None,
        **options: Unpack[ConfigOptions],
    ) -> None:
        # ``_checked``: the options checked already (the blocking facade did, in its thread)
        checked = _checked or validate_client_options(
            Config.from_options(config, **options),
            nsqd_tcp_addresses=nsqd_tcp_addresses,
            lookupd_http_addresses=lookupd_http_addresses,
            topic=topic,
            channel=channel,
            consumer=True,
        )
        self.config = checked.config
        self.topic = topic
        self.channel = channel
        self.on_giving_up = on_giving_up
        self.tracker = MessageTracker(self._update_watch)
        #: connections report each FIN only while this is true (backoff, or someone waits for
        #: the tracker to empty): the common FIN then costs no call into the Reader
        self._watch_fin = False
        self._flow = RdyController.from_config(self.config)
        #: the Reader's own buffer (``async for``, handler workers), only when no sink is given:
        #: with one, messages sit in the sink alone
        self._queue: MessageQueue | None = None
        if sink is None:
            self._queue = MessageQueue()
            sink = self._queue
        self._sink: MessageSink = sink
        self._state = ReaderState.NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nodes = NodeSet(
            checked, self, running=self._running, on_up=self._on_connection_up, log=log
        )
        self._conns = self._nodes.conns  # the same dict: read here, changed by the node set
        self._handler_tasks: set[asyncio.Task[Any]] = set()  # handler awaitables, give-up hooks
        self._flow_handle: asyncio.TimerHandle | None = None
        self._flow_at: float | None = None
        self._runner: HandlerRunner | None = None
        self._direct = False
        self._concurrency = 1
        self._workers: set[asyncio.Task[None]] = set()
        self._touch = AutoTouch(
            connections=self._conns.values,
            messages=self.tracker.messages,
            running=lambda: self._state is ReaderState.RUNNING,
            msg_timeout_ms=self.config.msec.msg_timeout,
        )
        #: tasks that took messages from the queue by iterating (recorded per wait, not per
        #: message); done ones drop out. A close waits for what they hold only while they live.
        self._holders: set[asyncio.Task[Any]] = set()
        self._close_waiters: set[asyncio.Task[Any]] = set()  # tasks awaiting graceful_close()
        self._stop_signals: StopSignals | None = None
        self._signal_close: asyncio.Task[None] | None = None
        self._closing_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._closed_event = asyncio.Event()
        self._max_attempts = self.config.max_attempts
        self._received = 0
        self._finished_closed = 0  # FINs on connections that are gone
        self._requeued = 0
        self._given_up = 0
        self._response_errors = 0
        self._timed_out = 0  # FIN/REQ refused: nsqd had timed the message out and requeued it
        #: told of deliveries, handler calls and settles (None: none; see nsqclient.observer)
        self._obs: Observer | None = observer_for(self)  # before the handler: it wraps it
        if self._obs is not None:
            self._update_watch()  # it may need every FIN from the start
        if message_handler is not None:
            self.set_message_handler(message_handler)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect to the configured nsqd and lookupd, SUB, and begin receiving."""
        if self._state is not ReaderState.NEW:
            if self._state is ReaderState.RUNNING:
                return
            raise ClosedError("this Reader was closed; create a new one")
        if self.topic is None or self.channel is None:
            raise ConfigError("a Reader needs a topic and a channel: Reader(topic, channel, ...)")
        self._loop = asyncio.get_running_loop()
        self._state = ReaderState.RUNNING
        if self._runner is not None and not self._direct:
            self._ensure_workers()
        self._touch.arm(self._loop)
        if self._flow.max_in_flight == 0:
            log.warning(
                "reader %s/%s starts paused: max_in_flight=0 subscribes with RDY 0, so nsqd "
                "delivers nothing until set_max_in_flight(n) with n > 0",
                self.topic,
                self.channel,
            )
        try:
            await self._nodes.start(self.topic, self.channel)
        except Exception:  # refused: misconfiguration, said now rather than retried forever
            await self.close()
            raise

    async def _start_if_new(self) -> None:
        if self._state is ReaderState.NEW:
            await self.start()

    async def __aenter__(self) -> Reader:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.graceful_close()

    def _running(self) -> bool:
        return self._state is ReaderState.RUNNING

    @property
    def state(self) -> ReaderState:
        """Where the Reader is in its life (see :class:`ReaderState`)."""
        return self._state

    @property
    def is_closed(self) -> bool:
        """True once the Reader has closed: its close finished, every connection is closed."""
        return self._state is ReaderState.CLOSED

    # ------------------------------------------------------------------ connections

    def _on_connection_up(self, conn: Connection) -> None:
        if conn.max_rdy_count < self._flow.max_in_flight:
            log.warning(
                "nsqd %s max_rdy_count %d is below max_in_flight %d",
                conn.address,
                conn.max_rdy_count,
                self._flow.max_in_flight,
            )
        self.tracker.attach(conn)
        resp = conn.identify_response
        obt = resp.output_buffer_timeout if resp is not None else 250  # nsqd's default
        self._apply(
            self._flow.add_connection(
                conn,
                conn.max_rdy_count,
                self._now(),
                in_flight=conn.in_flight.__len__,
                output_buffer_timeout=max(0, obt) / 1000.0,
                rtt=conn.rtt,
            )
        )
        self._touch.arm(self._loop)  # this nsqd's msg_timeout may call for a shorter interval

    def _on_connection_lost(self, conn: Connection, exc: BaseException | None) -> None:
        if self._obs is not None:  # observer: before its in-flight messages are forgotten
            self._obs.connection_lost(conn)
        if self._nodes.lost(conn, exc):
            self._finished_closed += conn.messages_finished
        orphans = self.tracker.detach(conn)
        self._sink.forget(conn)  # queued messages of conn, the thread bridge's stand-in for it
        if orphans:
            log.info(
                "connection to nsqd %s lost with %d messages in flight (their answers can no "
                "longer be sent): an nsqd still running redelivers them after its msg_timeout; "
                "one that shut down cleanly saved them to disk for after its restart; one that "
                "crashed lost them with its memory",
                conn.address,
                len(orphans),
            )
        self._apply(self._flow.remove_connection(conn, self._now()))

    # ------------------------------------------------------------------ the read path

    def _on_messages(self, conn: Connection, messages: list[Message]) -> None:
        if self._obs is not None:
            self._obs.delivered(messages)
        changes = self._flow.messages_received(conn, len(messages), conn.last_message_time)
        if changes:  # a connection started delivering: the adaptive policy gives it the budget
            self._apply(changes)
        self._received += len(messages)
        if self._state is not ReaderState.RUNNING:
            for msg in messages:  # arrived after RDY 0 during close: hand straight back
                msg.req(0, backoff=False)
            return
        max_attempts = self._max_attempts
        if max_attempts:
            for msg in messages:
                if should_give_up(msg.attempts, max_attempts):
                    messages = self._give_up_some(messages)
                    break
        if self._direct:
            runner = self._runner
            assert runner is not None
            runner.run_batch(messages, self._spawn_handler)
        elif messages:
            self._sink.put(messages)

    def _give_up_some(self, messages: list[Message]) -> list[Message]:
        keep = []
        max_attempts = self._max_attempts
        for msg in messages:
            if should_give_up(msg.attempts, max_attempts):
                self._give_up(msg)
            else:
                keep.append(msg)
        return keep

    def _give_up(self, msg: Message) -> None:
        self._given_up += 1
        hook = self.on_giving_up
        try:
            if hook is None:
                log.warning(
                    "giving up on message %s after %d attempts (max_attempts=%d)",
                    msg.id.decode("ascii", "replace"),
                    msg.attempts,
                    self._max_attempts,
                )
            else:
                result = hook(msg)
                if inspect.isawaitable(result):
                    self._spawn_handler(_await_and_log(result))
        except Exception:
            log.exception("on_giving_up hook failed")
        msg.fin()

    def _finished(self) -> int:
        """Messages FIN'd (counted by the connections, so a FIN costs no call here)."""
        return self._finished_closed + sum(c.messages_finished for c in self._conns.values())

    def _update_watch(self) -> None:
        flow = self._flow
        obs = self._obs  # an observer may need every FIN too (a span per iterated message)
        self._watch_fin = (
            flow.in_backoff
            or flow.awaiting_answers
            or self.tracker.has_waiters
            or (obs is not None and obs.watch_settles)
        )

    def _on_message_result(self, conn: Connection, msg: Message, fin: bool, backoff: bool) -> None:
        if self._obs is not None:
            self._obs.settled(msg, fin, backoff)
        flow = self._flow
        if fin:
            if flow.in_backoff or flow.awaiting_answers:
                self._apply(flow.message_result(_SUCCESS, self._now()))
        else:
            self._requeued += 1
            if backoff:
                self._apply(flow.message_result(_FAILURE, self._now()))
            elif flow.in_backoff or flow.awaiting_answers:
                self._apply(flow.message_result(_NEUTRAL, self._now()))
        if self.tracker.has_waiters:
            self.tracker.notify()

    def _on_response_error(self, conn: Connection, error: ResponseFailedError) -> None:
        self._response_errors += 1
        if not isinstance(error, TouchFailedError):  # a late TOUCH is followed by its FIN/REQ
            self._timed_out += 1
        log.warning("%s (the message probably timed out on nsqd; it will be redelivered)", error)

    def _on_fatal_error(
        self, conn: Connection, error: ServerError, unexecuted: list[Pending]
    ) -> bool:
        """ConnectionOwner: a Reader's pending replies (SUB, CLS) belong to that connection, so
        they fail with it. Called by the connection, not by users."""
        return False

    # ------------------------------------------------------------------ flow control

    def _now(self) -> float:
        loop = self._loop
        return loop.time() if loop is not None else 0.0

    def _apply(self, changes: Sequence[RdyChange]) -> None:
        for change in changes:
            conn = change.conn
            assert isinstance(conn, Connection)
            conn.send_rdy(change.count)
        at = self._flow.next_deadline()
        if at != self._flow_at:
            if self._flow_handle is not None:
                self._flow_handle.cancel()
                self._flow_handle = None
            self._flow_at = at
            if at is not None and self._loop is not None:
                self._flow_handle = self._loop.call_at(at, self._on_flow_timer)
        self._update_watch()

    def _on_flow_timer(self) -> None:
        self._flow_handle = None
        self._flow_at = None
        assert self._loop is not None
        # the tick judges silence, so first let the loop read what the sockets hold: after a
        # stall this timer may run before the reads; the second hop runs after one poll
        self._loop.call_soon(self._loop.call_soon, self._flow_tick)

    def _flow_tick(self) -> None:
        if self._state is not ReaderState.CLOSED:
            self._apply(self._flow.tick(self._now()))

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the total RDY budget at run time; 0 pauses consumption.

        ConfigError unless an int >= 0. Loop thread only (from threads: ``SyncReader``'s).
        """
        if (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or max_in_flight < 0
        ):
            raise ConfigError(f"max_in_flight must be an int >= 0, got {max_in_flight!r}")
        self._apply(self._flow.set_max_in_flight(max_in_flight, self._now()))

    @property
    def max_in_flight(self) -> int:
        """The in-flight limit across all nsqd (``Config.max_in_flight`` or the last
        :meth:`set_max_in_flight`)."""
        return self._flow.max_in_flight

    def is_starved(self) -> bool:
        """True when some connection has used at least 85% of its RDY (time to flush a batch)."""
        return any(
            conn.in_flight and len(conn.in_flight) >= 0.85 * conn.rdy
            for conn in self._conns.values()
        )

    # ------------------------------------------------------------------ delivery API

    def set_message_handler(
        self,
        handler: Handler,
        *,
        auto_fin: bool = True,
        direct: bool = False,
        concurrency: int | None = None,
        auto_touch: bool = False,
        auto_touch_max: float | None = None,
    ) -> None:
        """Run ``handler(msg)`` for every message: returning FINs it (``False``, or another false
        value but ``None``, REQs it, as in pynsq), raising REQs with backoff.

        Queue-backed by default (workers take messages from the queue; ``concurrency`` of them
        for coroutine handlers). ``direct=True`` calls a plain function on the read path itself,
        the fastest option for quick handlers.

        ``auto_touch=True`` TOUCHes every delivered message not yet answered (running or
        waiting for a handler) every half ``msg_timeout``, for at most ``auto_touch_max``
        seconds (default: nsqd's ``max_msg_timeout``), so slow handlers do not lose messages to
        nsqd's timeout.
        """
        obs = self._obs
        if obs is not None and callable(handler):
            handler = obs.wrap_handler(handler, HandlerRunner(handler).is_async)
        runner = HandlerRunner(handler, auto_fin=auto_fin)
        if not direct and self._queue is None:
            raise ConfigError(
                "this Reader delivers to the sink it was given: only a direct=True handler can run"
            )
        if direct and runner.is_async:
            raise ConfigError(
                "direct=True needs a plain function; use the default queue-backed "
                "mode (with concurrency=N) for coroutine handlers"
            )
        if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self._runner = runner
        self._direct = direct
        self._concurrency = concurrency or 1
        self.enable_auto_touch(auto_touch, auto_touch_max)
        for task in self._workers:
            task.cancel()
        self._workers.clear()
        if self._state is ReaderState.RUNNING and not direct:
            self._ensure_workers()  # they take what is already queued before waiting
        if obs is not None:
            obs.handler_mode(True)
            self._update_watch()

    def clear_message_handler(self) -> None:
        """Stop running the handler set by :meth:`set_message_handler`.

        Its worker tasks are cancelled (a coroutine handler still running is cancelled with them);
        messages not yet taken stay queued for ``async for`` or a later handler. Loop thread only.
        """
        self._runner = None
        self._direct = False
        for task in self._workers:
            task.cancel()
        self._workers.clear()
        if self._obs is not None:
            self._obs.handler_mode(False)
            self._update_watch()

    def _ensure_workers(self) -> None:
        loop = self._loop
        assert loop is not None
        queue, runner = self._queue, self._runner
        assert queue is not None and runner is not None
        while len(self._workers) < self._concurrency:
            task = loop.create_task(run_worker(queue, runner), name="nsq-handler")
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

    # ------------------------------------------------------------------ auto-touch

    def enable_auto_touch(self, enabled: bool = True, max_seconds: float | None = None) -> None:
        """TOUCH every message delivered to this Reader and not yet answered, each half
        ``msg_timeout``, for at most ``max_seconds`` (default: nsqd's ``max_msg_timeout``).

        Messages waiting behind slow handlers (in the queue, or crossing to threads) are kept
        alive as well as those being handled: all of them would otherwise time out on nsqd.
        """
        self._touch.enabled = enabled
        self._touch.max_seconds = max_seconds
        self._touch.arm(self._loop)

    def messages(self) -> AsyncIterator[Message]:
        """Iterate over messages as they arrive (``async for msg in reader.messages()``)."""
        if self._runner is not None:
            raise ConfigError("this Reader has a message handler; messages() would compete with it")
        if self._queue is None:
            raise ConfigError("this Reader delivers to the sink it was given; read from that")
        return QueueIterator(self._queue, self._holders, self._start_if_new)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self.messages()

    # ------------------------------------------------------------------ closing

    async def graceful_close(
        self,
        timeout: float | None = None,
        *,
        requeue_in_hand: bool | None = None,
        holders: Callable[[], bool] | None = None,
        _waited: float = 0.0,
    ) -> None:
        """Stop receiving and hand back everything unfinished; nothing is left to nsqd's timeout.

        The sequence: RDY 0 on every connection; REQ what was delivered but never handed out;
        let handlers and iterating tasks answer what they hold (bounded by ``timeout``); REQ
        whatever is still unanswered; CLS on each connection and wait for nsqd's CLOSE_WAIT;
        then close the connections. :meth:`wait_closed` returns and :attr:`is_closed` is True
        once it is done.

        ``timeout`` (seconds, default ``close_timeout``) bounds how long messages already handed
        out get to be answered. The close waits only while someone can still answer them:
        a running handler, or a task iterating this Reader that is neither done (finished or
        cancelled) nor itself waiting for this close (directly, or through a task it started:
        ``asyncio.wait_for`` on 3.11, ``gather``); once nobody can, the rest is requeued at
        once. ``requeue_in_hand=True`` requeues everything handed out at once, ``False`` waits
        for it up to ``timeout`` whoever holds it. ``holders`` replaces the task rule (the
        blocking facade passes "a thread that took messages is still alive"; ``_waited`` is
        how long it already waited for its threads, so the close's log says the whole wait).

        Idempotent and safe from any state. Called from a message handler it starts the close
        and returns at once; the close completes once that handler has returned.
        """
        if self._state is ReaderState.CLOSED:
            return
        if self._state is ReaderState.NEW:
            self._close_unstarted()
            return
        current = asyncio.current_task()
        task = self._close_task or self._closing_task
        if task is None:
            wait = self.config.sec.close_timeout if timeout is None else timeout
            task = self._closing_task = asyncio.get_running_loop().create_task(
                self._close_gracefully(wait, requeue_in_hand, holders, _waited),
                name="nsq-reader-close",
            )
        if current is not None and (current in self._workers or current in self._handler_tasks):
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
        if self._runner is not None:
            return True
        waiting = self._close_waiters
        return any(not t.done() and t not in waiting for t in self._holders)

    async def _close_gracefully(
        self,
        timeout: float,
        requeue_in_hand: bool | None,
        holders: Callable[[], bool] | None,
        waited: float = 0.0,
    ) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + max(0.0, timeout)
        self._state = ReaderState.CLOSING
        self._apply(self._flow.close())  # RDY 0 everywhere, first
        undelivered = self._sink.take_undelivered()
        self._requeue(undelivered)
        self._sink.close()
        await self._nodes.stop_discovery()
        timed_out = False
        if requeue_in_hand:
            self._requeue_in_flight()
        else:
            can_answer = (
                _always if requeue_in_hand is False else holders or self._holders_can_answer
            )
            timed_out = await self._wait_for_answers(deadline, can_answer)
        await self._stop_handlers()
        requeued = self._requeue_in_flight()
        if timed_out and requeued:
            log.warning(
                "graceful close: %d messages still unanswered after %.1fs; requeued them"
                " (%d more, never handed out, were requeued at once)",
                requeued,
                waited + loop.time() - started,
                len(undelivered),
            )
        conns = [c for c in self._conns.values() if c.state is ConnectionState.SUBSCRIBED]
        cls_timeout = max(1.0, min(5.0, self.config.sec.read_timeout))
        if conns:
            await asyncio.gather(*(c.cls(cls_timeout) for c in conns), return_exceptions=True)
            # anything that raced RDY 0 arrived before CLOSE_WAIT and was requeued on arrival
            self._requeue_in_flight()
        await self._close_connections()

    async def _wait_for_answers(self, deadline: float, can_answer: Callable[[], bool]) -> bool:
        """Wait until every message handed out is answered, the deadline passes, or nobody who
        holds one can answer any more (asked every ``_HOLDER_POLL``: threads have no callback).
        True when the deadline passed with messages unanswered."""
        loop = asyncio.get_running_loop()
        tracker = self.tracker
        while len(tracker) and can_answer():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return True
            poll = remaining if can_answer is _always else min(remaining, _HOLDER_POLL)
            await tracker.wait_empty(poll)
        return False

    def close(self) -> Awaitable[None]:
        """Close at once: best-effort REQ of everything unanswered, then drop the connections.

        Handlers still running are cancelled. Usable as ``reader.close()`` or
        ``await reader.close()``; calling it again returns the same awaitable. During a
        ``graceful_close`` it cuts the wait short.
        """
        if self._close_task is not None:
            return self._close_task
        if self._state is ReaderState.CLOSED or self._loop is None:
            self._close_unstarted()
            return _DONE
        self._state = ReaderState.CLOSING
        self._apply(self._flow.close())
        self._requeue(self._sink.take_undelivered())
        self._sink.close()
        self._requeue(self.tracker.messages())
        for task in (*self._workers, *self._handler_tasks):
            task.cancel()
        self._nodes.cancel()
        self._nodes.close_each()  # flushes the REQs above first
        self._close_task = self._loop.create_task(self._finish_close(), name="nsq-reader-close")
        return self._close_task

    def _close_unstarted(self) -> None:
        self._sink.close()  # an iteration waiting on it ends
        self._set_closed()

    def _set_closed(self) -> None:
        self._state = ReaderState.CLOSED
        self._holders.clear()
        if self._stop_signals is not None:
            self._stop_signals.restore()  # the previous handlers, once there is nothing to stop
            self._stop_signals = None
        self._closed_event.set()

    async def _finish_close(self) -> None:
        await self._nodes.stop_discovery()
        await self._stop_handlers()
        await self._close_connections()

    async def _stop_handlers(self) -> None:
        tasks = [*self._workers, *self._handler_tasks]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _close_connections(self) -> None:
        await self._nodes.close_connections()
        if self._flow_handle is not None:
            self._flow_handle.cancel()
            self._flow_handle = None
        self._touch.cancel()
        self._set_closed()

    def _requeue(self, messages: Iterable[Message]) -> None:
        for msg in messages:
            if not msg.has_responded:
                msg.req(0, backoff=False)

    def _requeue_in_flight(self) -> int:
        """REQ everything the connections still hold, even messages whose answer was given on
        another thread but has not reached the loop yet: closing must not strand them.
        Returns how many were requeued."""
        self._sink.flush()  # apply answers already queued by threads first
        count = 0
        for conn, msg in self.tracker.items():
            count += 1
            if not msg.has_responded:
                msg.req(0, backoff=False)
            else:  # answered elsewhere, not yet applied: the late answer will find nothing
                conn.message_req(msg, 0, False)
        return count

    async def wait_closed(self) -> None:
        """Return once the Reader is closed (e.g. by :meth:`stop_on_signals` on SIGTERM)."""
        await self._closed_event.wait()

    def stop_on_signals(self, *signals: int) -> None:
        """On SIGTERM (or the ``signals`` given) close gracefully, as Ctrl-C would.

        The one line an asyncio service needs: ``reader.stop_on_signals()`` then
        ``await reader.wait_closed()`` (or iterate: the iteration ends). A signal stops
        deliveries (RDY 0), gives what handlers and iterating tasks hold up to ``close_timeout``,
        requeues the rest and closes. Further signals during the close are ignored; the
        previous handlers come back once the Reader has closed. Call it from a coroutine on the
        main thread's event loop (``asyncio.run``), where signals arrive.
        """
        if self._state is ReaderState.CLOSED:
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
        name = signal_name(signum)
        if self._signal_close is not None or self._state in (
            ReaderState.CLOSING,
            ReaderState.CLOSED,
        ):
            log.info("%s received while closing; the close goes on", name)
            return
        log.info("%s received: closing %s/%s gracefully", name, self.topic, self.channel)
        self._signal_close = asyncio.get_running_loop().create_task(
            self.graceful_close(),
            name="nsq-reader-stop-signal",
            context=contextvars.Context(),  # nobody's own close: iterating tasks keep their time
        )

    # ------------------------------------------------------------------ misc

    def _spawn_handler(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Handler work (awaited by graceful close within its timeout, like the workers)."""
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_tasks.discard)

    @property
    def connections(self) -> list[Connection]:
        """A snapshot list of the open nsqd connections (a copy: safe to keep). Loop thread only."""
        return list(self._conns.values())

    def stats(self) -> ReaderStats:
        """Counters and state, cheap enough to poll (a new dict each call; nothing per message).

        Every key, its unit and its meaning: :class:`nsqclient.stats.ReaderStats` (keys are only
        ever added across releases). Loop thread only.
        """
        flow = self._flow
        outages = self._nodes.outages
        return {
            "topic": self.topic,
            "channel": self.channel,
            "state": self._state.value,
            "received": self._received,
            "finished": self._finished(),
            "requeued": self._requeued,
            "given_up": self._given_up,
            "in_flight": len(self.tracker),
            "lost_on_disconnect": self.tracker.lost,
            "response_errors": self._response_errors,
            "timed_out": self._timed_out,
            "queued": self._queued(),
            "connecting": len(self._nodes.connecting),
            "max_in_flight": flow.max_in_flight,
            "total_rdy": flow.total_rdy,
            "backoff_level": flow.backoff_level,
            "in_backoff": flow.in_backoff,
            "connection_losses": outages.losses,
            "reconnects": outages.reconnects,
            "nsqd_down": outages.down,
            "connections": [conn.stats() for conn in self._conns.values()],
        }

    def _queued(self) -> int:
        """Delivered and not yet handed to the application (in the queue, or in a sink)."""
        return len(self._sink)

    def __repr__(self) -> str:
        return (
            f"<Reader {self.topic}/{self.channel} {self._state.value} "
            f"conns={len(self._conns)} in_flight={len(self.tracker)}>"
        )


def _always() -> bool:
    return True


async def _await_and_log(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception:
        log.exception("on_giving_up hook failed")
