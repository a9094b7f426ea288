"""What a worker runs, checked once in the supervisor before any child exists.

:func:`load_target` imports ``MODULE:FUNCTION`` (the current directory first on ``sys.path``, as
gunicorn and celery do) and says what is wrong by name, so a bad target fails the command at
once instead of in every child. :func:`worker_options` turns the arguments of
:func:`nsqclient.worker.run` into a frozen :class:`WorkerOptions`; the Reader options are
validated here with the Reader's own checks (nothing connects), so a child never meets a
misconfiguration the supervisor could have named.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from ..addresses import format_address
from ..aio.delivery import HandlerRunner
from ..aio.options import validate_client_options
from ..config import Config
from ..errors import ConfigError
from ..message import Message

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_THREADS",
    "Handler",
    "Init",
    "WorkerOptions",
    "cpu_count",
    "default_max_in_flight",
    "load_target",
    "worker_options",
]

#: a message handler, plain or ``async def``: return FINs, raise REQs with backoff, a message it
#: answered itself is left alone
Handler = Callable[[Message], Any]
#: run first in every child with its index (0 to processes - 1): open per-process resources
Init = Callable[[int], Any]

#: a plain function's threads per process: one, as celery's prefork pool (CPU-bound handlers
#: gain nothing from more threads; raise it for handlers that wait on I/O)
DEFAULT_THREADS = 1
#: an ``async def`` handler's coroutines at once per process (arq's ``max_jobs``): a coroutine
#: handler is written to wait on I/O, so one at a time would waste it
DEFAULT_CONCURRENCY = 10


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """Everything the supervisor and its children need, checked (see :func:`worker_options`)."""

    handler: Handler
    #: how logs name the handler: ``MODULE:FUNCTION`` as given, else ``module.qualname``
    target: str
    is_async: bool
    topic: str
    channel: str
    processes: int
    #: handlers at once per process: ``threads`` (plain) or ``concurrency`` (``async def``)
    handlers: int
    #: the Reader's options, ``max_in_flight`` (per process) resolved
    config: Config
    nsqd_tcp_addresses: list[str] | None
    lookupd_http_addresses: list[str] | None
    max_messages_per_child: int | None = None
    max_memory_per_child: int | None = None  # MiB
    health_address: tuple[str, int] | None = None
    init: Init | None = None
    max_start_failures: int = 3

    @property
    def max_in_flight(self) -> int:
        return self.config.max_in_flight

    def describe(self) -> str:
        """The start-up log line's middle: what runs, how wide, where from."""
        kind = ("coroutine" if self.is_async else "thread") + ("s" if self.handlers != 1 else "")
        sources = []
        if self.nsqd_tcp_addresses:
            sources.append("nsqd " + ", ".join(self.nsqd_tcp_addresses))
        if self.lookupd_http_addresses:
            sources.append("lookupd " + ", ".join(self.lookupd_http_addresses))
        text = (
            f"{self.target} ({'async def' if self.is_async else 'plain function'}) on "
            f"{self.topic}/{self.channel} from {'; '.join(sources)}: {self.processes} "
            f"process{'es' if self.processes != 1 else ''} x {self.handlers} {kind}, "
            f"max_in_flight {self.max_in_flight} per process"
        )
        limits = []
        if self.max_messages_per_child:
            limits.append(f"{self.max_messages_per_child} messages")
        if self.max_memory_per_child:
            limits.append(f"{self.max_memory_per_child} MiB")
        if limits:
            text += f", recycled after {' or '.join(limits)}"
        return text


