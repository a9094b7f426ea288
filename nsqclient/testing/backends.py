"""Choosing between real NSQ daemons and the embedded ones, and starting either the same way.

Both backends have the same surface (:class:`NsqdServer`, :class:`LookupdServer`): addresses,
``start/stop/kill/restart``, ``freeze/thaw``, ``logs()``, ``stats()``, ``pub()``. This module owns
the choice (``"real"``, ``"embedded"``, or ``"auto"``: real when the binaries can be found, see
:func:`~nsqclient.testing.daemons.find_nsq_binary`) and the factories the pytest plugin and
nsqclient's own fixtures share::

    nsqd = start_nsqd("auto", extra_args=["--msg-timeout=5s"])
    try:
        ...  # nsqd.tcp_address, nsqd.stats(), nsqd.freeze() ...
    finally:
        nsqd.stop()
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ._process import NsqBinaryNotFound, all_daemons, find_nsq_binary
from .daemons import DEFAULT_MEM_QUEUE_SIZE, NsqCluster, NsqdProcess, NsqlookupdProcess

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "Backend",
    "ClusterServer",
    "LookupdServer",
    "NsqdServer",
    "all_servers",
    "real_binaries_available",
    "resolve_backend",
    "start_cluster",
    "start_lookupd",
    "start_nsqd",
]

Backend = Literal["real", "embedded"]
BACKENDS: tuple[Backend, ...] = ("real", "embedded")
BACKEND_ENV = "NSQCLIENT_BACKEND"
"""Environment variable naming the backend: ``real``, ``embedded`` or ``auto`` (the default)."""


@runtime_checkable
class Server(Protocol):
    """What every daemon offers, real or embedded."""

    @property
    def tcp_address(self) -> str:
        """``host:port`` for TCP clients (Readers, Writers)."""

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP API."""

    @property
    def tcp_port(self) -> int:
        """The TCP port."""

    @property
    def http_port(self) -> int:
        """The HTTP port."""

    @property
    def running(self) -> bool:
        """True while the daemon runs (started, and not stopped or killed since)."""

    @property
    def frozen(self) -> bool:
        """True between :meth:`freeze` and :meth:`thaw`."""

    def stop(self, timeout: float = ...) -> None:
        """Stop it (``timeout`` seconds for a clean shutdown) and free its resources. Idempotent."""

    def kill(self) -> None:
        """Stop it abruptly, as a crash would (connections reset, nothing flushed); restartable."""

    def restart(self, timeout: float = ...) -> None:
        """Stop (if running) and start again on the same ports; waits up to ``timeout`` seconds."""

    def freeze(self, timeout: float = ...) -> None:
        """Stop reading, answering and heartbeating until :meth:`thaw`, as a hung server would.

        Connections stay open. Returns once frozen (within ``timeout`` seconds).
        """

    def thaw(self) -> None:
        """Resume a frozen daemon. Harmless when it is not frozen."""

    def logs(self, since: int = 0) -> str:
        """What the daemon logged, from byte offset ``since`` (see :meth:`log_size`)."""

    def log_size(self) -> int:
        """Bytes logged so far: pass it to ``logs(since=...)`` later to see only what came after."""


@runtime_checkable
class NsqdServer(Server, Protocol):
    """An nsqd of either backend (:class:`~.daemons.NsqdProcess` or ``ThreadedEmbeddedNsqd``)."""

    def stats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        """nsqd's ``/stats`` (JSON), optionally filtered to one topic and/or channel."""

    def pub(self, topic: str, body: bytes, defer_ms: int | None = None) -> None:
        """Publish ``body`` to ``topic`` over HTTP (held ``defer_ms`` milliseconds if given)."""


