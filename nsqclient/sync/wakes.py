"""How the loop thread wakes a thread blocked in a publish: cheaply, and where it can run.

A thread blocked in ``pub()`` waits for the loop to read nsqd's reply. Two costs decided the
shape, both measured on a 2-core VM:

* **The wake-up itself.** Releasing a ``threading.Lock`` a thread waits on is a futex call made
  while the GIL is held, so the woken thread finds the GIL taken and sleeps again; 16 threads
  woken that way cost 8-17 µs of CPU and 3.3 context switches per hand-off. Instead each thread
  has a :class:`Waker`: one end of a socket pair that it reads with a kernel timeout
  (``SO_RCVTIMEO``, so waiting is one ``recv`` and Ctrl-C still lands within a slice), and the
  loop writes a byte to the other end, a system call that lets go of the GIL: 3.4-6.6 µs and
  1.7 switches per hand-off in the same test. One pair per thread, made on its first publish
  and closed with the thread (or anew after a fork).
* **When.** Woken in the middle of the loop's work, a thread still waits for the GIL the loop
  holds. So the loop thread's asyncio loop runs on a :class:`WakingSelector`, which writes the
  bytes queued during an iteration just before it waits for I/O (uvloop's loop has none: there
  the byte goes at once). A wake-up waits at most the rest of one loop iteration.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import socket
import struct
import threading

__all__ = [
    "Waker",
    "WakingSelector",
    "bind",
    "new_waking_loop",
    "thread_waker",
    "unbind",
    "wake",
    "wake_each",
]

_get_ident = threading.get_ident
_SLICE = 0.1  # seconds: the longest single wait (lets Ctrl-C and deadlines be looked at)
_MIN_WAIT = 1e-6  # SO_RCVTIMEO 0 means "forever": never set it to that


def _timeval(seconds: float) -> bytes:
    seconds = max(seconds, _MIN_WAIT)
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6) or 1)


class _End(socket.socket):
    """One end of a waker's socket pair, closed quietly when collected. A thread's waker is
    usually freed with its thread (and :meth:`Waker.__del__` closes both ends); one a reference
    cycle reaches (a kept traceback that saw it) is freed by the garbage collector, which may
    finalize the sockets before the waker: a plain socket then warns "unclosed socket"."""

    __slots__ = ()

    def __del__(self) -> None:
        self.close()


class Waker:
    """One thread's wake-up line: the thread waits in :meth:`wait`, the loop calls :meth:`wake`.

    A byte may be left over from a publish the thread gave up on; the thread checks its
    ticket's state after every wake-up, so a stale byte only costs a second look.
    """

    __slots__ = ("_in", "_out", "_wait", "pid")

    def __init__(self) -> None:
        a, b = socket.socketpair()
        self._in, self._out = _End(fileno=a.detach()), _End(fileno=b.detach())
        self._out.setblocking(False)
        self._wait = _SLICE
        self._in.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(_SLICE))
        self.pid = os.getpid()

    def wait(self, remaining: float) -> bool:
        """Block up to ``min(remaining, 0.1 s)``; True if woken, False if that time passed."""
        want = _SLICE if remaining >= _SLICE else remaining
        if want != self._wait:  # only near a deadline (or just after one)
            self._in.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(want))
            self._wait = want
        try:
            self._in.recv(64)  # a byte per wake-up (several if some were stale)
        except (BlockingIOError, TimeoutError):  # EAGAIN: SO_RCVTIMEO passed
            return False
        return True

    def wake(self) -> None:
        """Wake the thread (any thread; never blocks)."""
        try:
            self._out.send(b"\0")
        except BlockingIOError:  # bytes waiting already: the thread wakes anyway
            pass
        except OSError:  # closed: the thread is gone
            pass

    def close(self) -> None:
        self._in.close()
        self._out.close()

    def __del__(self) -> None:  # the thread ended (its threading.local went)
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


_local = threading.local()


def thread_waker() -> Waker:
    """The calling thread's :class:`Waker` (made on first use, and anew in a forked child)."""
    try:
        return _local.waker  # type: ignore[no-any-return]
    except AttributeError:
        waker = _local.waker = Waker()
        return waker


def _after_fork_in_child() -> None:
    """The inherited wakers are the parent's socket pairs: a child's threads get new ones.
    (os.getpid() per publish would be a system call: glibc no longer caches it.)"""
    global _local
    _local = threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class WakingSelector(selectors.DefaultSelector):
    """The default selector, waking the threads queued by :func:`wake` before it waits."""

    def __init__(self) -> None:
        super().__init__()
        self.thread_id: int | None = None
        self.queued: list[Waker] = []

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        queued = self.queued
        if queued:
            self.queued = []
            for waker in queued:
                waker.wake()
        return super().select(timeout)

    def wake_all(self) -> None:
        queued, self.queued = self.queued, []
        for waker in queued:
            waker.wake()


_selector: WakingSelector | None = None


def new_waking_loop() -> asyncio.AbstractEventLoop:
    """An asyncio loop on a :class:`WakingSelector`; the thread that runs it calls :func:`bind`."""
    global _selector
    selector = WakingSelector()
    _selector = selector
    return asyncio.SelectorEventLoop(selector)


def bind(loop: asyncio.AbstractEventLoop) -> None:
    """The calling thread runs ``loop``: its :func:`wake` calls wait for the loop's next sleep."""
    selector = getattr(loop, "_selector", None)
    if isinstance(selector, WakingSelector):
        selector.thread_id = _get_ident()


def unbind(loop: asyncio.AbstractEventLoop) -> None:
    """The loop stopped: wake what it queued, and queue nothing more."""
    selector = getattr(loop, "_selector", None)
    if isinstance(selector, WakingSelector):
        selector.thread_id = None
        selector.wake_all()


def wake(waker: Waker) -> None:
    """Wake ``waker``'s thread: when the loop thread next waits for I/O if called there, at
    once anywhere else."""
    selector = _selector
    if selector is not None and selector.thread_id == _get_ident():
        selector.queued.append(waker)
    else:
        waker.wake()


def wake_each(wakers: list[Waker]) -> None:
    """:func:`wake` for each of ``wakers``, the loop-thread check made once: a publishing thread
    that read a batch of OKs wakes their threads in one pass (no layers per thread: that pass is
    on every one of those threads' way, GIL held)."""
    selector = _selector
    if selector is not None and selector.thread_id == _get_ident():
        selector.queued.extend(wakers)
        return
    for waker in wakers:
        try:
            waker._out.send(b"\0")
        except OSError:  # bytes waiting already (the thread wakes anyway), or closed
            pass
