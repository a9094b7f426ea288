"""Blocking wrappers that run an embedded daemon on its own event-loop thread.

For synchronous tests and fixtures: ``ThreadedEmbeddedNsqd(...).start()`` returns once it listens;
``stop()``, ``kill()``, ``restart()`` block until done; ``logs()`` and the address properties can
be read from any thread. The same names as the ``NsqdProcess`` helper, so a fixture can swap them.

``freeze()`` is the embedded SIGSTOP: it parks the server's loop thread in a blocking wait, so the
server reads nothing, writes nothing and runs no timer (no heartbeats, no replies, no message
timeouts) until ``thaw()``, while the kernel keeps accepting connections and buffering what
clients send, exactly as for a stopped process.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Collection, Coroutine, Mapping
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx

from ..daemons import LookupdHTTPConveniences, NsqDaemonError, NsqdHTTPConveniences
from .lookupd import EmbeddedLookupd
from .nsqd import EmbeddedNsqd

__all__ = [
    "ThreadedEmbeddedCluster",
    "ThreadedEmbeddedLookupd",
    "ThreadedEmbeddedNsqd",
    "all_threaded_servers",
]

_T = TypeVar("_T")
_S = TypeVar("_S", EmbeddedNsqd, EmbeddedLookupd)
_TIMEOUT = 30.0

_registry: weakref.WeakSet[_Threaded[Any]] = weakref.WeakSet()


def all_threaded_servers() -> list[_Threaded[Any]]:
    """Every threaded embedded server of this process still referenced (for failure reports)."""
    return list(_registry)


class _FreezeGate:
    """Parks a loop thread: :meth:`hold` runs as a loop callback and blocks until released."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self._released = threading.Event()
        self._on_release: Callable[[], None] | None = None

    def hold(self) -> None:
        self.holding.set()
        self._released.wait()
        if self._on_release is not None:
            self._on_release()  # still before the loop looks at any socket or timer

    def release(self, then: Callable[[], None] | None = None) -> None:
        self._on_release = then
        self._released.set()


