"""The one background event-loop thread per process, and calls into it from other threads.

The thread (``nsqclient-loop``) starts on first use and is shared by every sync object through a
lease count; the last lease stops and joins it. User code never runs on it, so heartbeats are
answered however slow a handler is. A call from a user thread is ``run_coroutine_threadsafe`` plus
a wait in short slices, so Ctrl-C lands promptly; on timeout or interrupt the task is cancelled.
A call made *from* the loop thread raises at once instead of deadlocking. Exceptions arrive as the
very object the coroutine raised.

:class:`Lifetime` runs an object's start and its close inside one task on the loop, so an async
resource is entered and exited by the same task (what TaskGroups and ``asyncio.timeout`` need).

Fork safety: after ``os.fork()`` the child forgets the parent's loop thread (it does not exist in
the child) and starts its own on first use; objects created before the fork notice through
:data:`fork_generation` and rebuild themselves instead of touching inherited sockets. Objects still
open at interpreter exit are closed gracefully (``atexit``, and multiprocessing's exit hook in
forked children, which skip ``atexit``).

The loop implementation: asyncio's own, or uvloop when ``$NSQCLIENT_LOOP`` is ``uvloop`` (the
``nsqclient[uvloop]`` extra), read each time the loop thread starts (:func:`loop_factory`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

from ..errors import ClosedError, ConfigError, NSQError, NSQTimeoutError
from . import wakes

__all__ = [
    "LOOPS",
    "LOOP_ENV",
    "SLICE",
    "Lifetime",
    "LoopThread",
    "fork_generation",
    "fork_lock",
    "get_loop",
    "loop_factory",
    "run_in_loop",
    "wait_future",
]

log = logging.getLogger("nsqclient.sync")

T = TypeVar("T")
SLICE = 0.1  # seconds between wake-ups while a user thread waits (lets Ctrl-C land)
_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 10.0
_EXIT_CLOSE_TIMEOUT = 5.0

#: incremented in a forked child; sync objects compare it to the value they were created with
fork_generation = 0

#: the environment variable that chooses the loop thread's event loop
LOOP_ENV = "NSQCLIENT_LOOP"
#: the values it may take (unset or empty: ``asyncio``)
LOOPS = ("asyncio", "uvloop")


def loop_factory(name: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the event loop for ``name`` (default: ``$NSQCLIENT_LOOP``, else asyncio's).

    Raises ConfigError for a name that is not in :data:`LOOPS`, and for ``uvloop`` when it is
    not installed; uvloop is imported only here, only when asked for.
    """
    if name is None:
        name = os.environ.get(LOOP_ENV, "")
    choice = name.strip().lower() or "asyncio"
    if choice == "asyncio":
        return asyncio.new_event_loop
    if choice == "uvloop":
        try:
            import uvloop
        except ImportError as exc:
            raise ConfigError(
                f"{LOOP_ENV}=uvloop asks for uvloop, which is not installed: "
                "pip install 'nsqclient[uvloop]' (or unset it for asyncio's own loop)"
            ) from exc
        return uvloop.new_event_loop
    raise ConfigError(
        f"{LOOP_ENV}={name!r} is not an event loop nsqclient knows: use one of "
        f"{', '.join(LOOPS)} (unset means asyncio)"
    )


class Closable(Protocol):
    def _close_at_exit(self, timeout: float) -> None: ...