@runtime_checkable
class LookupdServer(Server, Protocol):
    """An nsqlookupd of either backend."""

    def nodes(self) -> list[dict[str, Any]]:
        """lookupd's ``/nodes`` ``producers`` list: every nsqd registered with it."""

    def lookup(self, topic: str) -> dict[str, Any]:
        """lookupd's ``/lookup?topic=`` reply: the topic's channels and producers."""

    def wait_for_topic(
        self, topic: str, tcp_addresses: Collection[str] = (), timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Wait until lookupd lists producers of ``topic`` (each of ``tcp_addresses`` if given)."""


class ClusterServer(Protocol):
    """A lookupd and some nsqd registered with it (``NsqCluster`` or
    ``ThreadedEmbeddedCluster``)."""

    @property
    def lookupd(self) -> Any: ...

    @property
    def nsqds(self) -> Sequence[Any]: ...

    @property
    def nsqd_tcp_addresses(self) -> list[str]: ...

    @property
    def nsqd_http_addresses(self) -> list[str]: ...

    def stop(self, timeout: float = ...) -> None: ...


def real_binaries_available() -> bool:
    """Whether ``nsqd`` and ``nsqlookupd`` can be found (``$NSQ_BIN_DIR``, then ``$PATH``)."""
    try:
        find_nsq_binary("nsqd")
        find_nsq_binary("nsqlookupd")
    except NsqBinaryNotFound:
        return False
    return True


def resolve_backend(choice: str | None = None) -> Backend:
    """``"real"`` or ``"embedded"`` from a choice that may be ``"auto"``, empty or None
    (then ``$NSQCLIENT_BACKEND``, then auto: real when the binaries are found)."""
    value = (choice or os.environ.get(BACKEND_ENV) or "auto").strip().lower()
    if value == "real":
        return "real"
    if value == "embedded":
        return "embedded"
    if value == "auto":
        return "real" if real_binaries_available() else "embedded"
    raise ValueError(f"unknown NSQ backend {value!r}: use real, embedded or auto")


def _embedded_nsqd_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    # NsqdProcess raises nsqd's memory queue so tests never spill to disk; mirror it.
    kwargs.setdefault("mem_queue_size", DEFAULT_MEM_QUEUE_SIZE)
    return kwargs


def start_nsqd(backend: str | None = "auto", **kwargs: Any) -> NsqdServer:
    """Start one nsqd; ``kwargs`` are ``NsqdProcess``'s (``extra_args`` takes nsqd flags).

    Returns once it accepts connections. Stop it with ``stop()``.
    """
    if resolve_backend(backend) == "real":
        nsqd = NsqdProcess(**kwargs)
        nsqd.start()
        return nsqd
    from .embedded.threaded import ThreadedEmbeddedNsqd

    return ThreadedEmbeddedNsqd(**_embedded_nsqd_kwargs(kwargs)).start()


def start_lookupd(backend: str | None = "auto", **kwargs: Any) -> LookupdServer:
    """Start one nsqlookupd (``kwargs`` as ``NsqlookupdProcess``'s)."""
    if resolve_backend(backend) == "real":
        lookupd = NsqlookupdProcess(**kwargs)
        lookupd.start()
        return lookupd
    from .embedded.threaded import ThreadedEmbeddedLookupd

    return ThreadedEmbeddedLookupd(**kwargs).start()


def start_cluster(
    backend: str | None = "auto", nsqd_count: int = 3, **nsqd_kwargs: Any
) -> ClusterServer:
    """Start a lookupd and ``nsqd_count`` nsqd; returns once lookupd lists every nsqd."""
    if resolve_backend(backend) == "real":
        cluster = NsqCluster(nsqd_count=nsqd_count, **nsqd_kwargs)
        cluster.start()
        return cluster
    from .embedded.threaded import ThreadedEmbeddedCluster

    return ThreadedEmbeddedCluster(nsqd_count, **_embedded_nsqd_kwargs(nsqd_kwargs)).start()


def all_servers() -> list[Server]:
    """Every daemon object of this process still referenced, of both backends (for reports)."""
    from .embedded.threaded import all_threaded_servers

    servers: list[Server] = [*all_daemons(), *all_threaded_servers()]
    return servers


def binary_dir() -> Path | None:
    """The folder the real ``nsqd`` would be taken from, or None when there is none."""
    try:
        return find_nsq_binary("nsqd").parent
    except NsqBinaryNotFound:
        return None
