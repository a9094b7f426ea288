"""A worker child: what runs in the process the supervisor forked, until it exits.

:func:`run_child` is entered right after ``os.fork()`` and never returns: it first forgets
everything of the supervisor's (its selector, listening socket, the other children's links and
its signal handlers, none of which this process may touch), names itself in the logs
(``[worker N pid P]``) and in OpenTelemetry metrics (``nsq.worker.process``), calls the
application's ``init(index)`` if any, then runs the handler on its own Reader: a plain function
on a :class:`~nsqclient.sync.SyncReader` with ``threads`` worker threads, an ``async def`` on an
asyncio :class:`~nsqclient.aio.Reader` with ``concurrency`` workers. The supervisor opened no
NSQ connection and started no loop thread, so nothing of the kind is inherited: each child makes
its own.

Stopping: SIGTERM or SIGINT (from the supervisor, or sent to the whole process group) is the
Readers' graceful close, RDY 0, running handlers get ``close_timeout``, everything else goes
back to nsqd at once; SIGQUIT (the supervisor's "stop at once") is the immediate close,
a best-effort REQ of everything unanswered. A child whose supervisor is gone (its link reads end
of file) stops gracefully too. A signal only writes its number to a pipe (the wake-up
descriptor) and sets a flag; what it asks is done by the event loop (``async def``) or the
monitor thread (plain functions), never by a Python-level handler waiting for the main thread.

Recycling: past ``max_messages_per_child`` handler calls, or ``max_memory_per_child`` MiB of
resident memory (looked at every second), the child stops taking messages (RDY 0), hands back
at once every message it has not started (a neutral REQ, from the handler's wrapper), and asks
the supervisor for a replacement; the supervisor stops it (SIGTERM) once the replacement is up.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import selectors
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from ..message import Message
from . import logs
from .link import Link
from .options import Handler, WorkerOptions

if TYPE_CHECKING:
    from ..aio import Reader
    from ..sync import SyncReader

__all__ = ["EXIT_CRASHED", "EXIT_OK", "Gate", "limited", "resident_bytes", "run_child"]

log = logging.getLogger("nsqclient.worker")

EXIT_OK = 0
#: an exception outside the handlers (the Reader refused to start, ``init`` raised, a bug)
EXIT_CRASHED = 1
TICK = 0.25  # seconds between two looks at readiness, the link and (every 4th) memory
_QUIT_TIMEOUT = 2.0  # seconds the immediate close may take before the child exits anyway
_MEMORY_EVERY = 4  # ticks
_PAUSE_WAIT = 10.0  # seconds a handed-back message waits for RDY 0 at most


def resident_bytes() -> int:
    """This process's resident memory now (Linux: ``/proc/self/statm``; elsewhere the peak)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


