"""Fixtures for tests against real nsqd / nsqlookupd processes (never mocks).

Fixture names other tests rely on:

* ``nsqd`` (a started :class:`NsqdProcess`), ``nsqd_factory`` (``nsqd_factory(**kwargs)`` starts
  one more; all are stopped at teardown)
* ``nsqlookupd``; ``nsq_cluster`` (``.lookupd`` and three ``.nsqds`` registered with it)
* ``tls_certs`` (session) -> :class:`~nsqclient.testing.certs.CertBundle`
* ``nsqd_tls`` (TLS offered), ``nsqd_tls_required`` (``--tls-required=true``)
* ``auth_server`` (:class:`test_service.auth_server.AuthServer`: ``s3cret`` may do everything,
  ``readonly`` may only subscribe), ``nsqd_auth`` (nsqd asking that server)

Every daemon is stopped at teardown whatever happened. When a test fails, whatever each daemon
(from these fixtures or made directly with ``nsqclient.testing.daemons``) logged during the test
is attached to its report as a "daemon logs" section. Missing binaries make the
fixtures *fail* (never skip): build them with ``bash test_service/build_nsq.sh``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from nsqclient.testing.certs import CertBundle, make_certs
from nsqclient.testing.daemons import (
    Daemon,
    NsqBinaryNotFound,
    NsqCluster,
    NsqdProcess,
    NsqlookupdProcess,
    all_daemons,
)
from test_service.auth_server import ALLOW_ALL, AuthServer

pytest_plugins = ["pytester"]

SUBSCRIBE_ONLY = [{"permissions": ["subscribe"], "topic": ".*", "channels": [".*"]}]
LOG_LINES_PER_DAEMON = 200

NsqdFactory = Callable[..., NsqdProcess]

_log_offsets_key = pytest.StashKey["weakref.WeakKeyDictionary[Daemon, int]"]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    # Where every existing daemon's log stands, so a failure report shows only this test's part.
    offsets: weakref.WeakKeyDictionary[Daemon, int] = weakref.WeakKeyDictionary()
    for daemon in all_daemons():
        offsets[daemon] = daemon.log_size()
    item.stash[_log_offsets_key] = offsets
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, attach what each daemon logged during the test (from these fixtures or any
    other code using nsqclient.testing.daemons) as report sections, shown with the failure."""
    report = yield
    if report.failed:
        offsets = item.stash.get(_log_offsets_key, None)
        for daemon in all_daemons():
            since = offsets.get(daemon, 0) if offsets is not None else 0
            if daemon.log_size() <= since:
                continue  # silent during this test (e.g. a module-scoped daemon it did not use)
            lines = daemon.logs(since=since).splitlines()[-LOG_LINES_PER_DAEMON:]
            report.sections.append((f"daemon logs ({report.when}): {daemon!r}", "\n".join(lines)))
    return report


@contextlib.contextmanager
def _binaries_required() -> Iterator[None]:
    """Turn a missing binary into a fixture failure with the how-to-build message."""
    try:
        yield
    except NsqBinaryNotFound as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def nsqd_factory() -> Iterator[NsqdFactory]:
    created: list[NsqdProcess] = []

    def make(**kwargs: Any) -> NsqdProcess:
        with _binaries_required():
            nsqd = NsqdProcess(**kwargs)
        created.append(nsqd)
        nsqd.start()
        return nsqd

    try:
        yield make
    finally:
        _stop_all(created)


def _stop_all(daemons: list[NsqdProcess]) -> None:
    errors: list[BaseException] = []
    for daemon in reversed(daemons):
        try:
            daemon.stop()
        except Exception as exc:  # keep stopping the others
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def nsqd(nsqd_factory: NsqdFactory) -> NsqdProcess:
    return nsqd_factory()


@pytest.fixture
def nsqlookupd() -> Iterator[NsqlookupdProcess]:
    with _binaries_required():
        lookupd = NsqlookupdProcess()
    try:
        lookupd.start()
        yield lookupd
    finally:
        lookupd.stop()


@pytest.fixture
def nsq_cluster() -> Iterator[NsqCluster]:
    """One nsqlookupd and three nsqd; lookupd's /nodes lists all three before the test runs."""
    with _binaries_required():
        cluster = NsqCluster(nsqd_count=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> CertBundle:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def nsqd_tls(nsqd_factory: NsqdFactory, tls_certs: CertBundle) -> NsqdProcess:
    """nsqd offering TLS (clients may upgrade) with the test CA's server certificate."""
    return nsqd_factory(
        tls_cert=tls_certs.server_cert, tls_key=tls_certs.server_key, tls_root_ca=tls_certs.ca_cert
    )


@pytest.fixture
def nsqd_tls_required(nsqd_factory: NsqdFactory, tls_certs: CertBundle) -> NsqdProcess:
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
def nsqd_auth(nsqd_factory: NsqdFactory, auth_server: AuthServer) -> NsqdProcess:
    return nsqd_factory(auth_http_address=auth_server.address)