def default_max_in_flight(handlers: int) -> int:
    """Every handler busy, and a quarter more (at least one) delivered and waiting, so a handler
    that finishes finds its next message here rather than a round trip away; no more: what is
    prefetched waits, counts against ``msg_timeout``, and is handed back on stop."""
    return handlers + max(1, handlers // 4)


def cpu_count() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup CPU quota (a container's
    ``--cpus`` or Kubernetes ``resources.limits.cpu``, rounded up), which ``os.cpu_count()``
    does not see: a container limited to 2 CPUs on a 64-core host would otherwise start 64."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(count, quota)) if quota else max(1, count)


def _cgroup_quota() -> int | None:
    try:  # cgroup v2: "max 100000" or "200000 100000"
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            return -(-int(quota) // int(period))
        return None
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
            quota_us = int(f.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
            period_us = int(f.read())
        return -(-quota_us // period_us) if quota_us > 0 and period_us > 0 else None
    except (OSError, ValueError):
        return None


def load_target(target: str) -> Callable[..., Any]:
    """Import ``MODULE:FUNCTION`` (``FUNCTION`` may be dotted: ``module:obj.method``).

    The current directory goes first on ``sys.path``. ConfigError names the target and what is
    wrong: not ``MODULE:FUNCTION``, no such module, its import raised, no such attribute, or
    not callable.
    """
    module_name, sep, attr = target.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"the handler {target!r} is not MODULE:FUNCTION (for example tasks:handle, the "
            "function handle in tasks.py)"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise ConfigError(
                f"cannot import {module_name!r} (handler {target!r}): no module named "
                f"{exc.name!r} in {cwd} or on sys.path; run from the folder that holds it, or "
                "set PYTHONPATH"
            ) from exc
        raise _import_failed(target, module_name, exc) from exc
    except Exception as exc:
        raise _import_failed(target, module_name, exc) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{module_name!r} has no {attr!r} (handler {target!r}){hint}"
            ) from None
    if not callable(obj):
        raise ConfigError(
            f"the handler {target!r} is a {type(obj).__name__}, not a function: name a function "
            "taking one message"
        )
    return obj  # type: ignore[no-any-return]


def _import_failed(target: str, module: str, exc: BaseException) -> ConfigError:
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f" at {last.filename}:{last.lineno}"
    return ConfigError(
        f"importing {module!r} (handler {target!r}) raised {type(exc).__name__}: {exc}{where}"
    )


def _name_of(handler: Handler) -> str:
    module = getattr(handler, "__module__", None) or "?"
    name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    return f"{module}:{name}"


def _count(name: str, value: object, *, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"{name} must be an int >= {lo}, got {value!r}")
    return value


def health_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (every interface); port 0 picks a free one
    (the start-up log says which)."""
    if isinstance(address, tuple):
        host, port_text = address[0], str(address[1])
    else:
        host, sep, port_text = address.strip().rpartition(":")
        if not sep:
            raise ConfigError(f"the health address {address!r} is not HOST:PORT (e.g. :8080)")
    host = host.strip("[]") or "0.0.0.0"
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"the health address {address!r} has an invalid port") from None
    if not 0 <= port < 65536:
        raise ConfigError(f"the health address {address!r} has a port outside 0..65535")
    return host, port


def worker_options(
    handler: Handler | str,
    topic: str,
    channel: str,
    *,
    processes: int | None = None,
    threads: int | None = None,
    concurrency: int | None = None,
    max_in_flight: int | None = None,
    max_messages_per_child: int | None = None,
    max_memory_per_child: int | None = None,
    health_address_: str | tuple[str, int] | None = None,
    init: Init | str | None = None,
    max_start_failures: int = 3,
    nsqd_tcp_addresses: Iterable[object] | str | None = None,
    lookupd_http_addresses: Iterable[object] | str | None = None,
    config: Config | None = None,
    **reader_options: Any,
) -> WorkerOptions:
    """Check everything (ConfigError naming the culprit) and resolve the defaults."""
    if isinstance(handler, str):
        target = handler
        handler = load_target(handler)
    else:
        if not callable(handler):
            raise ConfigError(f"the handler must be callable, got {handler!r}")
        target = _name_of(handler)
    init_fn: Init | None
    if isinstance(init, str):
        init_fn = load_target(init)
    elif init is not None and not callable(init):
        raise ConfigError(f"init must be callable (it gets the child's index), got {init!r}")
    else:
        init_fn = init
    is_async = HandlerRunner(handler).is_async
    if is_async and threads is not None:
        raise ConfigError(
            f"{target} is an async def handler: it runs on the asyncio Reader, "
            "--concurrency (concurrency=) coroutines at once; --threads is for plain functions"
        )
    if not is_async and concurrency is not None:
        raise ConfigError(
            f"{target} is a plain function: it runs on --threads (threads=) worker threads; "
            "--concurrency is for async def handlers"
        )
    if is_async:
        handlers = _count(
            "concurrency", DEFAULT_CONCURRENCY if concurrency is None else concurrency
        )
    else:
        handlers = _count("threads", DEFAULT_THREADS if threads is None else threads)
    count = processes if processes is not None else cpu_count()
    count = _count("processes", count)
    if max_messages_per_child is not None:
        _count("max_messages_per_child", max_messages_per_child)
    if max_memory_per_child is not None:
        _count("max_memory_per_child (MiB)", max_memory_per_child)
    _count("max_start_failures", max_start_failures)
    cfg = Config.from_options(config, **reader_options)
    if max_in_flight is not None:
        cfg = cfg.replace(max_in_flight=_count("max_in_flight", max_in_flight))
    elif "max_in_flight" not in reader_options and (
        config is None or config.max_in_flight == Config().max_in_flight
    ):
        cfg = cfg.replace(max_in_flight=default_max_in_flight(handlers))
    # the Reader's own checks, now, in the supervisor (TLS files, addresses, names)
    checked = validate_client_options(
        cfg,
        nsqd_tcp_addresses=nsqd_tcp_addresses,
        lookupd_http_addresses=lookupd_http_addresses,
        topic=topic,
        channel=channel,
        consumer=True,
    )
    nsqd = [format_address(host, port) for host, port in checked.nsqd_tcp_addresses]
    return WorkerOptions(
        handler=handler,
        target=target,
        is_async=is_async,
        topic=topic,
        channel=channel,
        processes=count,
        handlers=handlers,
        config=cfg,
        nsqd_tcp_addresses=nsqd or None,
        lookupd_http_addresses=list(checked.lookupd_http_addresses) or None,
        max_messages_per_child=max_messages_per_child,
        max_memory_per_child=max_memory_per_child,
        health_address=None if health_address_ is None else health_address(health_address_),
        init=init_fn,
        max_start_failures=max_start_failures,
    )