class _Threaded(Generic[_S]):
    server: _S

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._gate: _FreezeGate | None = None
        _registry.add(self)

    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float = _TIMEOUT) -> _T:
        if self._loop is None or threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the embedded server is not running on its own thread here")
        if self._gate is not None:
            coro.close()
            raise RuntimeError(f"{self!r} is frozen: thaw() it first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- freezing (the embedded SIGSTOP) --

    @property
    def frozen(self) -> bool:
        """True between :meth:`freeze` and :meth:`thaw`."""
        return self._gate is not None

    def freeze(self, timeout: float = _TIMEOUT) -> None:
        """Stop the server's loop thread dead; returns once it is parked.

        Like SIGSTOP on nsqd: connections are still accepted by the kernel and what clients send
        is buffered, but nothing is read, answered or heartbeated and no timer fires until
        :meth:`thaw` (timers that came due meanwhile fire then). ``stop()`` and ``restart()``
        thaw first; ``kill()`` drops every connection without running anything else, as SIGKILL
        does to a stopped process. HTTP helpers (``stats()``, ``pub()``) hang while frozen, as
        they would against a stopped nsqd.
        """
        if self._loop is None or not self.running:
            raise NsqDaemonError(f"cannot freeze {self!r}: it is not running")
        if threading.current_thread() is self._thread:
            raise RuntimeError("freeze() called from the server's own loop thread")
        if self._gate is not None:
            return
        gate = _FreezeGate()
        self._loop.call_soon_threadsafe(gate.hold)
        if not gate.holding.wait(timeout):
            gate.release()
            raise NsqDaemonError(f"{self!r}: its loop thread did not park within {timeout}s")
        self._gate = gate

    def thaw(self) -> None:
        """Let a frozen server run again. Harmless when it is not frozen."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.release()

    def _thaw_into_kill(self) -> None:
        """Release a frozen loop so that its first act is dropping every socket."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.release(then=self.server.drop_everything)

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        loop = self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        name = f"embedded-{type(self.server).__name__.removeprefix('Embedded').lower()}"
        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        ready.wait(_TIMEOUT)

    def _end_thread(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._call(_cancel_others())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_TIMEOUT)
        self._loop = self._thread = None

    def start(self, timeout: float = _TIMEOUT) -> Self:
        """Start listening; returns once it accepts connections. No-op when running."""
        self._ensure_thread()
        self._call(self.server.start(), timeout)
        return self

    def stop(self, timeout: float = _TIMEOUT) -> None:
        """Clean exit, then the loop thread ends. Idempotent; a frozen server is thawed first."""
        self.thaw()
        if self._thread is None:
            return
        self._call(self.server.stop(), timeout)
        self._end_thread()

    def kill(self) -> None:
        """Drop every connection abruptly and stop, as SIGKILL would (even when frozen: then
        nothing buffered meanwhile is read or answered)."""
        self._thaw_into_kill()
        if self._thread is None:
            return
        self._call(self.server.kill())
        self._end_thread()

    def restart(self, timeout: float = _TIMEOUT) -> None:
        """Clean exit and start on the same ports (after ``kill()``: just start again). A frozen
        server is thawed first."""
        self.thaw()
        if self._thread is None:
            self.start(timeout)
            return
        self._call(self.server.restart(), timeout)

    def logs(self, since: int = 0) -> str:
        """Recent log lines, from offset ``since`` (see :meth:`log_size`)."""
        return self.server.logs(since)

    def log_size(self) -> int:
        """Bytes logged so far: pass it to ``logs(since=...)`` later to see only what came after."""
        return self.server.log_size()

    @property
    def running(self) -> bool:
        """True while the server runs (started, and not stopped or killed since)."""
        return self.server.running

    @property
    def tcp_address(self) -> str:
        """``host:port`` for TCP clients."""
        return self.server.tcp_address

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP API."""
        return self.server.http_address

    @property
    def tcp_port(self) -> int:
        """The TCP port (the real one once started, if 0 was asked for)."""
        return self.server.tcp_port

    @property
    def http_port(self) -> int:
        """The HTTP port (the real one once started, if 0 was asked for)."""
        return self.server.http_port

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run a coroutine on the server's loop (to inspect or change its state safely)."""
        return self._call(coro)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = ("frozen" if self.frozen else "running") if self.running else "stopped"
        return f"<{type(self).__name__} tcp={self.tcp_address} http={self.http_address} {state}>"


async def _cancel_others() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(0)  # let the transports closed by those tasks close their sockets


class ThreadedEmbeddedNsqd(_Threaded[EmbeddedNsqd], NsqdHTTPConveniences):
    """:class:`EmbeddedNsqd` with blocking ``start/stop/kill/restart``; same arguments.

    Also the HTTP conveniences of ``NsqdProcess``: :meth:`stats`, :meth:`pub`,
    :meth:`http_get_json` (over HTTPS when plain HTTP is refused by ``tls_required=True``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.server = EmbeddedNsqd(*args, **kwargs)

    @property
    def https_port(self) -> int | None:
        """The HTTPS port, or None when TLS is not configured."""
        return self.server.https_port

    @property
    def https_address(self) -> str | None:
        """``host:port`` of the HTTPS API, or None when TLS is not configured."""
        return self.server.https_address

    @property
    def tls_enabled(self) -> bool:
        """True when the server has a TLS certificate (TLS and HTTPS are on)."""
        return self.server.tls_context is not None

    def _base_url(self) -> str:
        if self.server.options.tls_required is True and self.server.https_address:
            return f"https://{self.server.https_address}"
        return f"http://{self.server.http_address}"

    def http_get_json(
        self, path: str, params: Mapping[str, str] | None = None, *, timeout: float = 5.0
    ) -> Any:
        """GET ``path`` on the HTTP API; the decoded JSON (NsqDaemonError on a non-200)."""
        with httpx.Client(verify=False, timeout=timeout) as client:
            response = client.get(self._base_url() + path, params=params)
        if response.status_code != 200:
            raise NsqDaemonError(f"GET {path} -> {response.status_code} {response.content!r}")
        return response.json() if response.content else None

    def http_post(
        self,
        path: str,
        body: bytes = b"",
        params: Mapping[str, str] | None = None,
        *,
        timeout: float = 5.0,
    ) -> bytes:
        """POST to the HTTP API; the reply body (NsqDaemonError on a non-200)."""
        with httpx.Client(verify=False, timeout=timeout) as client:
            response = client.post(self._base_url() + path, params=params, content=body)
        if response.status_code != 200:
            raise NsqDaemonError(f"POST {path} -> {response.status_code} {response.content!r}")
        return response.content


class ThreadedEmbeddedLookupd(_Threaded[EmbeddedLookupd], LookupdHTTPConveniences):
    """:class:`EmbeddedLookupd` with blocking ``start/stop/kill/restart``; same arguments.

    Also ``NsqlookupdProcess``'s :meth:`nodes`, :meth:`lookup` and :meth:`wait_for_nodes`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.server = EmbeddedLookupd(*args, **kwargs)

    def http_get_json(
        self, path: str, params: Mapping[str, str] | None = None, *, timeout: float = 5.0
    ) -> Any:
        """GET ``path`` on the HTTP API; the decoded JSON (NsqDaemonError on a non-200)."""
        response = httpx.get(
            f"http://{self.server.http_address}{path}", params=params, timeout=timeout
        )
        if response.status_code != 200:
            raise NsqDaemonError(f"GET {path} -> {response.status_code} {response.content!r}")
        return response.json()

    def wait_for_nodes(self, tcp_addresses: Collection[str], timeout: float = 10.0) -> None:
        """Wait until every nsqd in ``tcp_addresses`` ("host:port") is listed by ``/nodes``."""
        wanted = set(tcp_addresses)

        async def wait() -> None:
            while True:
                seen = {
                    f"{p.peer.broadcast_address}:{p.peer.tcp_port}"
                    for p in self.server.db.find_producers("client", "", "")
                }
                if wanted <= seen:
                    return
                await asyncio.sleep(0.01)

        try:
            self._call(asyncio.wait_for(wait(), timeout), timeout + 1)
        except TimeoutError:
            raise TimeoutError(f"lookupd still misses some of {sorted(wanted)}") from None


class ThreadedEmbeddedCluster:
    """An embedded nsqlookupd and ``nsqd_count`` embedded nsqd registered with it, like the
    ``NsqCluster`` helper: ``start()`` returns once lookupd lists every nsqd."""

    def __init__(self, nsqd_count: int = 3, **nsqd_kwargs: Any) -> None:
        self.lookupd = ThreadedEmbeddedLookupd()
        self.nsqds: list[ThreadedEmbeddedNsqd] = []
        self._nsqd_count = nsqd_count
        self._nsqd_kwargs = nsqd_kwargs

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        """Every nsqd's ``host:port`` for TCP clients, in start order."""
        return [n.tcp_address for n in self.nsqds]

    @property
    def nsqd_http_addresses(self) -> list[str]:
        """Every nsqd's HTTP ``host:port``, in start order."""
        return [n.http_address for n in self.nsqds]

    @property
    def daemons(self) -> list[ThreadedEmbeddedLookupd | ThreadedEmbeddedNsqd]:
        """The lookupd then every nsqd (a new list)."""
        return [self.lookupd, *self.nsqds]

    def start(self, timeout: float = _TIMEOUT) -> Self:
        """Start lookupd, then each nsqd, and return once lookupd lists them all; returns itself.

        ``timeout`` is in seconds, per step. On failure everything started is stopped and the error
        is re-raised.
        """
        try:
            self.lookupd.start(timeout)
            while len(self.nsqds) < self._nsqd_count:
                nsqd = ThreadedEmbeddedNsqd(
                    lookupd_tcp_addresses=[self.lookupd.tcp_address], **self._nsqd_kwargs
                )
                self.nsqds.append(nsqd)
                nsqd.start(timeout)
            self.lookupd.wait_for_nodes(self.nsqd_tcp_addresses, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = _TIMEOUT) -> None:
        """Stop every server, nsqd first (``timeout`` seconds each)."""
        for daemon in reversed(self.daemons):
            daemon.stop(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
