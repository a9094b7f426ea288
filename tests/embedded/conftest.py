"""Fixtures for the embedded-server tests: the embedded nsqd/nsqlookupd and the real ones.

Most tests are *differential*: the same script runs against a real nsqd 1.3.0 and the embedded
one, started with the same options, and the answers must be equal (a difference is a bug in the
embedded server). ``start_real``/``start_embedded`` start one of each; ``backend`` parametrises a
test over both (``make_nsqd``, ``make_lookupd``). Options use the embedded names (durations in
ms) and are translated to nsqd flags for the real one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import NsqdProcess, NsqlookupdProcess
from nsqclient.testing.embedded import ThreadedEmbeddedLookupd, ThreadedEmbeddedNsqd
from nsqclient.testing.embedded.fixtures import (  # the shipped fixtures, exercised here
    embedded_cluster,
    embedded_lookupd,
    embedded_nsqd,
    embedded_nsqd_factory,
)
from tests.rawconn_support import RawClient

__all__ = ["embedded_cluster", "embedded_lookupd", "embedded_nsqd", "embedded_nsqd_factory"]

_DURATIONS = ("msg_timeout", "max_msg_timeout", "max_req_timeout", "max_heartbeat_interval")
_NUMBERS = (
    "tls_min_version",  # not a number, but passed through the same way
    "max_rdy_count",
    "max_msg_size",
    "max_body_size",
    "max_deflate_level",
    "max_channel_consumers",
    "max_output_buffer_size",
)
_BOOLS = ("snappy", "deflate")
_PROCESS_KWARGS = (
    "lookupd_tcp_addresses",
    "tls_cert",
    "tls_key",
    "tls_root_ca",
    "tls_required",
    "tls_client_auth_policy",
    "auth_http_address",
    "mem_queue_size",
    "node_id",
)
_EMBEDDED_ONLY = ("lookupd_ping_interval",)


class Nsqd(Protocol):
    """What the tests need from either kind of nsqd."""

    @property
    def tcp_address(self) -> str: ...

    @property
    def http_address(self) -> str: ...

    def stop(self) -> None: ...


def start_real(**options: Any) -> NsqdProcess:
    kwargs: dict[str, Any] = {"mem_queue_size": 10_000}
    extra: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if key in _DURATIONS:
            extra.append(f"{flag}={value}ms")
        elif key in _NUMBERS:
            extra.append(f"{flag}={value}")
        elif key in _BOOLS:
            extra.append(f"{flag}={'true' if value else 'false'}")
        elif key in _PROCESS_KWARGS:
            kwargs[key] = value
        elif key not in _EMBEDDED_ONLY:
            raise KeyError(f"no nsqd flag for option {key!r}")
    nsqd = NsqdProcess(extra_args=extra, **kwargs)
    nsqd.start()
    return nsqd


def start_embedded(**options: Any) -> ThreadedEmbeddedNsqd:
    return ThreadedEmbeddedNsqd(**options).start()


@pytest.fixture(autouse=True)
async def _close_raw_clients() -> AsyncIterator[None]:
    """A failing test must not leak sockets into the next one (warnings are errors)."""
    yield
    loop = asyncio.get_running_loop()
    for client in RawClient.instances:
        transport = client.writer.transport
        if getattr(transport, "_loop", None) is loop and not transport.is_closing():
            transport.abort()
    RawClient.instances.clear()


@pytest.fixture(params=["real", "embedded"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_nsqd(backend: str) -> Iterator[Callable[..., Any]]:
    """``make_nsqd(**options)``: an nsqd of the parametrised ``backend``."""
    started: list[Nsqd] = []

    def make(**options: Any) -> Any:
        server: Any = start_real(**options) if backend == "real" else start_embedded(**options)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def make_lookupd(backend: str) -> Iterator[Callable[..., Any]]:
    """``make_lookupd(**options)``: an nsqlookupd of the parametrised ``backend``."""
    started: list[Any] = []

    def make(**options: Any) -> Any:
        server: Any
        if backend == "real":
            extra = [f"--{k.replace('_', '-')}={v}ms" for k, v in options.items()]
            server = NsqlookupdProcess(extra_args=extra)
            server.start()
        else:
            server = ThreadedEmbeddedLookupd(**options).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def tmp_certs(tls_certs: CertBundle) -> dict[str, Path]:
    """The TLS options both servers take (server cert/key)."""
    return {"tls_cert": tls_certs.server_cert, "tls_key": tls_certs.server_key}
