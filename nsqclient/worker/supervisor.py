"""The supervisor: keeps N children running, replaces the dead and the recycled, stops them all.

One thread, one :mod:`selectors` loop (as gunicorn's arbiter): the children's links, the signal
wake-up socket and the health server's sockets are its only inputs, so nothing it does can race
and a fork never copies a lock another thread holds. It opens no NSQ connection and starts no
event loop or loop thread: every connection is a child's own.

Children are forked from this process after the handler's module was imported (see
:mod:`nsqclient.worker` for the measurements behind fork over spawn). Signals are blocked
across each fork so one sent meanwhile waits for the child's own handlers; the child closes
every descriptor of the supervisor's before doing anything else.

Signals (to the supervisor; a process manager may send the first two to the whole process
group too, which the children handle the same way):

* SIGTERM, SIGINT: graceful stop. Each child gets SIGTERM (its Readers' graceful close) and
  ``close_timeout`` plus :data:`STOP_GRACE` seconds before SIGKILL; the supervisor returns once
  all have exited. A second SIGINT (or SIGQUIT at any time) stops at once: SIGQUIT to each
  child (the immediate close, a best-effort REQ of everything unanswered), SIGKILL after
  :data:`QUIT_GRACE`.
* SIGHUP: replace every child gracefully (each replacement first, as in recycling).
* SIGTTIN, SIGTTOU: one child more, one fewer.

A child that dies unexpectedly is replaced: at once the first time, then after 2, 4, 8, 16,
30 seconds while its successors keep dying within :data:`BACKOFF_RESET` seconds. One that dies
before its Reader started is a start-up failure; :attr:`~.options.WorkerOptions.max_start_failures`
of those in a row end the supervisor with :class:`~nsqclient.errors.WorkerError`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import selectors
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..aio.signals import signal_name
from ..errors import WorkerError
from .child import run_child
from .health import HealthServer, Reply, sum_stats
from .link import Link
from .options import WorkerOptions

__all__ = [
    "BACKOFF",
    "BACKOFF_RESET",
    "EXIT_FORCED",
    "QUIT_GRACE",
    "STOP_GRACE",
    "UNHEALTHY_AFTER",
    "Supervisor",
]

log = logging.getLogger("nsqclient.worker")

#: seconds between a child's death and its replacement, by how many of the slot's children
#: died in a row (each within BACKOFF_RESET of its start)
BACKOFF = (0.0, 2.0, 4.0, 8.0, 16.0, 30.0)
BACKOFF_RESET = 30.0
#: seconds past ``close_timeout`` a stopping child gets before SIGKILL
STOP_GRACE = 5.0
#: seconds a child told to stop at once (SIGQUIT) gets before SIGKILL
QUIT_GRACE = 2.0
#: seconds a slot may stay empty before ``/healthz`` answers 503 (a replacement is forked at
#: once, so only a backoff or a failing fork leaves one empty this long)
UNHEALTHY_AFTER = 1.0
#: seconds a recycled child keeps its connections while its replacement is not ready yet
RECYCLE_WAIT = 10.0
#: seconds ``/stats`` waits for the children's answers (a child that has not answered is
#: shown with its last stats, marked stale)
STATS_WAIT = 2.0
#: the exit status after a stop that had to kill a child (its messages wait for nsqd's
#: msg_timeout)
EXIT_FORCED = 1

_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGCHLD,
)


class Proc:
    """One child process, as the supervisor sees it."""

    def __init__(self, index: int, pid: int, link: Link) -> None:
        self.index = index
        self.pid = pid
        self.link = link
        self.born = time.monotonic()
        self.started = False  # its Reader started (it reported so)
        self.ready = False  # it has a connection to nsqd now
        self.retiring = False  # recycled, replaced (SIGHUP) or removed (SIGTTOU)
        self.retire_by = 0.0  # stopped then even if its replacement is not ready
        self.stop_sent = False
        self.kill_at: float | None = None
        self.stats: dict[str, Any] | None = None  # its last answer to a stats question

    def view(self, now: float) -> dict[str, Any]:
        return {
            "index": self.index,
            "pid": self.pid,
            "started": self.started,
            "ready": self.ready,
            "retiring": self.retiring,
            "uptime": round(now - self.born, 3),
        }


class Slot:
    """A place for one child; ``processes`` of them."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Proc | None = None
        self.empty_since: float | None = time.monotonic()
        self.deaths = 0  # children of this slot that died in a row, soon after their start
        self.spawned = 0  # children started in it (all but the first replaced another)
        self.restart_at: float | None = 0.0