class LoopThread:
    """A running event loop on a daemon thread, shared through leases."""

    _lock = threading.Lock()
    _instance: LoopThread | None = None

    def __init__(self) -> None:
        factory = loop_factory()
        # asyncio's own loop gets the selector that wakes publishing threads where they can run
        self.loop = wakes.new_waking_loop() if factory is asyncio.new_event_loop else factory()
        self.leases = 0
        self.pid = os.getpid()
        started = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(started,), name="nsqclient-loop", daemon=True
        )
        self.thread.start()
        if not started.wait(_START_TIMEOUT):  # pragma: no cover - a wedged interpreter
            raise NSQError("the nsqclient loop thread did not start")
        self.thread_id = self.thread.ident

    def _run(self, started: threading.Event) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        wakes.bind(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            wakes.unbind(loop)
            try:
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.wait(tasks, timeout=_STOP_TIMEOUT))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    # -- leases --

    @classmethod
    def acquire(cls) -> LoopThread:
        """Take a lease on the shared loop thread, starting it if needed."""
        with cls._lock:
            inst = cls._instance
            if inst is None or not inst.thread.is_alive() or inst.pid != os.getpid():
                inst = cls._instance = LoopThread()
            inst.leases += 1
            return inst

    def release(self) -> None:
        """Give a lease back; the last one stops and joins the thread."""
        with LoopThread._lock:
            self.leases -= 1
            if self.leases > 0 or LoopThread._instance is not self:
                return
            LoopThread._instance = None
        self.stop()

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        if not self.thread.is_alive():
            return
        if self.in_loop_thread:
            self.loop.stop()  # the thread exits after this callback returns
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # already closed
            return
        self.thread.join(timeout)
        if self.thread.is_alive():  # pragma: no cover - something blocks the loop
            log.warning("the nsqclient loop thread did not stop within %.1fs", timeout)

    # -- calls --

    @property
    def in_loop_thread(self) -> bool:
        # the pid check matters after a fork, where a thread may reuse the old loop's ident
        return threading.get_ident() == self.thread_id and os.getpid() == self.pid

    def check_not_in_loop(self, what: str = "this call") -> None:
        if threading.get_ident() == self.thread_id and os.getpid() == self.pid:
            raise NSQError(
                f"{what} blocks, and was made from the nsqclient loop thread itself, where it "
                "would deadlock; from async code use the .aio object and await it instead"
            )

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        if self.in_loop_thread:
            coro.close()
            self.check_not_in_loop()
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop is closed
            coro.close()
            raise ClosedError("the nsqclient loop thread has stopped") from None

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result, interruptibly."""
        return wait_future(self.submit(coro), timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop without waiting (thread-safe)."""
        if self.in_loop_thread:
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)


def wait_future(future: concurrent.futures.Future[T], timeout: float | None) -> T:
    """Wait for a loop-side future in short slices; cancel it on timeout or interrupt.

    The result, or the very exception object the loop side raised, is returned or raised.
    """
    if future.done():
        return future.result()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            if deadline is None:
                remaining = SLICE
            else:
                remaining = min(SLICE, deadline - time.monotonic())
                if remaining <= 0:
                    future.cancel()
                    raise NSQTimeoutError(f"no result within {timeout:.3g}s")
            try:
                return future.result(remaining)
            except TimeoutError:  # concurrent.futures.TimeoutError is TimeoutError since 3.11
                if future.done():  # the coroutine's own TimeoutError (e.g. NSQTimeoutError),
                    return future.result()  # raised as is; or it ended just after the slice
    except BaseException:
        if not future.done():
            future.cancel()
        raise


class Lifetime(Generic[T]):
    """One task on the loop that starts an object, waits, and closes it.

    ``enter(start)`` creates the task, which awaits ``start()`` and reports its result;
    ``exit(close)`` hands the task the coroutine function that closes the object and waits
    for it. Entering and exiting inside one task is what an async context manager needs.
    """

    def __init__(self, portal: LoopThread) -> None:
        self._portal = portal
        self._exit: asyncio.Future[Callable[[], Awaitable[None]]] | None = None
        self._task: concurrent.futures.Future[None] | None = None

    @property
    def entered(self) -> bool:
        return self._task is not None

    def enter(self, start: Callable[[], Awaitable[T]], timeout: float | None) -> T:
        started: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._task = self._portal.submit(self._hold(start, started))
        try:
            return wait_future(started, timeout)
        except BaseException:
            self._task.cancel()
            raise

    async def _hold(
        self, start: Callable[[], Awaitable[T]], started: concurrent.futures.Future[T]
    ) -> None:
        self._exit = asyncio.get_running_loop().create_future()
        if not started.set_running_or_notify_cancel():
            return
        try:
            value = await start()
        except BaseException as exc:
            started.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        started.set_result(value)
        close = await self._exit
        await close()

    def exit(self, close: Callable[[], Awaitable[None]], timeout: float | None) -> None:
        task = self._task
        if task is None or task.done():
            self._portal.call(_run(close), timeout)
            return
        self._portal.call_soon(self._request_exit, close)
        wait_future(task, timeout)

    def _request_exit(self, close: Callable[[], Awaitable[None]]) -> None:
        fut = self._exit
        if fut is not None and not fut.done():
            fut.set_result(close)


