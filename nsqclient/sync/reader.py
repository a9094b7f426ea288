"""SyncReader: iterate messages (or run a handler on threads) from blocking code.

The core Reader runs on the loop thread and delivers into a :class:`~.bridge.ThreadSink`; this
class takes whole batches from it and hands messages out one by one, so a thread pays one wake-up
per batch. ``msg.fin()``/``req()``/``touch()`` work from any thread without blocking. Leaving the
``with`` block (normally, by ``break``, by an exception or by Ctrl-C) drains like
``graceful_close``: nothing delivered is left to nsqd's timeout. ``run()`` in the main thread
treats SIGTERM (what ``docker stop``, systemd and Kubernetes send) like Ctrl-C, and
``stop_on_signals()`` does the same for a ``for msg in reader`` loop. A stop (signal or
``stop()``) hands back at once what no thread has started, by the core Reader's own first close
step (RDY 0, REQ what its sink holds): the batches threads took and have not handed out sit in
the sink's buffers, so the core finds them there.

(A little over 500 lines: iteration, ``run()``'s worker threads and the drain on close share the
batch cursor and the stop flag, and splitting them would put those behind another indirection on
the per-message path.)
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ..aio.connection import ConnectionState
from ..aio.delivery import HandlerRunner
from ..aio.options import validate_client_options
from ..aio.signals import DEFAULT_STOP_SIGNALS, StopSignals, signal_name
from ..config import Config, lists_options
from ..errors import ClosedError, ConfigError, NSQError, NSQTimeoutError
from ..message import Message
from ..observer import observer_for
from . import portal
from .bridge import Empty, ThreadSink, is_live, thread_responder
from .lifecycle import FacadeLifecycle
from .portal import SLICE, LoopThread

if TYPE_CHECKING:
    from ..aio.reader import Reader
    from ..aio.tracker import MessageTracker
    from ..options import ConfigOptions
    from ..stats import ReaderStats, SyncReaderStats

__all__ = ["SyncReader"]

log = logging.getLogger("nsqclient.sync")

_CLOSED = ConnectionState.CLOSED
_GRACE = 2.0
#: seconds ``run(timeout=)``'s close gives handlers at least, once the timeout is up (within the
#: stated margin: docs/configuration.md, "Timeouts and their margin")
_HANDLERS_FLOOR = 0.1
_SETUP_TIMEOUT = 10.0
_CONTROL_TIMEOUT = 10.0


@lists_options
class SyncReader(FacadeLifecycle):
    """Consume a topic/channel from blocking code. Options are Config fields.

    ``for msg in reader`` (or ``reader.get(timeout)``) hands messages to the calling thread;
    ``reader.run(handler, threads=N)`` runs a handler on N worker threads. Either way RDY (set by
    ``max_in_flight``) bounds what is delivered, and heartbeats are answered on the loop thread
    however long a handler takes.
    """

    _kind = "SyncReader"

    def __init__(
        self,
        topic: str,
        channel: str,
        *,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        on_giving_up: Callable[[Message], Any] | None = None,
        config: Config | None = None,
        **options: Unpack[ConfigOptions],
    ) -> None:
        self.config = Config.from_options(config, **options)
        # the core Reader is built on the loop thread on first use (start, iteration, run); its
        # checks run here, at once, in the caller's thread, and what they built (IDENTIFY
        # options, the TLS context) is what the core Reader uses
        self._checked = validate_client_options(
            self.config,
            nsqd_tcp_addresses=nsqd_tcp_addresses,
            lookupd_http_addresses=lookupd_http_addresses,
            topic=topic,
            channel=channel,
            consumer=True,
        )
        self.topic = topic
        self.channel = channel
        self._on_giving_up = on_giving_up
        self._local: collections.deque[Message] = collections.deque()
        self._iter_threads: dict[int, threading.Thread] = {}
        self._workers: list[threading.Thread] = []
        self._work_queue: collections.deque[Message] = collections.deque()  # run()'s workers
        self._stopping = threading.Event()
        self._stopping_flag = False  # mirrors _stopping for the iteration fast path
        self._stop_signals: StopSignals | None = None
        self._init_lifecycle()
        observer_for(self)  # instrument(): registers it (its core Reader reports the events)

    def _bind(self, loop_thread: LoopThread) -> None:
        self._reader, self._sink = loop_thread.call(self._setup(loop_thread), _SETUP_TIMEOUT)
        self._start_lock = threading.Lock()
        # the thread-side buffers belong to the sink: the core's stop takes what they hold
        self._local = self._sink.buffer()
        self._work_queue = self._sink.buffer()

    def _forget_parent(self) -> None:
        self._local.clear()  # the parent's deliveries, which the parent answers
        self._iter_threads = {}
        self._workers = []
        self._stopping = threading.Event()
        self._stopping_flag = False

    async def _setup(self, loop_thread: LoopThread) -> tuple[Reader, ThreadSink]:
        sink = ThreadSink(loop_thread.thread_id)
        return self._core_reader(sink), sink

    def _core_reader(self, sink: ThreadSink | None) -> Reader:
        from ..aio.reader import Reader

        return Reader._from_checked(
            self._checked, self.topic, self.channel, on_giving_up=self._on_giving_up, sink=sink
        )

    # ------------------------------------------------------------------ lifecycle

    def _start_timeout(self) -> float:
        cfg = self.config
        return cfg.sec.dial_timeout + 2 * cfg.sec.read_timeout + _GRACE

    def start(self, timeout: float | None = None) -> None:
        """Connect and subscribe (done for you on the first iteration or in ``with``)."""
        self._check()
        if self._life.entered:
            return
        self._portal.check_not_in_loop("SyncReader.start")
        with self._start_lock:
            if not self._life.entered:
                limit = self._start_timeout() if timeout is None else timeout
                self._life.enter(self._reader.start, limit)

    def _open(self) -> None:
        self.start()

    def _on_claimed(self) -> None:
        self._stopping_flag = True
        self._stopping.set()  # the close that follows hands back what no thread started
        if self._generation == -1:  # never used: no core Reader, nothing to close
            self._restore_signals()

    def graceful_close(self, timeout: float | None = None) -> None:
        """RDY 0, let handlers finish what they hold (bounded by ``timeout``, default
        ``close_timeout``), REQ everything else unanswered, CLS, close.

        The wait is only for those who can still answer: ``run()``'s handlers, and threads
        that iterated and are still alive (other than the closing thread itself, which cannot be
        handling anything else). What a thread that has exited took is requeued at once. Called
        from a ``run()`` handler, this only asks ``run()`` to stop (which then closes).
        """
        if threading.current_thread() in self._workers:
            self.stop()  # a handler cannot wait for handlers to finish
            return
        if not self._claim_close("SyncReader.graceful_close"):
            return
        limit = self.config.sec.close_timeout if timeout is None else timeout
        started = time.monotonic()
        deadline = started + limit
        try:
            self._hand_back_local()
            workers = self._live_workers()
            if workers:
                # RDY 0 and REQ what no handler started (the core's first step of the close),
                # then let run()'s handlers finish and their threads end, so that every answer
                # they give reaches the loop before the connections close
                self._portal.call(_call(self._reader._stop_delivering), _CONTROL_TIMEOUT)
                for thread in workers:
                    thread.join(max(0.0, deadline - time.monotonic()))
                stuck = self._live_workers()
                if stuck:
                    log.warning(
                        "graceful close of %s/%s: %d handler thread(s) still running after "
                        "%.1fs, abandoned: %s. What they hold is requeued now and their late "
                        "fin()/req() are ignored; they are daemon threads, so they end with the "
                        "process (a handler that can hang needs its own timeout)",
                        self.topic,
                        self.channel,
                        len(stuck),
                        time.monotonic() - started,
                        ", ".join(t.name for t in stuck),
                    )
            closer = threading.get_ident()

            def holders() -> bool:  # asked on the loop while the close waits
                return bool(self._live_workers()) or any(
                    ident != closer for ident in self._live_iterators()
                )

            remaining = max(0.0, deadline - time.monotonic())
            waited = time.monotonic() - started
            self._exit_within(
                lambda: self._reader._graceful_close_after(waited, remaining, holders),
                remaining,
                self._reader.close,
            )
        finally:
            self._detach()
            self._restore_signals()

    def close(self) -> None:
        """Close at once (best-effort REQ of everything unanswered)."""
        if not self._claim_close("SyncReader.close"):
            return
        try:
            self._hand_back_local()
            self._life.exit(self._abort, _CONTROL_TIMEOUT)
            self._join_workers(_GRACE)
        finally:
            self._detach()
            self._restore_signals()

    async def _abort(self) -> None:
        await self._reader.close()

    def _hand_back_local(self) -> None:
        _hand_back(self._local)

    def _live_workers(self) -> list[threading.Thread]:
        return [t for t in self._workers if t.is_alive()]

    def _live_iterators(self) -> list[int]:
        return [ident for ident, t in list(self._iter_threads.items()) if t.is_alive()]

    def _join_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        me = threading.current_thread()
        for thread in self._workers:
            if thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        # fast path (``for msg in reader`` over a batch already taken): no call but the pops
        if self._generation == portal.fork_generation and not self._stopping_flag:
            local = self._local
            while local:
                try:
                    msg = local.popleft()
                except IndexError:
                    break
                if not msg.has_responded and thread_responder(msg).conn.state is not _CLOSED:
                    return msg
        waited = self.get()
        if waited is None:
            raise StopIteration
        return waited

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (forever if None).

        Returns None when the timeout passes, or once the reader is stopped or closed.
        """
        if self._closed:
            return None
        if self._generation != portal.fork_generation:
            self._check()  # forked: rebuild here; what is buffered is the parent's
        if self._stopping.is_set():  # stopped or closing: what is buffered goes back to nsqd
            return None
        local = self._local
        while local:
            try:
                msg = local.popleft()
            except IndexError:  # another iterating thread took the last one
                break
            if is_live(msg):
                return msg
        me = threading.get_ident()
        if me not in self._iter_threads:
            self._portal.check_not_in_loop("SyncReader iteration")
            self._iter_threads[me] = threading.current_thread()
        if not self._life.entered:
            self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        sink = self._sink
        stopping = self._stopping
        while True:
            if deadline is None:
                wait = SLICE
            else:
                wait = min(SLICE, deadline - time.monotonic())
                if wait <= 0:
                    return None
            try:
                batch = sink.get_batch(wait)
            except Empty:
                if stopping.is_set():
                    return None
                continue
            except ClosedError:
                return None
            local.extend(batch)
            if self._stopping_flag:  # stopped while this batch came: not started, so back
                self._hand_back_local()
                return None
            while True:
                try:
                    msg = local.popleft()
                except IndexError:
                    break
                if is_live(msg):
                    return msg

    # ------------------------------------------------------------------ handler style

    def run(
        self,
        handler: Callable[[Message], Any],
        *,
        threads: int = 1,
        timeout: float | None = None,
        auto_touch: bool = False,
        auto_touch_max: float | None = None,
        stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS,
    ) -> bool:
        """Call ``handler(msg)`` on ``threads`` worker threads until stopped, closed or
        interrupted, then close gracefully.

        Returns ``True`` when it was stopped (:meth:`stop`, a stop signal, or the reader closed
        elsewhere) and ``False`` when ``timeout`` ran out first.

        Returning FINs the message (``False``, or another false value but ``None``, REQs it, as
        in pynsq); raising REQs it with backoff. Blocks the calling thread; Ctrl-C closes
        gracefully and re-raises.
        In the main thread, SIGTERM (or each of ``stop_signals``; ``()`` turns this off) stops
        the same way and ``run()`` returns; the previous handlers are restored on return.
        ``timeout`` (seconds) bounds the whole run, the start and the close included: ``run()``
        returns within it plus the stated margin (docs/configuration.md), giving handlers what
        is left of it to finish and requeueing the rest. ``auto_touch=True`` keeps messages alive
        with TOUCH while a handler runs, for at most ``auto_touch_max`` seconds.
        """
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"threads must be an int >= 1 (worker threads), got {threads!r}")
        runner = HandlerRunner(handler, config=self.config)
        if runner.is_async:
            raise ConfigError(
                "SyncReader.run needs a plain function (it runs on worker threads); for a "
                "coroutine handler use the asyncio Reader"
            )
        self._check()
        obs = self._reader._obs  # the core's observer: run()'s handler calls are its handler style
        if obs is not None:
            runner = HandlerRunner(obs.wrap_handler(handler, False), config=self.config)
            obs.handler_mode(True)
        self._portal.check_not_in_loop("SyncReader.run")
        if self._live_workers():
            raise NSQError("run() is already running on this SyncReader")
        self._sink.split = threads
        installed = None
        if stop_signals and self._stop_signals is None and _in_main_thread():
            installed = self._stop_signals = StopSignals(stop_signals, self._on_stop_signal)
            installed.install()
        if auto_touch:
            self._portal.call(
                _call(self._reader.enable_auto_touch, True, auto_touch_max), _CONTROL_TIMEOUT
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if not self._start_by(deadline):
                return False
            self._workers = [
                threading.Thread(
                    target=self._work,
                    args=(runner,),
                    name=f"nsqclient-handler-{i}",
                    daemon=True,
                )
                for i in range(threads)
            ]
            for thread in self._workers:
                thread.start()
            while not self._stopping.wait(
                SLICE if deadline is None else min(SLICE, max(0.0, deadline - time.monotonic()))
            ):
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                if not self._live_workers():
                    break
            return True
        finally:
            try:
                # ``timeout`` bounds the whole run, its close included: the close gets what is
                # left of it (and handlers at least _HANDLERS_FLOOR to finish what they hold)
                self.graceful_close(
                    None
                    if deadline is None
                    else min(
                        self.config.sec.close_timeout,
                        max(_HANDLERS_FLOOR, deadline - time.monotonic()),
                    )
                )
            finally:
                if installed is not None and self._stop_signals is installed:
                    self._restore_signals()
                if obs is not None:
                    obs.handler_mode(False)

    def _start_by(self, deadline: float | None) -> bool:
        """Start, within ``run()``'s deadline if that comes before the start's own limit;
        False if the deadline passed first (the close that follows cancels the start)."""
        if deadline is None or deadline - time.monotonic() >= self._start_timeout():
            self.start()
            return True
        try:
            self.start(max(0.0, deadline - time.monotonic()))
        except NSQTimeoutError:
            if time.monotonic() >= deadline:
                return False
            raise
        return True

    def _work(self, runner: HandlerRunner) -> None:
        # Workers share one deque (thread-safe appends and pops): a slow handler never sits on
        # a batch idle workers could take. (Auto-touch, on the loop, covers every message
        # delivered and unanswered, wherever it waits.)
        shared = self._work_queue
        sink = self._sink
        stopping = self._stopping
        while not stopping.is_set():
            try:
                msg = shared.popleft()
            except IndexError:
                try:
                    batch = sink.get_batch(SLICE)
                except Empty:
                    continue
                except ClosedError:
                    break
                shared.extend(batch)
                continue
            if not is_live(msg):
                continue
            try:
                pending = runner.run_sync(msg)
                if pending is not None:  # a plain function returned an awaitable
                    self._portal.call(runner.finish(msg, pending))
            except Exception:
                log.exception("message handler machinery failed")
        # stopping: the stop took what was queued; a batch taken since goes back from here
        _hand_back(shared)

    def stop(self) -> None:
        """Ask ``run()`` (and iteration) to return; ``run()`` then closes gracefully.

        At once, what was delivered and no handler or iteration has started goes back to nsqd
        (RDY 0, REQ with no delay); messages being handled are answered as usual. Safe from any
        thread, including handlers."""
        self._stopping_flag = True
        self._stopping.set()
        self._stop_delivering_soon()

    def _stop_delivering_soon(self) -> None:
        """Have the core Reader stop delivering and hand back what no thread started (RDY 0,
        REQ): asked of the loop thread, not waited for."""
        if self._generation != portal.fork_generation or self._closed:
            return  # never used here (nothing delivered), or a close already does it
        try:
            self._portal.call_soon(self._reader._stop_delivering)
        except (RuntimeError, ClosedError):  # the loop is gone: so are the deliveries
            pass

    def stop_on_signals(self, *signals: int) -> None:
        """Stop on SIGTERM (or the ``signals`` given) as :meth:`stop` does: what was prefetched
        and not handed out goes back to nsqd at once, a ``for msg in reader`` loop ends after the
        message in hand, and leaving the ``with`` block closes gracefully (nothing left in flight
        at nsqd). ``run()`` does this by itself.

        Call it from the main thread (where Python delivers signals); the previous handlers
        are restored when this reader closes.
        """
        if self._closed:
            raise ClosedError("this SyncReader was closed; create a new one")
        self._restore_signals()
        stop = StopSignals(signals or DEFAULT_STOP_SIGNALS, self._on_stop_signal)
        stop.install()  # ConfigError off the main thread
        self._stop_signals = stop

    def _on_stop_signal(self, signum: int) -> None:
        # runs in the main thread between two bytecodes, possibly while that very thread holds
        # the stop Event's lock: set the flag here, the Event from the loop thread
        if self._stopping_flag:
            return
        self._stopping_flag = True
        log.info("%s received: stopping %s/%s", signal_name(signum), self.topic, self.channel)
        portal_ = getattr(self, "_portal", None)
        if portal_ is not None and self._generation == portal.fork_generation:
            try:
                portal_.loop.call_soon_threadsafe(self._stop_on_loop)
                return
            except (RuntimeError, ClosedError):  # the loop is gone: nothing waits on the Event
                pass
        self._stopping.set()

    def _stop_on_loop(self) -> None:
        self._stopping.set()  # first: a thread that takes a batch after the hand-back sees it
        if not self._closed:
            self._reader._stop_delivering()

    def _restore_signals(self) -> None:
        stop, self._stop_signals = self._stop_signals, None
        if stop is not None:
            stop.restore()

    # ------------------------------------------------------------------ control and sharing

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the RDY budget at run time (0 pauses)."""
        self._check()
        self._portal.call(_call(self._reader.set_max_in_flight, max_in_flight), _CONTROL_TIMEOUT)

    @property
    def aio(self) -> Reader:
        """The core :class:`nsqclient.aio.Reader` (its tracker, stats, coroutines)."""
        self._check()
        return self._reader

    @property
    def tracker(self) -> MessageTracker:
        """The core Reader's in-flight tracker (read it on the loop, e.g. via run_in_loop)."""
        return self.aio.tracker

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The shared loop this reader's core object lives on."""
        self._check()
        return self._portal.loop

    def stats(self) -> SyncReaderStats:
        """The core Reader's stats (:class:`nsqclient.stats.ReaderStats`) plus ``local_buffered``:
        taken from the bridge and not yet handed to an iterating thread. ``queued`` counts every
        message delivered and not yet handed to the application (in the bridge, buffered here,
        or in ``run()``'s work queue). Any thread; works after close too (the last counters).
        Every key and its unit: :class:`nsqclient.stats.SyncReaderStats`."""
        if not self._closed:
            self._check()
        if self._generation == -1:  # closed before first use: a core Reader that never ran
            reader = self._core_reader(None)
            reader.close()  # never started: closes at once (nothing to hand back)
        else:
            reader = self._reader
        core: ReaderStats
        if reader.is_closed or self._generation != portal.fork_generation:
            core = reader.stats()  # nothing changes it any more: read it here
        else:
            try:
                core = self._portal.call(_call(reader.stats), _CONTROL_TIMEOUT)
            except ClosedError:  # closed meanwhile and the loop has stopped
                core = reader.stats()
        local = len(self._local)
        result: SyncReaderStats = {**core, "local_buffered": local}
        result["queued"] += local + len(self._work_queue)
        return result

    def __repr__(self) -> str:
        return f"<SyncReader {self.topic}/{self.channel} {'closed' if self._closed else 'open'}>"


def _hand_back(buffer: collections.deque[Message]) -> None:
    """REQ (no delay, no backoff) every unanswered message left in ``buffer``."""
    while True:
        try:
            msg = buffer.popleft()
        except IndexError:
            return
        if not msg.has_responded:
            msg.req(0, backoff=False)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)
