"""nsqclient's pytest plugin: NSQ daemons as fixtures for your own tests.

Installed with nsqclient (entry point ``pytest11``: ``nsqclient``), so nothing needs importing::

    def test_my_consumer(nsqd):                     # a fresh nsqd for this test
        nsqd.pub("orders", b"hello")
        assert my_consumer.run_once(nsqd.tcp_address) == [b"hello"]

Fixtures (each stops what it started, even when the test fails):

* ``nsqd``: one nsqd; ``nsqd_factory(**kwargs)`` starts more (``NsqdProcess``'s arguments, e.g.
  ``extra_args=["--msg-timeout=5s"]``);
* ``nsqlookupd``: one nsqlookupd;
* ``nsq_cluster``: a lookupd and two nsqd registered with it (``.lookupd``, ``.nsqds``,
  ``.nsqd_tcp_addresses``, ``.nsqd_http_addresses``); another count with the ini option
  ``nsq_cluster_size = 3`` or a test's ``@pytest.mark.nsq_cluster_size(3)``;
* ``nsq_backend``: ``"real"`` or ``"embedded"``, the backend those fixtures use;
* ``nsq_fault_proxy``: a :class:`~nsqclient.testing.FaultProxy` (on its own thread) in front of
  ``nsqd``: give clients ``nsq_fault_proxy.address``; ``nsq_fault_proxy_factory(upstream)``
  starts more, in front of any nsqd (an object with ``.tcp_address``, or ``"host:port"``).

Backend: real nsqd/nsqlookupd binaries when they can be found (``$NSQ_BIN_DIR``, else
``$PATH``), else the embedded in-process server. Force one with ``pytest
--nsq-backend=real|embedded|auto`` or ``NSQCLIENT_BACKEND`` (the option wins), or set a
default with the ini option ``nsq_backend``; a test parametrised over ``nsq_backend``
(``indirect=True``) runs on each backend it names. A conftest fixture of the same name
overrides the plugin's, as usual in pytest. When a test fails, what its daemons logged during
it is attached to the report. Under pytest-xdist each worker picks daemon ports from a slice
of its own (``$NSQCLIENT_PORT_RANGE``), so workers never collide.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .backends import ClusterServer, LookupdServer, NsqdServer, Server
    from .faults import FaultProxy

__all__ = [
    "nsq_backend",
    "nsq_cluster",
    "nsq_fault_proxy",
    "nsq_fault_proxy_factory",
    "nsqd",
    "nsqd_factory",
    "nsqlookupd",
]

OPTION = "--nsq-backend"
#: ini: a sentence added to the missing-binaries failure (how this project gets its binaries)
BINARIES_HINT_INI = "nsq_binaries_hint"
_binaries_hint = ""
CLUSTER_SIZE_INI = "nsq_cluster_size"
BACKEND_INI = "nsq_backend"
_SLICED_ENV = "NSQCLIENT_PORT_RANGE_WORKER"
LOG_LINES = 200
_log_offsets = pytest.StashKey["weakref.WeakKeyDictionary[Server, int]"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nsqclient", "NSQ daemons for tests (nsqclient)")
    group.addoption(
        OPTION,
        dest="nsq_backend",
        choices=["auto", "real", "embedded"],
        default=None,
        help="nsqd/nsqlookupd for the nsqd, nsqlookupd and nsq_cluster fixtures: real binaries, "
        "the embedded in-process server, or auto (real when found; default, or "
        "$NSQCLIENT_BACKEND)",
    )
    parser.addini(
        BACKEND_INI,
        "the backend when neither --nsq-backend nor $NSQCLIENT_BACKEND says: real, embedded "
        "or auto (default)",
        default="auto",
    )
    parser.addini(
        CLUSTER_SIZE_INI,
        "how many nsqd the nsq_cluster fixture starts (default 2; a test's "
        "@pytest.mark.nsq_cluster_size(n) wins)",
        default="2",
    )
    parser.addini(
        BINARIES_HINT_INI,
        "added to the error when nsqd/nsqlookupd binaries are not found, e.g. how this "
        "project builds them",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _binaries_hint
    _binaries_hint = str(config.getini(BINARIES_HINT_INI)).strip()
    config.addinivalue_line(
        "markers",
        "nsq_cluster_size(n): the nsq_cluster fixture of this test starts n nsqd (default 2)",
    )
    _own_port_slice()


def _own_port_slice() -> None:
    """Under pytest-xdist, give this worker its own slice of the port range, so that daemons of
    parallel workers never pick the same port (nor a port another test counts on being closed)."""
    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER", ""),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT", ""),
    )
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return
    from ._process import PORT_RANGE_ENV, port_range

    if os.environ.get(_SLICED_ENV) == worker:
        return  # already this worker's slice (a pytester run inside the worker)
    index, workers = int(worker[2:]), max(int(count), 1)
    low, high = port_range()  # the whole range (inherited from the controller), sliced once
    size = (high - low + 1) // workers
    start = low + index * size
    os.environ[PORT_RANGE_ENV] = f"{start}-{start + size - 1}"
    os.environ[_SLICED_ENV] = worker


def chosen_backend(config: pytest.Config) -> str | None:
    """What the command line asked for (None: not given; then the environment, then auto)."""
    value = config.getoption("nsq_backend", default=None)
    return str(value) if value else None


def pytest_report_header(config: pytest.Config) -> str | None:
    from .backends import BACKEND_ENV

    choice = chosen_backend(config)
    source = f"{OPTION}={choice}"
    if choice is None:
        choice = os.environ.get(BACKEND_ENV) or None
        source = f"{BACKEND_ENV}={choice}"
    if choice is None:
        return None  # quiet unless asked: resolving "auto" means looking for binaries
    from .backends import resolve_backend

    return f"nsqclient: NSQ backend {resolve_backend(choice)} ({source})"


# -- daemon logs in failure reports ---------------------------------------------------------------


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_log_offsets] = _current_offsets()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, attach what each daemon (of either backend) logged during the test."""
    report = yield
    if report.failed:
        attach_daemon_logs(report, item.stash.get(_log_offsets, None))
    return report