class _StatsWait:
    def __init__(self, ident: int, reply: Reply, waiting: set[int], deadline: float) -> None:
        self.ident = ident
        self.reply = reply
        self.waiting = waiting
        self.deadline = deadline


class Supervisor:
    """Runs ``options.processes`` children until stopped. :meth:`run` is the whole life."""

    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.slots = [Slot(i) for i in range(options.processes)]
        self.procs: dict[int, Proc] = {}  # pid -> every child alive (retiring ones too)
        self.stopping = False
        self.quitting: int | None = None  # the signal that asked to stop at once
        self.restarts = 0  # children started in place of another (crashes and recycling)
        self.crashes = 0
        self.recycled = 0
        self.killed = 0
        self.start_failures = 0  # in a row
        self.failure: WorkerError | None = None
        self.started_at = time.monotonic()
        self._signals: deque[int] = deque()
        self._stats_id = 0
        self._stats_waits: list[_StatsWait] = []
        self._close_timeout = options.config.sec.close_timeout
        self.selector = selectors.DefaultSelector()
        self.health: HealthServer | None = None
        self._frozen = False
        self._said_memory = False

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Start the children and supervise them until stopped; the exit status (0: stopped
        gracefully; :data:`EXIT_FORCED`; 128 + the signal after a stop at once). Raises
        WorkerError when children keep dying at start-up. Main thread only."""
        if threading.current_thread() is not threading.main_thread():
            raise WorkerError("the worker supervisor handles signals: run it in the main thread")
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        self._wake = (wake_r, wake_w)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _SIGNALS}
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        try:
            self.selector.register(wake_r, selectors.EVENT_READ, self._drain_wake)
            if self.options.health_address is not None:
                self.health = HealthServer(
                    self.options.health_address, self.selector, self._respond
                )
            self._announce()
            while self.procs or not self.stopping:
                self._turn()
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.health is not None:
                self.health.close()
            self.selector.close()
            wake_r.close()
            wake_w.close()
        if self.failure is not None:
            raise self.failure
        if self.quitting is not None:
            return 128 + self.quitting
        return EXIT_FORCED if self.killed else 0

    def _announce(self) -> None:
        others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
        if others:
            log.warning(
                "the supervisor has other threads (%s): a fork copies none of them, and any "
                "lock one holds stays held in the children; start them in each child instead "
                "(init=, --init)",
                ", ".join(others),
            )
        health = f"; health on {self.health.url}" if self.health is not None else ""
        log.info("nsqclient worker: %s%s", self.options.describe(), health)

    def _turn(self) -> None:
        now = time.monotonic()
        for key, mask in self.selector.select(self._next_timeout(now)):
            key.data(mask)
        while self._signals:
            self._on_signal_received(self._signals.popleft())
        self._reap()
        self._timers(time.monotonic())

    def _next_timeout(self, now: float) -> float:
        times = [now + 1.0]
        if not self.stopping:
            times += [s.restart_at for s in self.slots if s.restart_at is not None]
            times += [p.retire_by for p in self.procs.values() if p.retiring and not p.stop_sent]
        times += [p.kill_at for p in self.procs.values() if p.kill_at is not None]
        times += [w.deadline for w in self._stats_waits]
        if any(p.link.pending for p in self.procs.values()):
            times.append(now + 0.05)
        return max(0.0, min(times) - now)

    def _timers(self, now: float) -> None:
        if not self.stopping:
            for slot in self.slots:
                if slot.restart_at is not None and slot.restart_at <= now:
                    self._spawn(slot)
            for proc in list(self.procs.values()):
                if proc.retiring and not proc.stop_sent:
                    current = self.slots[proc.index].proc if proc.index < len(self.slots) else None
                    ready = current is not None and current.ready
                    if ready or now >= proc.retire_by:
                        log.info(
                            "worker %d: %s; stopping pid %d",
                            proc.index,
                            f"pid {current.pid} is ready"
                            if ready and current is not None
                            else f"no successor ready within {RECYCLE_WAIT:g}s",
                            proc.pid,
                        )
                        self._terminate(proc, now)
        for proc in list(self.procs.values()):
            proc.link.flush()
            if proc.kill_at is not None and now >= proc.kill_at:
                log.warning(
                    "worker %d (pid %d) did not stop within %s: killed (SIGKILL); its "
                    "unfinished messages come back from nsqd after their msg_timeout",
                    proc.index,
                    proc.pid,
                    "the quit grace" if self.quitting else "close_timeout plus the grace",
                )
                self.killed += 1
                proc.kill_at = None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        for wait in [w for w in self._stats_waits if now >= w.deadline]:
            self._answer_stats(wait)
        if self.health is not None:
            self.health.expire(now)

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)  # acted on by the loop (the wake-up fd woke it)

    def _drain_wake(self, mask: int) -> None:
        with contextlib.suppress(OSError):
            while self._wake[0].recv(4096):
                pass

    def _on_signal_received(self, signum: int) -> None:
        if signum == signal.SIGCHLD:
            return  # reaped after every turn
        name = signal_name(signum)
        if signum == signal.SIGQUIT or (signum == signal.SIGINT and self.stopping):
            if self.quitting is None:
                self._quit(signum)
        elif signum in (signal.SIGTERM, signal.SIGINT):
            if not self.stopping:
                log.info(
                    "%s received: stopping %d children gracefully (close_timeout %gs)",
                    name,
                    len(self.procs),
                    self._close_timeout,
                )
                self._stop_all()
        elif self.stopping:
            return
        elif signum == signal.SIGHUP:
            log.info("SIGHUP received: replacing every child gracefully")
            for slot in self.slots:
                if slot.proc is not None:
                    self._replace(slot, slot.proc, "SIGHUP")
        elif signum == signal.SIGTTIN:
            self.slots.append(Slot(len(self.slots)))
            log.info("SIGTTIN received: %d processes", len(self.slots))
        elif signum == signal.SIGTTOU and len(self.slots) > 1:
            slot = self.slots.pop()
            log.info("SIGTTOU received: %d processes", len(self.slots))
            if slot.proc is not None:
                slot.proc.retiring = True
                self._terminate(slot.proc, time.monotonic())

    def _stop_all(self) -> None:
        self.stopping = True
        now = time.monotonic()
        for slot in self.slots:
            slot.restart_at = None
        for proc in self.procs.values():
            if not proc.stop_sent:
                self._terminate(proc, now)

    def _quit(self, signum: int) -> None:
        self.stopping = True
        self.quitting = signum
        log.warning(
            "%s received: stopping %d children at once (unanswered messages are handed back "
            "as far as possible)",
            signal_name(signum),
            len(self.procs),
        )
        deadline = time.monotonic() + QUIT_GRACE
        for slot in self.slots:
            slot.restart_at = None
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGQUIT)
            proc.stop_sent = True
            proc.kill_at = min(proc.kill_at or deadline, deadline)

    def _terminate(self, proc: Proc, now: float) -> None:
        proc.stop_sent = True
        proc.kill_at = now + self._close_timeout + STOP_GRACE
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)

    # ------------------------------------------------------------------ children

    def _spawn(self, slot: Slot) -> None:
        slot.restart_at = None
        parent_end, child_end = socket.socketpair()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        if not self._frozen:
            # what the import made stays out of the children's collections, so their pages stay
            # shared (the gc module's advice for fork without exec); once: whatever cyclic
            # garbage the supervisor makes later must stay collectable
            gc.freeze()
            self._frozen = True
        try:
            pid = os.fork()
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            parent_end.close()
            child_end.close()
            log.error("cannot start worker %d: %s; trying again in 1s", slot.index, exc)
            slot.restart_at = time.monotonic() + 1.0
            return
        if pid == 0:  # the child: never returns
            run_child(self.options, slot.index, child_end, self._forget(parent_end), blocked)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        child_end.close()
        proc = Proc(slot.index, pid, Link(parent_end))
        self.procs[pid] = proc
        self.selector.register(proc.link.sock, selectors.EVENT_READ, self._reader_for(proc))
        if slot.spawned:
            self.restarts += 1
        slot.spawned += 1
        slot.proc = proc
        slot.empty_since = None
        log.debug("worker %d started: pid %d", slot.index, pid)

    def _forget(self, own: socket.socket) -> Callable[[], None]:
        """What a child calls first: close every descriptor of the supervisor's it inherited
        (only this process's copies; the supervisor's stay open)."""

        def forget() -> None:
            own.close()
            self.selector.close()  # the epoll descriptor only: no registration is changed
            for sock in self._wake:
                sock.close()
            if self.health is not None:
                for sock in self.health.sockets():
                    sock.close()
            for proc in self.procs.values():
                proc.link.sock.close()
            self.procs = {}

        return forget

    def _reader_for(self, proc: Proc) -> Callable[[int], None]:
        return lambda mask: self._on_link(proc)

    def _on_link(self, proc: Proc) -> None:
        messages = proc.link.receive()
        if messages is None:  # it died (or is dying): waitpid says how
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(proc.link.sock)
            self._reap()
            return
        for message in messages:
            kind = message.get("t")
            if kind == "started":
                proc.started = True
                self.start_failures = 0
            elif kind == "ready":
                proc.ready = bool(message.get("ok"))
                log.log(
                    logging.INFO if proc.ready else logging.WARNING,
                    "worker %d (pid %d) %s",
                    proc.index,
                    proc.pid,
                    "is ready" if proc.ready else "has no connection to nsqd now",
                )
            elif kind == "recycle":
                slot = self.slots[proc.index] if proc.index < len(self.slots) else None
                if slot is not None and slot.proc is proc and not self.stopping:
                    self.recycled += 1
                    if message.get("at_start") and not self._said_memory:
                        self._said_memory = True
                        log.warning(
                            "worker %d was above --max-memory-per-child at its first look, a "
                            "second after it started: every child will be replaced that often; "
                            "raise the limit",
                            proc.index,
                        )
                    self._replace(slot, proc, str(message.get("reason")))
            elif kind == "stats":
                proc.stats = message
                for wait in list(self._stats_waits):
                    if wait.ident == message.get("id"):
                        wait.waiting.discard(proc.pid)
                        if not wait.waiting:
                            self._answer_stats(wait)

    def _replace(self, slot: Slot, proc: Proc, why: str) -> None:
        """Start ``proc``'s replacement now; ``proc`` is stopped once that one is ready."""
        log.info("worker %d (pid %d) is replaced (%s): starting its successor", proc.index,
                 proc.pid, why)  # fmt: skip
        proc.retiring = True
        proc.retire_by = time.monotonic() + RECYCLE_WAIT
        slot.proc = None
        self._spawn(slot)

    def _reap(self) -> None:
        if os.getpid() == 1:  # a container's init: orphans are ours to reap too
            self._reap_all()
            return
        for pid in list(self.procs):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == pid:
                self._exited(self.procs.pop(pid), status)

    def _reap_all(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            proc = self.procs.pop(pid, None)
            if proc is not None:
                self._exited(proc, status)

    def _exited(self, proc: Proc, status: int) -> None:
        now = time.monotonic()
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(proc.link.sock)
        proc.link.close()
        for wait in list(self._stats_waits):
            wait.waiting.discard(proc.pid)
            if not wait.waiting:
                self._answer_stats(wait)
        cause = describe_exit(status)
        lived = now - proc.born
        slot = self.slots[proc.index] if proc.index < len(self.slots) else None
        if slot is not None and slot.proc is proc:
            slot.proc = None
            slot.empty_since = now
        if self.stopping or proc.retiring:
            level = logging.INFO if status == 0 else logging.WARNING
            log.log(level, "worker %d (pid %d) %s", proc.index, proc.pid, cause)
            return
        if slot is None or slot.proc is not None:
            return
        if not proc.started:
            self.start_failures += 1
            log.error(
                "worker %d (pid %d) %s during start-up (%d in a row)",
                proc.index,
                proc.pid,
                cause,
                self.start_failures,
            )
            if self.start_failures >= self.options.max_start_failures:
                self._give_up(cause)
                return
        else:
            self.crashes += 1
            log.warning(
                "worker %d (pid %d) %s after %.1fs: replacing it; the messages it had "
                "not answered come back from nsqd (after their msg_timeout)",
                proc.index,
                proc.pid,
                cause,
                lived,
            )
        if lived >= BACKOFF_RESET:
            slot.deaths = 0
        delay = BACKOFF[min(slot.deaths, len(BACKOFF) - 1)]
        slot.deaths += 1
        slot.restart_at = now + delay
        if delay:
            log.warning("worker %d restarts in %gs (%d deaths in a row)", slot.index, delay,
                        slot.deaths)  # fmt: skip

    def _give_up(self, cause: str) -> None:
        self.failure = WorkerError(
            f"worker processes died during start-up {self.start_failures} times in a row (the "
            f"last {cause}); the log above says why. Stopping the worker."
        )
        log.error("%s", self.failure)
        self._stop_all()

    # ------------------------------------------------------------------ health and stats

    def _respond(self, path: str, reply: Reply) -> None:
        if path == "/healthz":
            reply(*self.healthz())
        elif path == "/readyz":
            reply(*self.readyz())
        elif path == "/stats":
            self._ask_stats(reply)
        else:
            reply(404, {"error": f"no {path}: /healthz, /readyz or /stats"})

    def healthz(self) -> tuple[int, dict[str, Any]]:
        """200 while every slot has a child (or got one back within UNHEALTHY_AFTER), else
        503; the stop counts as healthy (the supervisor is doing its job)."""
        now = time.monotonic()
        empty = [
            s.index
            for s in self.slots
            if s.proc is None
            and s.empty_since is not None
            and now - s.empty_since > UNHEALTHY_AFTER
        ]
        status = "stopping" if self.stopping else "unhealthy" if empty else "ok"
        document = {
            "status": status,
            "pid": os.getpid(),
            "processes": sum(1 for s in self.slots if s.proc is not None),
            "expected": len(self.slots),
            "restarts": self.restarts,
            "crashes": self.crashes,
            "recycled": self.recycled,
            "start_failures_in_a_row": self.start_failures,
            "empty_slots": empty,
            "uptime": round(now - self.started_at, 3),
            "children": [p.view(now) for p in sorted(self.procs.values(), key=_order)],
        }
        return (503 if status == "unhealthy" else 200), document

    def readyz(self) -> tuple[int, dict[str, Any]]:
        """200 once every slot's child has a connection to nsqd (while one is replaced, the
        one it replaces stands in for it), and not stopping."""
        ready_slots = []
        for slot in self.slots:
            procs = [p for p in self.procs.values() if p.index == slot.index]
            if any(p.ready and (p is slot.proc or not p.stop_sent) for p in procs):
                ready_slots.append(slot.index)
        ready = not self.stopping and len(ready_slots) == len(self.slots)
        document = {
            "ready": ready,
            "stopping": self.stopping,
            "ready_processes": len(ready_slots),
            "expected": len(self.slots),
        }
        return (200 if ready else 503), document

    def _ask_stats(self, reply: Reply) -> None:
        self._stats_id += 1
        ident = self._stats_id
        waiting = {p.pid for p in self.procs.values() if p.link.send("stats", id=ident)}
        wait = _StatsWait(ident, reply, waiting, time.monotonic() + STATS_WAIT)
        if waiting:
            self._stats_waits.append(wait)
        else:
            self._answer_stats(wait)

    def _answer_stats(self, wait: _StatsWait) -> None:
        if wait in self._stats_waits:
            self._stats_waits.remove(wait)
        now = time.monotonic()
        children = []
        for proc in sorted(self.procs.values(), key=_order):
            answer = proc.stats or {}
            entry = proc.view(now)
            entry["stale"] = answer.get("id") != wait.ident
            entry["rss_bytes"] = answer.get("rss")
            entry["stats"] = answer.get("stats")
            children.append(entry)
        total = sum_stats(c["stats"] for c in children if c["stats"])
        wait.reply(200, {"processes": len(children), "total": total, "children": children})


def _order(proc: Proc) -> tuple[int, float]:
    return proc.index, proc.born


def describe_exit(status: int) -> str:
    """``exited with code 1``, ``was killed by SIGKILL (9)`` (with the OOM killer's hint)."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return "exited" if code == 0 else f"exited with code {code}"
    sig = -code
    text = f"was killed by {signal_name(sig)} ({sig})"
    if sig == signal.SIGKILL:
        text += " (kill -9, or the kernel's OOM killer: see dmesg)"
    return text
