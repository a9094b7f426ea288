"""SyncReader: iterate messages (or run a handler on threads) from blocking code.

The core Reader runs on the loop thread and delivers into a :class:`~.bridge.ThreadSink`; this
class takes whole batches from it and hands messages out one by one, so a thread pays one wake-up
per batch. ``msg.fin()``/``req()``/``touch()`` work from any thread without blocking. Leaving the
``with`` block (normally, by ``break``, by an exception or by Ctrl-C) drains like
``graceful_close``: nothing delivered is left to nsqd's timeout.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..config import Config
from ..errors import ClosedError, ConfigError
from ..message import Message
from ..protocol.identify import IdentifyOptions
from ..protocol.names import validate_channel, validate_topic
from . import portal
from .bridge import Empty, ThreadSink
from .portal import LoopThread, register_open, unregister_open

__all__ = ["SyncReader"]

log = logging.getLogger("nsqclient.sync")

_SLICE = 0.1
_GRACE = 2.0


class SyncReader:
    """Consume a topic/channel from blocking code. Options are Config fields."""

    def __init__(
        self,
        topic: str,
        channel: str,
        *,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        on_giving_up: Callable[[Message], Any] | None = None,
        config: Config | None = None,
        **options: Any,
    ) -> None:
        self.config = Config.from_options(config, **options)
        IdentifyOptions.from_config(self.config)
        validate_topic(topic)
        validate_channel(channel)
        self.topic = topic
        self.channel = channel
        self._nsqd = nsqd_tcp_addresses
        self._lookupd = lookupd_http_addresses
        self._on_giving_up = on_giving_up
        self._local: collections.deque[Message] = collections.deque()
        self._iter_threads: set[int] = set()
        self._workers: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._started = False
        self._closed = False
        self._split = 1
        self._attach()

    def _attach(self) -> None:
        self._generation = portal.fork_generation
        self._portal = LoopThread.acquire()
        try:
            self._reader, self._sink = self._portal.call(self._setup(), timeout=10)
        except BaseException:
            self._portal.release()
            raise
        self._started = False
        register_open(self)

    async def _setup(self) -> tuple[Any, ThreadSink]:
        from ..aio.reader import Reader

        sink = ThreadSink(self._portal.thread_id, split=self._split)
        reader = Reader(
            self.topic,
            self.channel,
            nsqd_tcp_addresses=self._nsqd,
            lookupd_http_addresses=self._lookupd,
            on_giving_up=self._on_giving_up,
            config=self.config,
            sink=sink,
        )
        return reader, sink

    def _check(self) -> None:
        if self._generation != portal.fork_generation:
            self._local.clear()  # the parent's deliveries; the parent answers them
            self._attach()
        if self._closed:
            raise ClosedError("this SyncReader was closed; create a new one")

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float | None = None) -> None:
        """Connect and subscribe (done for you on the first iteration or in ``with``)."""
        self._check()
        if not self._started:
            self._portal.check_not_in_loop("SyncReader.start")
            self._portal.call(self._reader.start(), timeout)
            self._started = True

    def __enter__(self) -> SyncReader:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.graceful_close()

    def graceful_close(self, timeout: float | None = None) -> None:
        """RDY 0, requeue what nobody started, let handlers finish (bounded), CLS, close."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        if self._generation != portal.fork_generation:
            return
        limit = self.config.seconds("close_timeout") if timeout is None else timeout
        me = threading.get_ident()
        in_hand = not self._workers and self._iter_threads <= {me}
        try:
            self._hand_back_local()
            self._portal.call(
                self._reader.graceful_close(limit, requeue_in_hand=in_hand),
                limit + 10 + _GRACE,
            )
            self._join_workers(limit + _GRACE)
        finally:
            unregister_open(self)
            self._portal.release()

    def close(self) -> None:
        """Close at once (best-effort REQ of everything unanswered)."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        if self._generation != portal.fork_generation:
            return
        try:
            self._hand_back_local()
            self._portal.call(_await(self._reader.close()), timeout=10)
        finally:
            unregister_open(self)
            self._portal.release()

    def _close_at_exit(self, timeout: float) -> None:
        if not self._closed:
            self.graceful_close(timeout)

    def _hand_back_local(self) -> None:
        local = self._local
        while local:
            msg = local.popleft()
            if not msg.has_responded:
                msg.req(0, backoff=False)

    def _join_workers(self, timeout: float) -> None:
        me = threading.current_thread()
        for thread in self._workers:
            if thread is not me:
                thread.join(timeout)
        self._workers = []

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        local = self._local
        if local:
            return local.popleft()
        msg = self.get()
        if msg is None:
            raise StopIteration
        return msg

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (forever if None).

        Returns None when the timeout passes or the reader is closed.
        """
        local = self._local
        if local:
            return local.popleft()
        if self._closed:
            return None
        self._check()
        if not self._started:
            self.start()
        me = threading.get_ident()
        if me not in self._iter_threads:
            self._portal.check_not_in_loop("SyncReader iteration")
            self._iter_threads.add(me)
        deadline = None if timeout is None else _monotonic() + timeout
        sink = self._sink
        while True:
            wait = _SLICE if deadline is None else min(_SLICE, deadline - _monotonic())
            if wait <= 0:
                return None
            try:
                batch = sink.get_batch(wait)
            except Empty:
                if self._stopping.is_set():
                    return None
                continue
            except ClosedError:
                return None
            local.extend(batch)
            while local:
                msg = local.popleft()
                if not msg.has_responded:
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
    ) -> None:
        """Call ``handler(msg)`` on ``threads`` worker threads until closed or interrupted.

        Returning FINs the message (``False`` REQs it, as in pynsq); raising REQs it with
        backoff. Blocks the calling thread; Ctrl-C closes gracefully and re-raises.
        ``timeout`` (seconds) stops after that long, closing gracefully. ``auto_touch=True``
        keeps messages alive with TOUCH while a handler runs (see ``Reader.set_message_handler``).
        """
        if not isinstance(threads, int) or threads < 1:
            raise ValueError("threads must be an int >= 1")
        self._check()
        if threads > 1 and self._split != threads:
            self._split = threads
            self._sink._split = threads
        if auto_touch:
            self._portal.call_soon(self._reader.enable_auto_touch, True, auto_touch_max)
        self.start()
        from ..aio.delivery import HandlerRunner

        runner = HandlerRunner(handler)
        if runner.is_async:
            raise ConfigError(
                "SyncReader.run needs a plain function (it runs on worker threads); for a "
                "coroutine handler use the asyncio Reader: reader.aio.set_message_handler(...)"
            )
        self._workers = [
            threading.Thread(
                target=self._work, args=(runner,), name=f"nsqclient-handler-{i}", daemon=True
            )
            for i in range(threads)
        ]
        for thread in self._workers:
            thread.start()
        deadline = None if timeout is None else _monotonic() + timeout
        try:
            while not self._stopping.wait(_SLICE):
                if deadline is not None and _monotonic() >= deadline:
                    break
                if not any(t.is_alive() for t in self._workers):
                    break
        finally:
            self.graceful_close()

    def _work(self, runner: Any) -> None:
        local: collections.deque[Message] = collections.deque()
        sink = self._sink
        reader = self._reader
        touching = reader._auto_touch
        try:
            while not self._stopping.is_set():
                if not local:
                    try:
                        local.extend(sink.get_batch(_SLICE))
                    except Empty:
                        continue
                    except ClosedError:
                        return
                msg = local.popleft()
                if msg.has_responded:
                    continue
                if touching:
                    reader.begin_handling(msg)
                    try:
                        runner.run_sync(msg)
                    finally:
                        reader.end_handling(msg)
                else:
                    runner.run_sync(msg)
        finally:
            for msg in local:  # stopping: hand back what this thread had not started
                if not msg.has_responded:
                    msg.req(0, backoff=False)

    def stop(self) -> None:
        """Ask ``run()`` to return (it then closes gracefully). Safe from any thread."""
        self._stopping.set()

    # ------------------------------------------------------------------ control and sharing

    def set_max_in_flight(self, max_in_flight: int) -> None:
        self._check()
        self._portal.call_soon(self._reader.set_max_in_flight, max_in_flight)

    @property
    def aio(self) -> Any:
        """The core :class:`nsqclient.aio.Reader` (its tracker, stats, coroutines)."""
        self._check()
        return self._reader

    @property
    def tracker(self) -> Any:
        return self.aio.tracker

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._portal.loop

    def stats(self) -> dict[str, Any]:
        self._check()
        result: dict[str, Any] = self._portal.call(_stats(self._reader), timeout=5)
        result["local_buffered"] = len(self._local)
        return result

    @property
    def is_closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"<SyncReader {self.topic}/{self.channel} {'closed' if self._closed else 'open'}>"


async def _stats(reader: Any) -> dict[str, Any]:
    return reader.stats()  # type: ignore[no-any-return]


async def _await(aw: Any) -> None:
    await aw


def _monotonic() -> float:
    import time

    return time.monotonic()
