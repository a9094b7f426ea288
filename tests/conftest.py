"""Fixtures for tests against NSQ daemons (never mocks), on two backends.

Fixture names other tests rely on:

* from the shipped ``nsqclient`` pytest plugin (:mod:`nsqclient.testing.plugin`, the same fixtures
  users get): ``nsqd``, ``nsqd_factory``, ``nsqlookupd``, ``nsq_cluster`` (three ``.nsqds``: the
  suite sets ``nsq_cluster_size = 3`` in pyproject.toml), ``nsq_backend`` (``nsq_backend = real``
  there: outside the two-backend suites the daemons are real), ``nsq_fault_proxy``
* ``tls_certs`` (session) -> :class:`~nsqclient.testing.certs.CertBundle`
* ``nsqd_tls`` (TLS offered), ``nsqd_tls_required`` (``--tls-required=true``)
* ``auth_server`` (:class:`test_service.auth_server.AuthServer`: ``s3cret`` may do everything,
  ``readonly`` may only subscribe), ``nsqd_auth`` (nsqd asking that server)

**Backends.** In the integration suites (``tests/integration/protocol``, ``tests/aio``,
``tests/sync``, ``tests/http_clients``, ``tests/observability``, ``tests/cli``,
``tests/worker/test_backends.py``) every test
using a daemon fixture runs twice: against real
nsqd/nsqlookupd 1.3.0 processes (``[real]``) and against nsqclient's embedded server
(``[embedded]``, :mod:`nsqclient.testing.embedded`, on its own loop thread). A test passing on
one and failing on the other is a bug in the embedded server, unless it relies on a documented
difference (``nsqclient/testing/embedded/DIFFERENCES.md``); such a test is marked
``@pytest.mark.real_nsqd_only(reason=...)`` and runs on real nsqd only. A long test of the
client's own behaviour (faults, deadlines, timeouts, memory) is marked ``one_backend`` and runs
on real nsqd only too, for CI's time (see :data:`ONE_BACKEND`). Elsewhere (e.g.
``tests/test_service``, which tests the real-daemon scripts) the fixtures are real only.
``--nsq-backend=real`` or ``=embedded`` (the pytest plugin's option) runs one backend only (the
tests elsewhere stay on real daemons).

Every daemon is stopped at teardown whatever happened. When a test fails, whatever each daemon
(from these fixtures or made directly) logged during the test is attached to its report as a
"daemon logs" section (by the plugin). Missing binaries make the real fixtures *fail* (never
skip): build them with ``bash test_service/build_nsq.sh``. Under pytest-xdist (run_tests.sh runs
the suite on workers) the plugin gives each worker its own port range.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from nsqclient.testing import backends, plugin
from nsqclient.testing.certs import CertBundle, make_certs
from test_service.auth_server import ALLOW_ALL, AuthServer
from tests import threads_support

pytest_plugins = ["pytester"]

# Hypothesis measures time: its per-example deadline and its "input generation is slow" check
# fail a property that holds when the machine is busy (two CPU hogs beside the free-threaded
# step: "only 4 valid inputs after 5.5 s"). The properties and the example counts stay as they
# are; the time they take is the benchmark's business, not a test's.
settings.register_profile("nsqclient", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("nsqclient")

SUBSCRIBE_ONLY = [{"permissions": ["subscribe"], "topic": ".*", "channels": [".*"]}]

NsqdFactory = Callable[..., Any]

TESTS = Path(__file__).resolve().parent
# this checkout's NSQ binaries (bash test_service/build_nsq.sh): the installed package looks only
# in $NSQ_BIN_DIR and PATH, so the repository names its own folder here (and in its scripts)
CHECKOUT_BIN_DIR = TESTS.parent / "test_service" / ".bin"
if (CHECKOUT_BIN_DIR / "nsqd").is_file() and not os.environ.get("NSQ_BIN_DIR"):
    os.environ["NSQ_BIN_DIR"] = str(CHECKOUT_BIN_DIR)
BOTH_BACKENDS = [
    TESTS / "integration" / "protocol",
    TESTS / "aio",
    TESTS / "sync",
    TESTS / "http_clients",  # nsqclient/http (a folder named http would shadow the stdlib)
    TESTS / "observability",
    TESTS / "cli",
    TESTS / "worker" / "test_backends.py",  # the rest of tests/worker: real nsqd (lean CI)
]
"""Suites (folders, or single files) whose daemon-using tests run on both backends."""

ONE_BACKEND = """Why a test marked ``one_backend`` runs on one backend (issue 51: CI time).

