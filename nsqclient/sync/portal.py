"""The one background event-loop thread per process, and calls into it from other threads.

The thread (``nsqclient-loop``) starts on first use and is shared by every sync object through a
lease count; the last lease stops and joins it. User code never runs on it, so heartbeats are
answered however slow a handler is. A call from a user thread is ``run_coroutine_threadsafe`` plus
a wait in short slices, so Ctrl-C lands promptly; on timeout or interrupt the task is cancelled.
A call made *from* the loop thread raises at once instead of deadlocking. Exceptions arrive as the
very object the coroutine raised.

Fork safety: after ``os.fork()`` the child forgets the parent's loop thread (it does not exist in
the child) and starts its own on first use; objects created before the fork notice through
:data:`fork_generation` and rebuild themselves instead of touching inherited sockets.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from ..errors import NSQError, NSQTimeoutError

__all__ = ["LoopThread", "fork_generation", "get_loop", "run_in_loop"]

log = logging.getLogger("nsqclient.sync")

T = TypeVar("T")
_SLICE = 0.1  # seconds between wake-ups while a user thread waits (lets Ctrl-C land)
_EXIT_CLOSE_TIMEOUT = 5.0

#: incremented in a forked child; sync objects compare it to the value they were created with
fork_generation = 0


class Closable(Protocol):
    def _close_at_exit(self, timeout: float) -> None: ...


class LoopThread:
    """A running event loop on a daemon thread, shared through leases."""

    _lock = threading.Lock()
    _instance: LoopThread | None = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.leases = 0
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="nsqclient-loop", daemon=True)
        self.thread.start()
        self._ready.wait()
        self.thread_id = self.thread.ident

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                self._cancel_all()
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    def _cancel_all(self) -> None:
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    # -- leases --

    @classmethod
    def acquire(cls) -> LoopThread:
        """Take a lease on the shared loop thread, starting it if needed."""
        with cls._lock:
            inst = cls._instance
            if inst is None or not inst.thread.is_alive():
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

    def stop(self, timeout: float = 10.0) -> None:
        if not self.thread.is_alive():
            return
        if threading.get_ident() == self.thread_id:
            self.loop.stop()  # the thread exits after this callback returns
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)

    # -- calls --

    @property
    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread_id

    def check_not_in_loop(self, what: str = "this call") -> None:
        if threading.get_ident() == self.thread_id:
            raise NSQError(
                f"{what} blocks, and was made from the nsqclient loop thread itself, where it "
                "would deadlock; from async code use the .aio object and await it instead"
            )

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        if threading.get_ident() == self.thread_id:
            coro.close()
            self.check_not_in_loop()
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result, interruptibly."""
        future = self.submit(coro)
        return wait_future(future, timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop without waiting (thread-safe)."""
        if threading.get_ident() == self.thread_id:
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)


def wait_future(future: concurrent.futures.Future[T], timeout: float | None) -> T:
    """Wait for a loop-side future in short slices; cancel it on timeout or interrupt."""
    if future.done():
        return future.result()
    deadline = None if timeout is None else _monotonic() + timeout
    try:
        while True:
            remaining = _SLICE if deadline is None else min(_SLICE, deadline - _monotonic())
            if remaining <= 0:
                future.cancel()
                raise NSQTimeoutError(f"no result within {timeout:.3g}s")
            try:
                return future.result(remaining)
            except concurrent.futures.TimeoutError:
                if future.done():  # raced: the result arrived as the slice ended
                    return future.result()
                continue
    except BaseException:
        if not future.done():
            future.cancel()
        raise


def _monotonic() -> float:
    import time

    return time.monotonic()


# -- registry of open sync objects, closed gracefully at interpreter exit --

_open: weakref.WeakSet[Any] = weakref.WeakSet()


def register_open(obj: Closable) -> None:
    _open.add(obj)


def unregister_open(obj: Closable) -> None:
    _open.discard(obj)


@atexit.register
def _close_open_objects_at_exit() -> None:
    for obj in list(_open):
        try:
            obj._close_at_exit(_EXIT_CLOSE_TIMEOUT)
        except Exception:
            log.exception("closing %r at interpreter exit failed", obj)
    inst = LoopThread._instance
    if inst is not None:
        LoopThread._instance = None
        inst.stop(timeout=_EXIT_CLOSE_TIMEOUT)


def _after_fork_in_child() -> None:
    global fork_generation
    fork_generation += 1
    # The parent's loop thread does not exist here; its loop, sockets and objects must not be
    # touched (closing them could disturb the parent). Keep references so nothing is finalised.
    inst = LoopThread._instance
    if inst is not None:
        _abandoned.append(inst)
    LoopThread._instance = None
    LoopThread._lock = threading.Lock()
    _abandoned.extend(_open)
    _open.clear()


_abandoned: list[Any] = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- public helpers --


def get_loop() -> asyncio.AbstractEventLoop:
    """The shared loop (starting its thread if needed). Hold a sync object to keep it alive."""
    inst = LoopThread._instance
    if inst is None or not inst.thread.is_alive():
        raise NSQError("no nsqclient loop thread is running; create a SyncReader/SyncWriter first")
    return inst.loop


def run_in_loop(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run a coroutine on the shared loop from a user thread and return its result.

    This is how blocking code and asyncio code share one Reader/Writer: ``sync_writer.aio`` is the
    core object, and ``run_in_loop(sync_writer.aio.pub(...))`` runs on the loop that owns it.
    """
    inst = LoopThread._instance
    if inst is None or not inst.thread.is_alive():
        coro.close()
        raise NSQError("no nsqclient loop thread is running; create a SyncReader/SyncWriter first")
    return inst.call(coro, timeout)