class Control:
    """What this child has been asked to do, and the pipe that wakes its owner (the event
    loop, or the monitor thread) to act on it.

    The pipe is also the process's signal wake-up descriptor (:func:`signal.set_wakeup_fd`):
    the C-level handler writes each signal's number there, whichever thread the kernel gave
    the signal to, so a stop is seen even while the main thread sits in a long wait (joining a
    handler thread during a graceful close) where Python-level handlers would not run until it
    ended. Flags only go from unset to set and are acted on by the owner; two parties may race
    to set a reason (the message limit in a handler thread, the memory limit in the monitor),
    and whichever is kept is right: either one recycles the child."""

    def __init__(self) -> None:
        self.stop_reason: str | None = None
        self.quit = False
        self.recycle_reason: str | None = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
            os.write(self.wake_w, b"\0")

    def drain(self) -> None:
        """Read the pipe; each non-zero byte is a signal's number (0: a plain wake-up)."""
        with contextlib.suppress(OSError):
            while data := os.read(self.wake_r, 512):
                for signum in data:
                    if signum:
                        self.signalled(signum)

    def signalled(self, signum: int) -> None:
        if signum == signal.SIGQUIT:
            self.quit = True
        elif signum in (signal.SIGTERM, signal.SIGINT) and self.stop_reason is None:
            self.stop_reason = signal.Signals(signum).name

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The Python-level handler (the main thread, when it gets to it): the same flags."""
        self.signalled(signum)
        self.wake()

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.wake()

    def recycle(self, reason: str) -> None:
        if self.recycle_reason is None:
            self.recycle_reason = reason
        self.wake()


class Gate:
    """The recycling limit on handler calls: :meth:`admit` says whether the next message's
    handler may run; :meth:`hand_back` gives a message back once this child no longer takes
    any. One lock, held for a decrement (handler threads call it concurrently)."""

    def __init__(self, max_messages: int | None, control: Control) -> None:
        self._lock = threading.Lock()
        self._left = max_messages
        self._control = control
        self.open = True  # written under the lock; read without it (a stale True is rechecked)
        #: set once RDY 0 was applied, so a message handed back is not delivered here again
        self.paused = threading.Event()
        #: the asyncio child pauses right here, on its loop (no thread could wait for it)
        self.pause_inline: Callable[[], None] | None = None

    def admit(self) -> bool:
        if self._left is None:
            return self.open
        with self._lock:
            if not self.open:
                return False
            self._left -= 1
            last = self._left <= 0
            if last:
                self.open = False
        if last:
            self._control.recycle("max_messages_per_child")
        return True

    def close(self) -> None:
        with self._lock:
            self.open = False

    def hand_back(self, msg: Message) -> None:
        """A neutral REQ without delay, once RDY 0 is in (else nsqd could deliver it straight
        back here, and again, each time one attempt more)."""
        if self.pause_inline is not None:
            self.pause_inline()
        else:
            self.paused.wait(_PAUSE_WAIT)
        msg.req(0, backoff=False)


def limited(handler: Handler, gate: Gate, is_async: bool) -> Handler:
    """``handler`` behind the gate: once it is shut, a message is handed back to nsqd at once
    instead of handled (the same contract and kind)."""
    if is_async:

        @functools.wraps(handler)
        async def gated_async(msg: Message) -> Any:
            if not gate.admit():
                gate.hand_back(msg)
                return None
            return await handler(msg)

        return gated_async

    @functools.wraps(handler)
    def gated(msg: Message) -> Any:
        if not gate.admit():
            gate.hand_back(msg)
            return None
        return handler(msg)

    return gated


class Child:
    """The parts both kinds share: the link's questions, readiness, the limits."""

    def __init__(self, options: WorkerOptions, index: int, link: Link, control: Control) -> None:
        self.options = options
        self.index = index
        self.link = link
        self.control = control
        self.gate: Gate | None = None
        self.handler = options.handler
        if options.max_messages_per_child or options.max_memory_per_child:
            self.gate = Gate(options.max_messages_per_child, control)
            self.handler = limited(options.handler, self.gate, options.is_async)
        self._ready: bool | None = None
        self._ticks = 0
        self._recycling = False
        self._over_at_start = False  # above the memory limit at its first look
        self._stopping = False
        self.started_at = time.monotonic()

    def reader_kwargs(self) -> dict[str, Any]:
        o = self.options
        return {
            "nsqd_tcp_addresses": o.nsqd_tcp_addresses,
            "lookupd_http_addresses": o.lookupd_http_addresses,
            "config": o.config,
        }

    # what each kind does
    def stats(self) -> dict[str, Any]:
        raise NotImplementedError

    def connected(self) -> bool:
        raise NotImplementedError

    def pause(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def quit(self) -> None:
        raise NotImplementedError

    # shared
    def on_link(self) -> None:
        messages = self.link.receive()
        if messages is None:
            self.control.stop("the supervisor is gone (its link closed)")
            self.act()
            return
        for message in messages:
            if message.get("t") == "stats":
                self.answer_stats(message.get("id"))

    def answer_stats(self, ident: Any) -> None:
        try:
            stats = self.stats()
        except Exception:  # closing meanwhile: say nothing; the supervisor keeps the last
            log.debug("stats() failed", exc_info=True)
            return
        self.link.send(
            "stats",
            id=ident,
            stats=stats,
            rss=resident_bytes(),
            uptime=round(time.monotonic() - self.started_at, 3),
            recycling=self._recycling,
        )

    def act(self) -> None:
        """Do what the flags ask (on the loop, or in the monitor thread)."""
        control = self.control
        control.drain()
        if control.quit:
            self.quit()
            return
        if control.recycle_reason is not None and not self._recycling and not self._stopping:
            self._recycling = True
            log.info("recycling: %s reached; no more messages taken", control.recycle_reason)
            self.pause()
            if self.gate is not None:
                self.gate.paused.set()
                self.gate.close()
            self.link.send("recycle", reason=control.recycle_reason, at_start=self._over_at_start)
        if control.stop_reason is not None and not self._stopping:
            self._stopping = True
            log.info("stopping (%s): closing gracefully", control.stop_reason)
            self.stop()

    def tick(self) -> None:
        self.link.flush()
        try:
            ready = self.connected()
        except Exception:
            ready = False
        if ready != self._ready:
            self._ready = ready
            self.link.send("ready", ok=ready)
        self._ticks += 1
        limit = self.options.max_memory_per_child
        if limit and self._ticks % _MEMORY_EVERY == 0 and not self._recycling:
            rss = resident_bytes()
            if rss > limit * 1024 * 1024:
                self._over_at_start = self._ticks == _MEMORY_EVERY  # its first look
                self.control.recycle(
                    f"max_memory_per_child ({rss / 1048576:.0f} MiB resident > {limit} MiB)"
                )
        if self.control.recycle_reason is not None or self.control.stop_reason is not None:
            self.act()


class AsyncChild(Child):
    """An ``async def`` handler on an asyncio Reader, everything on this process's loop."""

    reader: Reader

    def run(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        from ..aio import Reader

        loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        self.reader = Reader(self.options.topic, self.options.channel, **self.reader_kwargs())
        self.reader.set_message_handler(self.handler, concurrency=self.options.handlers)
        if self.gate is not None:
            self.gate.pause_inline = self.pause
        link_fd = self.link.fileno()

        def on_link() -> None:
            self.on_link()
            if self.link.closed:  # before its number is reused
                loop.remove_reader(link_fd)

        loop.add_reader(self.control.wake_r, self.act)
        loop.add_reader(link_fd, on_link)
        try:
            if self.control.stop_reason is None and not self.control.quit:
                await self.reader.start()
                self.link.send("started")
            ticker = loop.create_task(self._tick_forever())
            self.act()  # a signal that came during the start
            await self._done.wait()
            ticker.cancel()
            if self.control.quit:
                await self.reader.close()
            else:
                await self.reader.graceful_close()
        finally:
            loop.remove_reader(self.control.wake_r)
            loop.remove_reader(link_fd)
            await self.reader.close()
        return EXIT_OK

    async def _tick_forever(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(TICK)

    def stats(self) -> dict[str, Any]:
        return dict(self.reader.stats())

    def connected(self) -> bool:
        return bool(self.reader.connections)

    def pause(self) -> None:
        if self.reader.max_in_flight:
            self.reader.set_max_in_flight(0)

    def stop(self) -> None:
        self._done.set()

    def quit(self) -> None:
        self._done.set()
        self.reader.close()  # cuts a graceful close short


class ThreadChild(Child):
    """A plain handler on a SyncReader's threads; the main thread runs ``run()``, a monitor
    thread the link, the flags and the ticks."""

    reader: SyncReader

    def run(self) -> int:
        from ..sync import SyncReader

        self.reader = SyncReader(self.options.topic, self.options.channel, **self.reader_kwargs())
        if self.control.stop_reason is not None or self.control.quit:
            return EXIT_OK
        self.reader.start()
        self.core = self.reader.aio  # for the immediate close, while a graceful one runs
        self.loop = self.reader.loop
        self.link.send("started")
        monitor = threading.Thread(target=self._monitor, name="nsqclient-worker-monitor")
        monitor.daemon = True
        monitor.start()
        self.reader.run(self.handler, threads=self.options.handlers, stop_signals=())
        return EXIT_OK

    def _monitor(self) -> None:
        """Until the process exits (a daemon thread): signals, the link, the ticks. It keeps
        going through the graceful close, which a SIGQUIT may still cut short."""
        selector = selectors.DefaultSelector()
        selector.register(self.control.wake_r, selectors.EVENT_READ, self.act)

        def on_link() -> None:
            self.on_link()
            if self.link.closed:  # the supervisor is gone: nothing more to read
                selector.unregister(self.link.sock)

        selector.register(self.link.sock, selectors.EVENT_READ, on_link)
        self.tick()  # ready at once if connected: the supervisor need not wait a tick
        while True:
            try:
                deadline = time.monotonic() + TICK
                while (left := deadline - time.monotonic()) > 0:
                    for key, _ in selector.select(left):
                        key.data()
                self.tick()
            except Exception:  # never take the process down from here: say it, go on
                log.exception("the worker's monitor thread failed; it goes on")
                time.sleep(TICK)

    def stats(self) -> dict[str, Any]:
        return dict(self.reader.stats())

    def connected(self) -> bool:
        return bool(self.reader.stats()["connections"])

    def pause(self) -> None:
        self.reader.set_max_in_flight(0)

    def stop(self) -> None:
        self.reader.stop()

    def quit(self) -> None:
        log.info("stopping at once (SIGQUIT): unanswered messages are handed back")
        core = self.core

        async def abort() -> None:
            await core.close()

        try:
            asyncio.run_coroutine_threadsafe(abort(), self.loop).result(_QUIT_TIMEOUT)
        except Exception:
            log.debug("the immediate close did not finish", exc_info=True)
        _exit(EXIT_OK, run_atexit=False)


def _name_process(index: int) -> None:
    """``ps -o comm`` and ``top`` show which child this is (best effort, Linux)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(f"nsq-worker-{index}"[:15])


def _exit(code: int, *, run_atexit: bool = True) -> NoReturn:
    """Leave the process without returning into the supervisor's code above the fork. The
    exit handlers run (the application's too, e.g. an OpenTelemetry SDK's last export), as in
    any Python process that ends normally; not after SIGQUIT, which means now."""
    if run_atexit:
        try:
            atexit._run_exitfuncs()
        except BaseException:
            log.exception("an exit handler failed")
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run_child(
    options: WorkerOptions,
    index: int,
    sock: Any,
    forget: Callable[[], None],
    signal_mask: Iterable[int],
) -> NoReturn:
    """The forked child's whole life. ``forget`` closes the supervisor's descriptors;
    ``signal_mask`` is the mask to restore (the supervisor blocks signals across the fork, so
    one sent meanwhile waits for the handlers below instead of the supervisor's)."""
    code = EXIT_CRASHED
    try:
        control = Control()
        signal.set_wakeup_fd(control.wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, control.on_signal)
        for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
            signal.signal(sig, signal.SIG_IGN)  # the supervisor's to act on
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
        forget()
        logs.set_label(f"worker {index}")
        _name_process(index)
        from ..observability import set_attributes

        set_attributes({"nsq.worker.process": index})
        link = Link(sock)
        if options.init is not None:
            options.init(index)
        kind = AsyncChild if options.is_async else ThreadChild
        code = kind(options, index, link, control).run()
    except BaseException:
        log.exception("worker %d failed", index)
        code = EXIT_CRASHED
    finally:
        _exit(code)