async def _run(close: Callable[[], Awaitable[None]]) -> None:
    await close()


# -- fork: a lock that a forked child gets fresh, for objects rebuilding themselves --

_fork_lock = threading.RLock()


def fork_lock() -> threading.RLock:
    """Held while an object created before a fork rebuilds itself in the child."""
    return _fork_lock


# -- registry of open sync objects, closed gracefully at interpreter exit (newest first) --

_open: dict[int, Closable] = {}
_mp_hook_pid: int | None = None


def register_open(obj: Closable) -> None:
    _open[id(obj)] = obj
    _hook_multiprocessing_exit()


def unregister_open(obj: Closable) -> None:
    _open.pop(id(obj), None)


def _close_open_objects_at_exit() -> None:
    for obj in reversed(list(_open.values())):
        try:
            obj._close_at_exit(_EXIT_CLOSE_TIMEOUT)
        except Exception:
            log.exception("closing %r at interpreter exit failed", obj)
    _open.clear()
    inst = LoopThread._instance
    if inst is not None and inst.pid == os.getpid():
        LoopThread._instance = None
        inst.stop(timeout=_EXIT_CLOSE_TIMEOUT)


atexit.register(_close_open_objects_at_exit)


def _hook_multiprocessing_exit() -> None:
    """A multiprocessing child ends with ``os._exit`` (no atexit); its exit hook runs finalizers
    registered in the child, so register one there once."""
    global _mp_hook_pid
    pid = os.getpid()
    if _mp_hook_pid == pid:
        return
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is None:
        return
    _mp_hook_pid = pid
    mp_util.Finalize(None, _close_open_objects_at_exit, exitpriority=50)


def _after_fork_in_child() -> None:
    global fork_generation, _fork_lock
    fork_generation += 1
    _fork_lock = threading.RLock()
    # The parent's loop thread does not exist here; its loop, sockets and objects must not be
    # touched (closing them could disturb the parent). Keep references so nothing is finalised.
    inst = LoopThread._instance
    if inst is not None:
        _abandoned.append(inst)
    LoopThread._instance = None
    LoopThread._lock = threading.Lock()
    _abandoned.extend(_open.values())
    _open.clear()


_abandoned: list[Any] = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- public helpers --


def _running_instance() -> LoopThread | None:
    inst = LoopThread._instance
    if inst is None or not inst.thread.is_alive() or inst.pid != os.getpid():
        return None
    return inst


def get_loop() -> asyncio.AbstractEventLoop:
    """The shared loop. Hold an open SyncReader/SyncWriter to keep it running."""
    inst = _running_instance()
    if inst is None:
        raise NSQError("no nsqclient loop thread is running; create a SyncReader/SyncWriter first")
    return inst.loop


def run_in_loop(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run a coroutine on the shared loop from a user thread and return its result.

    This is how blocking code and asyncio code share one Reader/Writer: ``sync_writer.aio`` is the
    core object, and ``run_in_loop(sync_writer.aio.pub(...))`` runs on the loop that owns it.
    ``timeout`` (seconds) cancels the coroutine and raises NSQTimeoutError; so does Ctrl-C
    (re-raising KeyboardInterrupt). Raises NSQError when called from the loop thread itself.
    """
    inst = _running_instance()
    if inst is None:
        coro.close()
        raise NSQError("no nsqclient loop thread is running; create a SyncReader/SyncWriter first")
    return inst.call(coro, timeout)
