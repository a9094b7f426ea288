"""pytest fixtures for the embedded servers (each runs on its own loop thread).

Load with ``pytest_plugins = ["nsqclient.testing.embedded.fixtures"]`` in a conftest. (The
``nsqclient`` pytest plugin, :mod:`nsqclient.testing.plugin`, loaded automatically, offers
``nsqd``/``nsqlookupd``/``nsq_cluster`` on real or embedded daemons.) Every fixture stops what it
started, even when the test fails.

* ``embedded_nsqd_factory(**options)`` -> a started :class:`ThreadedEmbeddedNsqd`;
* ``embedded_nsqd`` -> one with default options;
* ``embedded_lookupd`` -> a started :class:`ThreadedEmbeddedLookupd`;
* ``embedded_cluster`` -> a lookupd and three nsqd registered with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .threaded import ThreadedEmbeddedCluster, ThreadedEmbeddedLookupd, ThreadedEmbeddedNsqd

__all__ = ["embedded_cluster", "embedded_lookupd", "embedded_nsqd", "embedded_nsqd_factory"]


@pytest.fixture
def embedded_nsqd_factory() -> Iterator[Callable[..., ThreadedEmbeddedNsqd]]:
    started: list[ThreadedEmbeddedNsqd] = []

    def make(**options: Any) -> ThreadedEmbeddedNsqd:
        nsqd = ThreadedEmbeddedNsqd(**options)
        started.append(nsqd)
        return nsqd.start()

    yield make
    for nsqd in reversed(started):
        nsqd.stop()


@pytest.fixture
def embedded_nsqd(
    embedded_nsqd_factory: Callable[..., ThreadedEmbeddedNsqd],
) -> ThreadedEmbeddedNsqd:
    return embedded_nsqd_factory()


@pytest.fixture
def embedded_lookupd() -> Iterator[ThreadedEmbeddedLookupd]:
    with ThreadedEmbeddedLookupd() as lookupd:
        yield lookupd


@pytest.fixture
def embedded_cluster() -> Iterator[ThreadedEmbeddedCluster]:
    with ThreadedEmbeddedCluster() as cluster:
        yield cluster