def _current_offsets() -> weakref.WeakKeyDictionary[Server, int]:
    offsets: weakref.WeakKeyDictionary[Server, int] = weakref.WeakKeyDictionary()
    if not _testing_loaded():
        return offsets
    from .backends import all_servers

    for server in all_servers():
        offsets[server] = server.log_size()
    return offsets


def _testing_loaded() -> bool:
    import sys

    return "nsqclient.testing.daemons" in sys.modules


def attach_daemon_logs(
    report: pytest.TestReport, offsets: weakref.WeakKeyDictionary[Server, int] | None
) -> None:
    if not _testing_loaded():
        return
    from .backends import all_servers

    for server in all_servers():
        since = offsets.get(server, 0) if offsets is not None else 0
        if server.log_size() <= since:
            continue  # silent during this test
        lines = server.logs(since=since).splitlines()[-LOG_LINES:]
        report.sections.append((f"daemon logs ({report.when}): {server!r}", "\n".join(lines)))


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def nsq_backend(request: pytest.FixtureRequest) -> str:
    """``"real"`` or ``"embedded"``: what the NSQ fixtures of this test run on.

    A test parametrised with ``nsq_backend`` (``indirect=True``) gets its parameter, e.g. to run
    on both backends; otherwise ``--nsq-backend``, then ``$NSQCLIENT_BACKEND``, then the
    ``nsq_backend`` ini option (``auto`` unless set) decide.
    """
    from .backends import BACKEND_ENV, resolve_backend

    param = getattr(request, "param", None)
    if param is not None:
        return resolve_backend(str(param))
    choice = chosen_backend(request.config) or os.environ.get(BACKEND_ENV)
    return resolve_backend(choice or str(request.config.getini(BACKEND_INI)))


