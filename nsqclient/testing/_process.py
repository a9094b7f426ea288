"""The machinery under :mod:`nsqclient.testing.daemons`: binaries, ports, one daemon's life cycle.

Owns finding the NSQ binaries, picking free ports, a tiny proxy-free HTTP client, and
:class:`Daemon`, the start/wait/stop/kill/restart logic shared by nsqd and nsqlookupd. Nothing
here knows a daemon's flags; the subclasses in ``daemons.py`` do. Standard library only.

(Over 500 lines because :class:`Daemon` is most of it: start, readiness, stop, kill and restart
with their reaping and port-in-use retries are one state machine, kept in one place.)
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

__all__ = [
    "HOST",
    "Daemon",
    "NsqBinaryNotFound",
    "NsqDaemonError",
    "all_daemons",
    "find_nsq_binary",
    "free_port",
    "http_request",
]

HOST = "127.0.0.1"
"""Every daemon listens on, and advertises, this address."""

NSQ_RELEASES = "https://github.com/nsqio/nsq/releases"
POLL_INTERVAL = 0.02  # seconds between readiness probes
_ADDRESS_IN_USE = "address already in use"


class NsqBinaryNotFound(RuntimeError):
    """An NSQ daemon binary (``nsqd``, ``nsqlookupd``) could not be found."""

    def __init__(self, name: str, searched: Sequence[str]) -> None:
        self.name = name
        self.searched = list(searched)
        where = "; ".join(self.searched)
        super().__init__(
            f"NSQ binary {name!r} not found (looked in: {where}). To test against real NSQ, "
            f"install nsqd and nsqlookupd v1.3.0 (release archives at {NSQ_RELEASES} "
            "hold them in bin/) and put them on PATH or set NSQ_BIN_DIR to their folder. "
            "Or use the embedded NSQ server, which needs no binaries: pytest "
            "--nsq-backend=embedded, or NSQCLIENT_BACKEND=embedded."
        )


class NsqDaemonError(RuntimeError):
    """A daemon failed to start, or did not answer in time. ``logs`` holds what it printed."""

    def __init__(self, message: str, logs: str = "") -> None:
        self.logs = logs
        lines = logs.splitlines()
        if len(lines) > 40:  # the first lines say why (usage errors), the last ones what happened
            lines = [*lines[:10], f"... ({len(lines) - 40} lines) ...", *lines[-30:]]
        excerpt = "\n".join(lines)
        super().__init__(f"{message}\n--- daemon output ---\n{excerpt}" if excerpt else message)


def find_nsq_binary(name: str) -> Path:
    """Path of the executable ``name``: ``$NSQ_BIN_DIR``, then PATH. (A source checkout of
    nsqclient points ``$NSQ_BIN_DIR`` at the binaries it builds, from its own test configuration
    and scripts: nothing installed knows a checkout's layout.)

    Raises :class:`NsqBinaryNotFound` (saying where to get the binaries) when none has it.
    """
    searched: list[str] = []
    env_dir = os.environ.get("NSQ_BIN_DIR")
    if env_dir:
        candidate = Path(env_dir) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
        searched.append(f"NSQ_BIN_DIR={env_dir}")
    on_path = shutil.which(name)
    searched.append("PATH")
    if on_path:
        return Path(on_path)
    raise NsqBinaryNotFound(name, searched)


# -- ports -----------------------------------------------------------------------------------------

_issued_ports: set[int] = set()
_port_lock = threading.Lock()
_port_random = random.SystemRandom()  # never the global RNG: tests (and hypothesis) seed that one


def _ephemeral_port_floor() -> int:
    try:
        low = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]
        return int(low)
    except (OSError, ValueError, IndexError):
        return 32768


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


PORT_RANGE_ENV = "NSQCLIENT_PORT_RANGE"
"""``LOW-HIGH``: the ports :func:`free_port` picks from (the pytest plugin gives each xdist
worker a slice of its own, so parallel workers never pick each other's ports)."""


def port_range() -> tuple[int, int]:
    """The inclusive range :func:`free_port` picks from: ``$NSQCLIENT_PORT_RANGE`` when set, else
    10000 up to the kernel's ephemeral range."""
    value = os.environ.get(PORT_RANGE_ENV, "").strip()
    if value:
        low_text, _, high_text = value.partition("-")
        try:
            low, high = int(low_text), int(high_text)
        except ValueError:
            message = f"${PORT_RANGE_ENV}={value!r}: use LOW-HIGH, e.g. 20000-23999"
            raise ValueError(message) from None
        if not 1024 <= low < high <= 65535:
            raise ValueError(f"${PORT_RANGE_ENV}={value!r}: need 1024 <= LOW < HIGH <= 65535")
        return low, high
    return 10000, _ephemeral_port_floor() - 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and not handed out before by this process.

    Ports come from below the kernel's ephemeral range when it leaves room (10000 up to it), so an
    outgoing connection cannot grab the port between this call and the daemon binding it. Another
    process still can: daemons retry with new ports when the bind fails. ``$NSQCLIENT_PORT_RANGE``
    narrows the range (see :func:`port_range`).
    """
    low, high = port_range()
    with _port_lock:
        for _ in range(500):
            port = _port_random.randint(low, high) if high - low >= 1000 else _kernel_port()
            if port not in _issued_ports and _port_is_free(port):
                _issued_ports.add(port)
                return port
    raise OSError("free_port: no free TCP port found on 127.0.0.1")


# -- tiny HTTP client (no proxies from the environment, no third-party dependency) -----------------

UNVERIFIED_TLS = ssl.create_default_context()
UNVERIFIED_TLS.check_hostname = False
UNVERIFIED_TLS.verify_mode = ssl.CERT_NONE


def http_request(
    address: str,
    method: str,
    path: str,
    *,
    params: Mapping[str, str] | None = None,
    body: bytes | None = None,
    tls: ssl.SSLContext | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    """One HTTP request to ``address`` ("host:port"); returns (status, body).

    ``tls`` switches to HTTPS with that context. Raises ``OSError`` when nothing answers.
    """
    host, _, port = address.rpartition(":")
    conn: http.client.HTTPConnection
    if tls is None:
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    else:
        conn = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=tls)
    if params:
        path = f"{path}?{urllib.parse.urlencode(params)}"
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# -- the shared process machinery ------------------------------------------------------------------


class _Runtime:
    """What must be cleaned up even if the daemon object is dropped without ``stop()``."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.owned_dirs: list[Path] = []


def _reap(runtime: _Runtime) -> None:
    proc = runtime.proc
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    runtime.proc = None
    for path in runtime.owned_dirs:
        shutil.rmtree(path, ignore_errors=True)


def _thread_states(pid: int) -> list[str]:
    """The state letter of every thread of ``pid`` (``/proc/<pid>/task/*/stat``)."""
    states = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                states.append(f.read().rpartition(")")[2].split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # a thread that just exited
    return states


def _wait_all_threads_stopped(pid: int, timeout: float) -> None:
    """Block until every thread of ``pid`` is stopped ("T"/"t"). Without ``/proc`` (not Linux)
    there is nothing to look at: SIGSTOP is then trusted after a short grace period."""
    if not os.path.isdir("/proc/self/task"):
        time.sleep(0.05)
        return
    deadline = time.monotonic() + timeout
    while True:
        states = _thread_states(pid)
        if states and all(state in ("T", "t") for state in states):
            return
        if time.monotonic() >= deadline:
            raise NsqDaemonError(f"process {pid} did not stop on SIGSTOP (thread states {states})")
        time.sleep(0.001)


class _PortInUse(Exception):
    pass


_registry: weakref.WeakSet[Daemon] = weakref.WeakSet()


def all_daemons() -> list[Daemon]:
    """Every daemon object of this process still referenced (running or not), for reporting."""
    return list(_registry)


class Daemon:
    """Common life cycle of one NSQ daemon process. Subclasses say which ports and arguments."""

    program: ClassVar[str]

    def __init__(
        self,
        *,
        ports: dict[str, int | None],
        binary: Path | None,
        extra_args: Sequence[str],
        log_path: Path | None,
    ) -> None:
        self._binary = binary if binary is not None else find_nsq_binary(self.program)
        self._fixed_ports = any(p is not None for p in ports.values())
        self._ports: dict[str, int] = {
            name: (port if port is not None else free_port()) for name, port in ports.items()
        }
        self._extra_args = list(extra_args)
        self._runtime = _Runtime()
        self._workdir = Path(tempfile.mkdtemp(prefix=f"{self.program}-"))
        self._runtime.owned_dirs.append(self._workdir)
        self._log_path = log_path if log_path is not None else self._workdir / f"{self.program}.log"
        self._final_logs = b""
        self._frozen = False
        self._finalizer = weakref.finalize(self, _reap, self._runtime)
        _registry.add(self)

    # -- subclass hooks --

    def _args(self) -> list[str]:
        raise NotImplementedError

    def _confirm_identity(self) -> bool | None:
        """After /ping answered: is it our process on that port? None: cannot tell yet."""
        return True

    def _prepare_dirs(self) -> None:
        self._workdir.mkdir(parents=True, exist_ok=True)

    # -- addresses --

    @property
    def tcp_port(self) -> int:
        """The TCP port (chosen at construction, kept across restarts)."""
        return self._ports["tcp"]

    @property
    def http_port(self) -> int:
        """The HTTP port (chosen at construction, kept across restarts)."""
        return self._ports["http"]

    @property
    def tcp_address(self) -> str:
        """``127.0.0.1:<tcp_port>``, for TCP clients."""
        return f"{HOST}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        """``127.0.0.1:<http_port>``, for the HTTP API."""
        return f"{HOST}:{self.http_port}"

    # -- state --

    @property
    def binary(self) -> Path:
        """The executable this daemon runs."""
        return self._binary

    @property
    def log_path(self) -> Path:
        """The file the daemon's output goes to (see :meth:`logs`)."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        """The process id while it runs, else None."""
        proc = self._runtime.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the process is alive (a frozen one included)."""
        return self.pid is not None

    @property
    def args(self) -> list[str]:
        """The full command line the daemon is (or will be) started with."""
        return [str(self._binary), *self._args(), *self._extra_args]

    def logs(self, since: int = 0) -> str:
        """What the daemon printed (all runs, restarts included), from byte offset ``since``
        (see :meth:`log_size`). Still available after ``stop()`` deleted the temporary folder."""
        try:
            with open(self._log_path, "rb") as log:
                log.seek(since)
                data = log.read()
        except OSError:
            data = self._final_logs[since:]
        return data.decode(errors="replace")

    def log_size(self) -> int:
        """Bytes logged so far: remember it, and ``logs(since=...)`` shows only what came after."""
        try:
            return self._log_path.stat().st_size
        except OSError:
            return len(self._final_logs)

    # -- life cycle --

    def start(self, timeout: float = 10.0) -> None:
        """Start the daemon and wait until it answers ``GET /ping``. No-op when already running.

        If the chosen ports were taken meanwhile (and were not given explicitly), retries twice on
        fresh ports. Raises :class:`NsqDaemonError` (with the log tail) on failure or timeout.
        """
        if self.running:
            return
        self._start(timeout, allow_new_ports=not self._fixed_ports)

    def _start(self, timeout: float, *, allow_new_ports: bool) -> None:
        deadline = time.monotonic() + timeout
        attempts = 3 if allow_new_ports else 1
        for attempt in range(1, attempts + 1):
            log_offset = self._launch()
            try:
                self._wait_ready(deadline, log_offset)
                return
            except _PortInUse:
                self._terminate(1.0)
                if attempt == attempts:
                    raise NsqDaemonError(
                        f"{self.program} could not bind its ports ({self._ports})", self.logs()
                    ) from None
                self._ports = {name: free_port() for name in self._ports}
            except BaseException:
                self._terminate(1.0)
                raise

    def _launch(self) -> int:
        self._prepare_dirs()
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        args = self.args
        with open(self._log_path, "ab") as log:
            log.write(f"=== nsqclient.testing: starting {' '.join(args)}\n".encode())
            log.flush()
            offset = log.tell()
            self._runtime.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                start_new_session=True,  # Ctrl-C in the terminal goes to pytest, not the daemons
                close_fds=True,
            )
        return offset

    def _ping(self, timeout: float) -> bool:
        try:
            status, _ = http_request(self.http_address, "GET", "/ping", timeout=timeout)
        except OSError:
            return False
        # 403 is nsqd with --tls-required=true refusing plain HTTP: its listeners are up.
        return status in (200, 403)

    def _wait_ready(self, deadline: float, log_offset: int) -> None:
        proc = self._runtime.proc
        assert proc is not None
        while True:
            code = proc.poll()
            if code is not None:
                if _ADDRESS_IN_USE in self.logs(since=log_offset):
                    raise _PortInUse
                raise NsqDaemonError(
                    f"{self.program} exited with code {code} while starting",
                    self.logs(since=log_offset),
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NsqDaemonError(
                    f"{self.program} did not answer GET /ping on {self.http_address} in time",
                    self.logs(since=log_offset),
                )
            if self._ping(min(remaining, 1.0)) and proc.poll() is None:
                mine = self._confirm_identity()
                if mine:
                    return
                if mine is False:
                    raise _PortInUse  # another process answers on our HTTP port
            time.sleep(min(POLL_INTERVAL, max(remaining, 0.0)))

    def _terminate(self, timeout: float) -> None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Safe in every state (a frozen daemon
        is thawed first: a stopped process cannot handle SIGTERM)."""
        proc = self._runtime.proc
        if proc is None:
            return
        if self._frozen:
            self.thaw()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        self._runtime.proc = None

    # -- freezing (SIGSTOP) --

    @property
    def frozen(self) -> bool:
        """True between :meth:`freeze` and :meth:`thaw` (or the end of the process)."""
        return self._frozen and self.running

    def freeze(self, timeout: float = 10.0) -> None:
        """SIGSTOP the daemon and return once every one of its threads is stopped.

        The kernel still accepts TCP connections and buffers what clients send, but nothing is
        read, answered or heartbeated, and no timer fires, until :meth:`thaw`. ``stop()`` and
        ``restart()`` thaw first; ``kill()`` works on a frozen daemon as SIGKILL does.
        """
        pid = self.pid
        if pid is None:
            raise NsqDaemonError(f"cannot freeze {self!r}: it is not running")
        os.kill(pid, signal.SIGSTOP)
        self._frozen = True
        try:
            _wait_all_threads_stopped(pid, timeout)  # SIGSTOP is asynchronous
        except BaseException:
            self.thaw()
            raise

    def thaw(self) -> None:
        """SIGCONT a frozen daemon. Harmless when it is not frozen or not running."""
        pid = self.pid
        self._frozen = False
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the daemon (SIGTERM, then SIGKILL after ``timeout``) and delete its temporary
        folders. Idempotent, and safe whether it was never started, already died, was killed or
        is frozen (it is thawed first). ``logs()`` keeps working afterwards."""
        try:
            self._terminate(timeout)
        finally:
            with contextlib.suppress(OSError):
                self._final_logs = self._log_path.read_bytes()
            for path in self._runtime.owned_dirs:
                shutil.rmtree(path, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the daemon, as a crash would; its data folder is kept for ``restart()``.
        A frozen daemon dies without running again."""
        proc = self._runtime.proc
        self._frozen = False
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self._runtime.proc = None

    def restart(self, timeout: float = 10.0) -> None:
        """Stop (gracefully, if it runs) and start again on the same ports and data folder."""
        self._terminate(5.0)
        self._start(timeout, allow_new_ports=False)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<{type(self).__name__} tcp={self.tcp_address} http={self.http_address} {state}>"

    # -- HTTP helpers --

    def _http_tls(self) -> ssl.SSLContext | None:
        return None

    def _http_address_for_api(self) -> str:
        return self.http_address

    def http_get_json(
        self, path: str, params: Mapping[str, str] | None = None, *, timeout: float = 5.0
    ) -> Any:
        """GET ``path`` on the daemon's HTTP API; returns the decoded JSON (raises on non-200)."""
        status, body = http_request(
            self._http_address_for_api(),
            "GET",
            path,
            params=params,
            tls=self._http_tls(),
            timeout=timeout,
        )
        if status != 200:
            raise NsqDaemonError(f"GET {path} -> {status} {body!r}")
        return json.loads(body) if body else None

    def http_post(
        self,
        path: str,
        body: bytes = b"",
        params: Mapping[str, str] | None = None,
        *,
        timeout: float = 5.0,
    ) -> bytes:
        """POST to the daemon's HTTP API; returns the body (raises on non-200)."""
        status, reply = http_request(
            self._http_address_for_api(),
            "POST",
            path,
            params=params,
            body=body,
            tls=self._http_tls(),
            timeout=timeout,
        )
        if status != 200:
            raise NsqDaemonError(f"POST {path} -> {status} {reply!r}")
        return reply