It spends seconds on what the client does while the server merely stands by (a fault injected
by the proxy, a heartbeat or message timeout running out, publishing threads, memory through
an outage, uvloop); run on the embedded server too it proved the same client code twice, and
was a third of the suite's time. What the embedded server does in those moments (heartbeats,
timeouts, redelivery, deferral) is tested against real nsqd side by side in tests/embedded and
tests/integration/protocol, and the shorter client tests still run on both backends.
``--nsq-backend=embedded`` runs these on the embedded server as well."""

REAL_ONLY_ELSEWHERE: dict[str, str] = {
    # node-id prefixes of [embedded...] variants that cannot run there, with the reason; their
    # embedded variants are deselected. Empty: every integration test runs on both backends.
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "real_nsqd_only(reason): runs against real nsqd only (it relies on a real process or on "
        "a difference listed in nsqclient/testing/embedded/DIFFERENCES.md)",
    )
    config.addinivalue_line(
        "markers",
        "one_backend: a test of the client's own behaviour over seconds (faults through the "
        "proxy, timeouts, heartbeats, memory, threads) runs on real nsqd only, unless "
        "--nsq-backend=embedded asks for the embedded server; see ONE_BACKEND",
    )
    config.addinivalue_line(
        "markers",
        "snappy: negotiates snappy, so it imports cramjam, which turns the GIL on for the whole "
        "process on free-threaded CPython (run_tests.sh's free-threaded step deselects it)",
    )
    threads_support.configure(config)  # $NSQCLIENT_TEST_NO_GIL, $NSQCLIENT_TEST_SWITCH_INTERVAL


def _backends_for(metafunc: pytest.Metafunc) -> list[str] | None:
    path = Path(metafunc.definition.path).resolve()
    if not any(path.is_relative_to(suite) for suite in BOTH_BACKENDS):
        return None  # the plugin's default: the ini option nsq_backend = real
    wanted = list(backends.BACKENDS)
    forced = plugin.chosen_backend(metafunc.config)
    if forced in ("real", "embedded"):
        wanted = [forced]
    if metafunc.definition.get_closest_marker("real_nsqd_only") is not None:
        wanted = [b for b in wanted if b == "real"]
    elif forced is None and metafunc.definition.get_closest_marker("one_backend") is not None:
        wanted = ["real"]  # ONE_BACKEND
    return wanted


def _backend_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("nsq_backend")


def _listed_real_only(item: pytest.Item) -> str | None:
    """The reason when ``item`` is the embedded variant of a test in REAL_ONLY_ELSEWHERE."""
    if _backend_of(item) != "embedded":
        return None
    for prefix, reason in REAL_ONLY_ELSEWHERE.items():
        if item.nodeid.startswith(prefix):
            return reason
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the embedded variants listed in REAL_ONLY_ELSEWHERE; their real twins carry the
    marker, so that ``pytest -m real_nsqd_only --co`` lists every backend-specific test."""
    dropped = {item.nodeid: reason for item in items if (reason := _listed_real_only(item))}
    if not dropped:
        return
    twins = {nodeid.replace("[embedded", "[real", 1): r for nodeid, r in dropped.items()}
    kept = []
    for item in items:
        if item.nodeid in dropped:
            continue
        if item.nodeid in twins:
            item.add_marker(pytest.mark.real_nsqd_only(reason=twins[item.nodeid]))
        kept.append(item)
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid in dropped])
    items[:] = kept


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "nsq_backend" not in metafunc.fixturenames:
        return
    wanted = _backends_for(metafunc)
    if wanted is None and plugin.chosen_backend(metafunc.config) not in (None, "real"):
        wanted = ["real"]  # tests outside the two-backend suites are for real daemons
    if wanted is not None:
        metafunc.parametrize("nsq_backend", wanted, indirect=True)


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> CertBundle:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def nsqd_tls(nsqd_factory: NsqdFactory, tls_certs: CertBundle) -> Any:
    """nsqd offering TLS (clients may upgrade) with the test CA's server certificate."""
    return nsqd_factory(
        tls_cert=tls_certs.server_cert, tls_key=tls_certs.server_key, tls_root_ca=tls_certs.ca_cert
    )


@pytest.fixture
def nsqd_tls_required(nsqd_factory: NsqdFactory, tls_certs: CertBundle) -> Any:
    """nsqd with ``--tls-required=true``: nothing but IDENTIFY before TLS; HTTP only via HTTPS."""
    return nsqd_factory(
        tls_cert=tls_certs.server_cert,
        tls_key=tls_certs.server_key,
        tls_root_ca=tls_certs.ca_cert,
        tls_required=True,
    )


@pytest.fixture
def auth_server() -> Iterator[AuthServer]:
    """Secrets: ``s3cret`` may publish and subscribe anywhere, ``readonly`` may only subscribe.
    Unknown secrets get 403 (nsqd: ``E_AUTH_FAILED``)."""
    server = AuthServer({"s3cret": ALLOW_ALL, "readonly": SUBSCRIBE_ONLY})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nsqd_auth(nsqd_factory: NsqdFactory, auth_server: AuthServer) -> Any:
    return nsqd_factory(auth_http_address=auth_server.address)