def _start(make: Callable[[], Any]) -> Any:
    from .daemons import NsqBinaryNotFound

    try:
        return make()
    except NsqBinaryNotFound as exc:  # only with the real backend forced
        pytest.fail(f"{exc} {_binaries_hint}".strip(), pytrace=False)


@pytest.fixture
def nsqd_factory(nsq_backend: str) -> Iterator[Callable[..., NsqdServer]]:
    """``nsqd_factory(**kwargs)`` starts one more nsqd (``NsqdProcess``'s arguments)."""
    from .backends import start_nsqd

    started: list[NsqdServer] = []

    def make(**kwargs: Any) -> NsqdServer:
        server: NsqdServer = _start(lambda: start_nsqd(nsq_backend, **kwargs))
        started.append(server)
        return server

    try:
        yield make
    finally:
        stop_all(started)


@pytest.fixture
def nsqd(nsqd_factory: Callable[..., NsqdServer]) -> NsqdServer:
    """One started nsqd on 127.0.0.1 (free ports): ``.tcp_address``, ``.http_address``,
    ``.stats()``, ``.pub()``, ``.freeze()``/``.thaw()``, ``.restart()``, ``.logs()``."""
    return nsqd_factory()


@pytest.fixture
def nsqlookupd(nsq_backend: str) -> Iterator[LookupdServer]:
    """One started nsqlookupd: ``.tcp_address`` (for nsqd), ``.http_address`` (for Readers)."""
    from .backends import start_lookupd

    lookupd: LookupdServer = _start(lambda: start_lookupd(nsq_backend))
    try:
        yield lookupd
    finally:
        lookupd.stop()


def cluster_size(request: pytest.FixtureRequest) -> int:
    """The nsqd count for ``nsq_cluster``: the test's marker, else the ini option."""
    marker = request.node.get_closest_marker("nsq_cluster_size")
    value = marker.args[0] if marker is not None and marker.args else None
    if value is None:
        value = request.config.getini(CLUSTER_SIZE_INI)
    count = int(value)
    if count < 1:
        raise pytest.UsageError(f"nsq_cluster_size must be at least 1, not {value!r}")
    return count


@pytest.fixture
def nsq_cluster(nsq_backend: str, request: pytest.FixtureRequest) -> Iterator[ClusterServer]:
    """A lookupd and two nsqd registered with it (lookupd lists every nsqd before the test runs).

    How many nsqd: the test's ``@pytest.mark.nsq_cluster_size(n)``, else the ``nsq_cluster_size``
    ini option, else 2.
    """
    from .backends import start_cluster

    count = cluster_size(request)
    cluster: ClusterServer = _start(lambda: start_cluster(nsq_backend, nsqd_count=count))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def nsq_fault_proxy_factory() -> Iterator[Callable[..., FaultProxy]]:
    """``nsq_fault_proxy_factory(upstream)``: a started FaultProxy (on a thread of its own) in
    front of ``upstream``: anything with ``.tcp_address`` (an nsqd fixture) or ``"host:port"``."""
    from .faults import FaultProxy

    started: list[FaultProxy] = []

    def make(upstream: Any, **kwargs: Any) -> FaultProxy:
        address = getattr(upstream, "tcp_address", upstream)
        proxy = FaultProxy(address, **kwargs).start_in_thread()
        started.append(proxy)
        return proxy

    try:
        yield make
    finally:
        stop_all(started)


@pytest.fixture
def nsq_fault_proxy(
    nsqd: NsqdServer, nsq_fault_proxy_factory: Callable[..., FaultProxy]
) -> FaultProxy:
    """A FaultProxy in front of the ``nsqd`` fixture: connect clients to its ``.address``."""
    return nsq_fault_proxy_factory(nsqd)


def stop_all(servers: list[Any]) -> None:
    """Stop every server (the last started first); re-raise the first failure afterwards."""
    errors: list[BaseException] = []
    for server in reversed(servers):
        try:
            server.stop()
        except Exception as exc:  # keep stopping the others
            errors.append(exc)
    if errors:
        raise errors[0]
