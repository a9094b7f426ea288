"""The Reader: one topic/channel consumed from many nsqd, with go-nsq's RDY and backoff rules.

Connections come from direct ``nsqd_tcp_addresses`` and/or nsqlookupd discovery; the
:class:`~.nodes.NodeSet` owns them (connecting, SUB, reconnects with backoff). Flow control is
decided by :class:`~nsqclient.flow.RdyController` (pure, clock-injected) and carried out by
:class:`~.rdy.RdyDriver` (RDY sent, its single timer armed). Delivered messages go to a sink in
one call per read: the default queue feeds ``async for`` and handler workers (:mod:`.delivery`,
the workers kept by :class:`~.handlers.HandlerTasks`), or a ``direct=True`` handler runs on the
read path itself.

``graceful_close()`` guarantees that nothing delivered to this Reader is left to nsqd's timeout;
the sequence, the immediate ``close()`` and ``stop_on_signals()`` are carried out by
:class:`~.lifecycle.ReaderLife` (their contract is documented here, on the public methods).

This module keeps the Reader's state and the paths that run per read or per answer: what the
connections tell their owner (messages, FIN/REQ written, errors, up and lost) and the counters.
(A little over 500 lines: every public method's contract is documented here, where users read
it, though the code behind the close and the handlers lives in the modules above.)
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Unpack

from ..config import Config, lists_options
from ..errors import (
    ClosedError,
    ConfigError,
    ResponseFailedError,
    ServerError,
    TouchFailedError,
)
from ..flow import Outcome, RdyController, should_give_up
from ..message import Message
from ..observer import Observer, observer_for
from ..stats import ReaderStats
from .connection import Connection, Pending
from .delivery import (
    Handler,
    HandlerRunner,
    MessageQueue,
    MessageSink,
    QueueIterator,
)
from .handlers import HandlerTasks
from .lifecycle import ReaderLife, ReaderState
from .nodes import NodeSet
from .options import ClientOptions, validate_client_options
from .rdy import RdyDriver
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


@lists_options
class Reader:
    """Consume ``topic``/``channel`` from nsqd.

    Both are required (a type checker reports a missing channel); options are
    :class:`~nsqclient.config.Config` fields, passed as keywords or as ``config=``.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        *,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        message_handler: Handler | None = None,
        on_giving_up: GiveUpHook | None = None,
        config: Config | None = None,
        sink: MessageSink | None = None,
        **options: Unpack[ConfigOptions],
    ) -> None:
        checked = validate_client_options(
            Config.from_options(config, **options),
            nsqd_tcp_addresses=nsqd_tcp_addresses,
            lookupd_http_addresses=lookupd_http_addresses,
            topic=topic,
            channel=channel,
            consumer=True,
        )
        self._init(checked, topic, channel, message_handler, on_giving_up, sink)

    @classmethod
    def _from_checked(
        cls,
        checked: ClientOptions,
        topic: str | None,
        channel: str | None,
        *,
        on_giving_up: GiveUpHook | None = None,
        sink: MessageSink | None = None,
    ) -> Reader:
        """A Reader of options checked already (the blocking facade checks them in the
        caller's thread): kept off the public signature."""
        reader = cls.__new__(cls)
        reader._init(checked, topic, channel, None, on_giving_up, sink)
        return reader

    def _init(
        self,
        checked: ClientOptions,
        topic: str | None,
        channel: str | None,
        message_handler: Handler | None,
        on_giving_up: GiveUpHook | None,
        sink: MessageSink | None,
    ) -> None:
        self.config = checked.config
        self.topic = topic
        self.channel = channel
        self.on_giving_up = on_giving_up
        self.tracker = MessageTracker(self._update_watch)
        #: connections report each FIN only while this is true (backoff, or someone waits for
        #: the tracker to empty): the common FIN then costs no call into the Reader
        self._watch_fin = False
        self._flow = RdyController.from_config(self.config)
        self._rdy = RdyDriver(self._flow, self._update_watch)  # carries the flow's decisions out
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
            checked,
            self,
            running=self._running,
            on_up=self._on_connection_up,
            log=log,
            on_loop_end=self.close,
        )
        self._conns = self._nodes.conns  # the same dict: read here, changed by the node set
        self._handlers = HandlerTasks()
        self._touch = AutoTouch(
            connections=self._conns.values,
            messages=self.tracker.messages,
            running=lambda: self._state is ReaderState.RUNNING,
            msg_timeout_ms=self.config.msec.msg_timeout,
        )
        self._life = ReaderLife(self)  # the close sequences, and who waits for them
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
        loop = self._loop = self._rdy.loop = self._handlers.loop = asyncio.get_running_loop()
        self._state = ReaderState.RUNNING
        handlers = self._handlers
        if handlers.runner is not None and not handlers.direct:
            self._start_workers()
        self._touch.arm(loop)
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
        self._rdy.apply(
            self._flow.add_connection(
                conn,
                conn.max_rdy_count,
                self._rdy.now(),
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
        self._rdy.apply(self._flow.remove_connection(conn, self._rdy.now()))

    # ------------------------------------------------------------------ the read path

    def _on_messages(self, conn: Connection, messages: list[Message]) -> None:
        if self._obs is not None:
            self._obs.delivered(messages)
        changes = self._flow.messages_received(conn, len(messages), conn.last_message_time)
        if changes:  # a connection started delivering: the adaptive policy gives it the budget
            self._rdy.apply(changes)
        self._received += len(messages)
        if self._state is not ReaderState.RUNNING:
            for msg in messages:  # arrived after RDY 0 during close: hand straight back
                msg.req(0, backoff=False)
            self._life.handed_back += len(messages)
            return
        max_attempts = self._max_attempts
        if max_attempts:
            for msg in messages:
                if should_give_up(msg.attempts, max_attempts):
                    messages = self._give_up_some(messages)
                    break
        handlers = self._handlers
        if handlers.direct:
            runner = handlers.runner
            assert runner is not None
            runner.run_batch(messages, handlers.spawn)
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
        self._handlers.give_up(msg, self.on_giving_up, self._max_attempts)

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
                self._rdy.apply(flow.message_result(_SUCCESS, self._rdy.now()))
        else:
            self._requeued += 1
            if backoff:
                self._rdy.apply(flow.message_result(_FAILURE, self._rdy.now()))
            elif flow.in_backoff or flow.awaiting_answers:
                self._rdy.apply(flow.message_result(_NEUTRAL, self._rdy.now()))
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
        rdy = self._rdy
        rdy.apply(self._flow.set_max_in_flight(max_in_flight, rdy.now()))

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
        self._handlers.set(
            handler,
            auto_fin=auto_fin,
            direct=direct,
            concurrency=concurrency,
            queued=self._queue is not None,
            config=self.config,
        )
        self.enable_auto_touch(auto_touch, auto_touch_max)
        if self._state is ReaderState.RUNNING and not direct:
            self._start_workers()  # they take what is already queued before waiting
        if obs is not None:
            obs.handler_mode(True)
            self._update_watch()

    def clear_message_handler(self) -> None:
        """Stop running the handler set by :meth:`set_message_handler`.

        Its worker tasks are cancelled (a coroutine handler still running is cancelled with them);
        messages not yet taken stay queued for ``async for`` or a later handler. Loop thread only.
        """
        self._handlers.clear()
        if self._obs is not None:
            self._obs.handler_mode(False)
            self._update_watch()

    def _start_workers(self) -> None:
        assert self._queue is not None
        self._handlers.start_workers(self._queue)

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
        if self._handlers.runner is not None:
            raise ConfigError("this Reader has a message handler; messages() would compete with it")
        if self._queue is None:
            raise ConfigError("this Reader delivers to the sink it was given; read from that")
        return QueueIterator(self._queue, self._life.holders, self._start_if_new)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self.messages()

    # ------------------------------------------------------------------ closing

    async def graceful_close(
        self,
        timeout: float | None = None,
        *,
        requeue_in_hand: bool | None = None,
        holders: Callable[[], bool] | None = None,
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
        blocking facade passes "a thread that took messages is still alive").

        Idempotent and safe from any state. Called from a message handler it starts the close
        and returns at once; the close completes once that handler has returned.
        """
        await self._life.graceful_close(timeout, requeue_in_hand, holders, 0.0)

    async def _graceful_close_after(
        self, waited: float, timeout: float | None, holders: Callable[[], bool]
    ) -> None:
        """:meth:`graceful_close` for the blocking facade, which already waited ``waited``
        seconds for its threads (so the close's log says the whole wait)."""
        await self._life.graceful_close(timeout, None, holders, waited)

    def _stop_delivering(self) -> None:
        """The graceful close's first step, taken early by the blocking facade when it is told
        to stop: RDY 0, and REQ at once what no thread has started. Loop thread."""
        self._life.stop_delivering()

    def close(self) -> Awaitable[None]:
        """Close at once: best-effort REQ of everything unanswered, then drop the connections.

        Handlers still running are cancelled. Usable as ``reader.close()`` or
        ``await reader.close()``; calling it again returns the same awaitable. During a
        ``graceful_close`` it cuts the wait short.
        """
        return self._life.close()

    async def wait_closed(self) -> None:
        """Return once the Reader is closed (e.g. by :meth:`stop_on_signals` on SIGTERM)."""
        await self._life.wait_closed()

    def stop_on_signals(self, *signals: int) -> None:
        """On SIGTERM (or the ``signals`` given) close gracefully, as Ctrl-C would.

        The one line an asyncio service needs: ``reader.stop_on_signals()`` then
        ``await reader.wait_closed()`` (or iterate: the iteration ends). A signal stops
        deliveries (RDY 0), gives what handlers and iterating tasks hold up to ``close_timeout``,
        requeues the rest and closes. Further signals during the close are ignored; the
        previous handlers come back once the Reader has closed. Call it from a coroutine on the
        main thread's event loop (``asyncio.run``), where signals arrive.
        """
        self._life.stop_on_signals(signals)

    # ------------------------------------------------------------------ misc

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

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # like an unclosed socket's: names the Reader a program left open (shown with -X dev
        # or -W default::ResourceWarning); a loop that ended with it open closed it (nodes.py)
        nodes: NodeSet | None = getattr(self, "_nodes", None)
        state = getattr(self, "_state", ReaderState.NEW)
        if (
            nodes is not None
            and state is not ReaderState.NEW
            and (state is not ReaderState.CLOSED or nodes.left_open)
        ):
            _warn(
                f"unclosed Reader {self.topic}/{self.channel}: close it (await "
                "reader.graceful_close(), or async with Reader(...)) before its event loop ends",
                ResourceWarning,
                source=self,
            )
