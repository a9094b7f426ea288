"""Real ``nsqd`` and ``nsqlookupd`` processes for tests: the public API.

This module owns what each daemon is started with (flags, TLS, auth, data folder) and a few
HTTP conveniences that do not go through the client under test. The life cycle (free ports,
waiting for ``/ping``, stop/kill/restart, cleanup at exit) lives in ``_process.py``.
nsqclient's own fixtures (``tests/conftest.py``) are built on it, and so can users' tests::

    with NsqCluster(nsqd_count=2) as cluster:
        cluster.nsqds[0].pub("topic", b"hello")
        ... # connect to cluster.nsqd_tcp_addresses or cluster.lookupd.http_address

Binaries are looked up in ``$NSQ_BIN_DIR``, then ``$PATH`` (nsqclient's own checkout points
``$NSQ_BIN_DIR`` at what ``bash test_service/build_nsq.sh`` builds, from its test configuration).
Every daemon listens on 127.0.0.1 only, registers itself with lookupd as ``127.0.0.1``, and is
killed when the interpreter exits if the test forgot to stop it. Standard library only.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._process import (
    HOST,
    POLL_INTERVAL,
    UNVERIFIED_TLS,
    Daemon,
    NsqBinaryNotFound,
    NsqDaemonError,
    all_daemons,
    find_nsq_binary,
    free_port,
    http_request,
)

__all__ = [
    "DEFAULT_MEM_QUEUE_SIZE",
    "HOST",
    "Daemon",
    "LookupdHTTPConveniences",
    "NsqBinaryNotFound",
    "NsqCluster",
    "NsqDaemonError",
    "NsqdHTTPConveniences",
    "NsqdProcess",
    "NsqlookupdProcess",
    "all_daemons",
    "find_nsq_binary",
    "free_port",
    "http_request",
]

DEFAULT_MEM_QUEUE_SIZE = 1_000_000
"""nsqd's default is 10,000 messages; tests and benchmarks should not spill to disk by accident."""


class _HTTPGet:
    if TYPE_CHECKING:  # provided by Daemon and by the threaded embedded servers

        def http_get_json(
            self, path: str, params: Mapping[str, str] | None = None, *, timeout: float = 5.0
        ) -> Any:
            """GET ``path`` on the HTTP API; the decoded JSON (NsqDaemonError on a non-200)."""

        def http_post(
            self,
            path: str,
            body: bytes = b"",
            params: Mapping[str, str] | None = None,
            *,
            timeout: float = 5.0,
        ) -> bytes:
            """POST ``body`` to ``path``; the reply body (NsqDaemonError on a non-200)."""

        def logs(self) -> str:
            """What the daemon logged."""


class NsqdHTTPConveniences(_HTTPGet):
    """Test conveniences over nsqd's HTTP API (independent of the client under test), shared by
    :class:`NsqdProcess` and the threaded embedded nsqd."""

    def stats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        """``GET /stats?format=json`` (optionally filtered)."""
        params = {"format": "json"}
        if topic is not None:
            params["topic"] = topic
        if channel is not None:
            params["channel"] = channel
        result: dict[str, Any] = self.http_get_json("/stats", params)
        return result

    def pub(self, topic: str, body: bytes, defer_ms: int | None = None) -> None:
        """Publish one message over HTTP ``/pub``."""
        params = {"topic": topic}
        if defer_ms is not None:
            params["defer"] = str(defer_ms)
        self.http_post("/pub", body, params)


class LookupdHTTPConveniences(_HTTPGet):
    """The same for nsqlookupd: :class:`NsqlookupdProcess` and the threaded embedded lookupd."""

    def nodes(self) -> list[dict[str, Any]]:
        """``GET /nodes``: the producers (nsqd) registered with this lookupd."""
        result = self.http_get_json("/nodes")
        producers: list[dict[str, Any]] = result.get("producers") or []
        return producers

    def lookup(self, topic: str) -> dict[str, Any]:
        """``GET /lookup?topic=``: channels and producers of one topic."""
        result: dict[str, Any] = self.http_get_json("/lookup", {"topic": topic})
        return result

    def wait_for_topic(
        self, topic: str, tcp_addresses: Collection[str] = (), timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Wait until ``/lookup?topic=`` lists a producer of ``topic`` (every nsqd in
        ``tcp_addresses``, "host:port", if given) and return the producers. nsqd registers a
        topic with lookupd a moment after its first publish; until then lookupd answers 404,
        which this treats as "not yet"."""
        deadline = time.monotonic() + timeout
        wanted = set(tcp_addresses)
        seen: set[str] = set()
        while True:
            try:
                producers: list[dict[str, Any]] = self.lookup(topic).get("producers") or []
            except NsqDaemonError:  # 404 TOPIC_NOT_FOUND: not registered yet
                producers = []
            seen = {f"{p['broadcast_address']}:{p['tcp_port']}" for p in producers}
            if producers and wanted <= seen:
                return producers
            if time.monotonic() >= deadline:
                raise NsqDaemonError(
                    f"nsqlookupd lists {sorted(seen)} for topic {topic!r} after {timeout:g}s"
                    + (f", still missing {sorted(wanted - seen)}" if wanted else ""),
                    self.logs(),
                )
            time.sleep(POLL_INTERVAL)


class NsqdProcess(Daemon, NsqdHTTPConveniences):
    """One ``nsqd`` on 127.0.0.1 with its own ports, data folder and log file.

    Ports are picked at construction (``tcp_port``/``http_port``/``https_port`` pin them). The
    data folder is temporary and deleted by ``stop()`` unless ``data_dir`` is given. ``restart()``
    keeps ports and data, so "nsqd died and came back" can be tested; ``kill()`` is the crash.
    """

    program = "nsqd"

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        lookupd_tcp_addresses: Sequence[str] = (),
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        tls_root_ca: Path | None = None,
        tls_required: bool | str = False,
        tls_client_auth_policy: str | None = None,
        auth_http_address: str | Sequence[str] | None = None,
        mem_queue_size: int = DEFAULT_MEM_QUEUE_SIZE,
        node_id: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        tcp_port: int | None = None,
        http_port: int | None = None,
        https_port: int | None = None,
        binary: Path | None = None,
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        super().__init__(
            ports={"tcp": tcp_port, "http": http_port, "https": https_port},
            binary=binary,
            extra_args=extra_args,
            log_path=log_path,
        )
        if data_dir is None:
            self._data_dir = self._workdir / "data"
        else:
            self._data_dir = Path(data_dir)
        self.lookupd_tcp_addresses = list(lookupd_tcp_addresses)
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.tls_root_ca = tls_root_ca
        self.tls_required = tls_required
        self.tls_client_auth_policy = tls_client_auth_policy
        if auth_http_address is None:
            self.auth_http_addresses: list[str] = []
        elif isinstance(auth_http_address, str):
            self.auth_http_addresses = [auth_http_address]
        else:
            self.auth_http_addresses = list(auth_http_address)
        self.mem_queue_size = mem_queue_size
        self.node_id = node_id
        self.https_context: ssl.SSLContext = UNVERIFIED_TLS
        """Used by the HTTP helpers when plain HTTP is refused (``--tls-required=true``); replace
        it with a context holding a client certificate for ``require-verify``."""

    @property
    def https_port(self) -> int:
        """The HTTPS port (reserved always; listened on only when TLS is configured)."""
        return self._ports["https"]

    @property
    def https_address(self) -> str:
        """Listened on only when TLS is configured (``tls_cert``/``tls_key``)."""
        return f"{HOST}:{self.https_port}"

    @property
    def data_dir(self) -> Path:
        """nsqd's ``--data-path`` (temporary unless given; kept by ``restart()`` and ``kill()``)."""
        return self._data_dir

    @property
    def tls_enabled(self) -> bool:
        """True when nsqd was given a certificate (``tls_cert``), so TLS and HTTPS are on."""
        return self.tls_cert is not None

    @property
    def _tls_required_value(self) -> str | None:
        if isinstance(self.tls_required, bool):
            return "true" if self.tls_required else None
        return self.tls_required

    def _prepare_dirs(self) -> None:
        super()._prepare_dirs()
        self._data_dir.mkdir(parents=True, exist_ok=True)

    def _args(self) -> list[str]:
        node_id = self.node_id if self.node_id is not None else self.tcp_port % 1024
        args = [
            f"--tcp-address={self.tcp_address}",
            f"--http-address={self.http_address}",
            f"--https-address={self.https_address}",
            f"--broadcast-address={HOST}",
            f"--data-path={self._data_dir}",
            f"--mem-queue-size={self.mem_queue_size}",
            f"--node-id={node_id}",
        ]
        args += [f"--lookupd-tcp-address={a}" for a in self.lookupd_tcp_addresses]
        if self.tls_cert is not None and self.tls_key is not None:
            args += [f"--tls-cert={self.tls_cert}", f"--tls-key={self.tls_key}"]
        if self.tls_root_ca is not None:
            args.append(f"--tls-root-ca-file={self.tls_root_ca}")
        if self._tls_required_value is not None:
            args.append(f"--tls-required={self._tls_required_value}")
        if self.tls_client_auth_policy is not None:
            args.append(f"--tls-client-auth-policy={self.tls_client_auth_policy}")
        args += [f"--auth-http-address={a}" for a in self.auth_http_addresses]
        return args

    def _plain_http_refused(self) -> bool:
        return self._tls_required_value == "true" or self.tls_client_auth_policy in (
            "require",
            "require-verify",
        )

    def _http_tls(self) -> ssl.SSLContext | None:
        # With --tls-required=true plain HTTP answers 403, so the helpers go through HTTPS.
        return self.https_context if self._plain_http_refused() else None

    def _http_address_for_api(self) -> str:
        return self.https_address if self._plain_http_refused() else self.http_address

    def _confirm_identity(self) -> bool | None:
        if self._plain_http_refused():
            return True  # /info is refused over plain HTTP; the exit check covers this case
        try:
            info = self.http_get_json("/info", timeout=1.0)
        except (OSError, NsqDaemonError, ValueError):
            return None
        return bool(info.get("tcp_port") == self.tcp_port)


class NsqlookupdProcess(Daemon, LookupdHTTPConveniences):
    """One ``nsqlookupd`` on 127.0.0.1 with its own ports and log file."""

    program = "nsqlookupd"

    def __init__(
        self,
        *,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        tcp_port: int | None = None,
        http_port: int | None = None,
        binary: Path | None = None,
    ) -> None:
        super().__init__(
            ports={"tcp": tcp_port, "http": http_port},
            binary=binary,
            extra_args=extra_args,
            log_path=log_path,
        )

    def _args(self) -> list[str]:
        return [
            f"--tcp-address={self.tcp_address}",
            f"--http-address={self.http_address}",
            f"--broadcast-address={HOST}",
        ]

    def wait_for_nodes(self, tcp_addresses: Collection[str], timeout: float = 10.0) -> None:
        """Wait until every nsqd in ``tcp_addresses`` ("host:port") is listed by ``/nodes``."""
        deadline = time.monotonic() + timeout
        wanted = set(tcp_addresses)
        while True:
            seen = {f"{n['broadcast_address']}:{n['tcp_port']}" for n in self.nodes()}
            if wanted <= seen:
                return
            if time.monotonic() >= deadline:
                raise NsqDaemonError(
                    f"nsqlookupd lists {sorted(seen)}, still missing {sorted(wanted - seen)}",
                    self.logs(),
                )
            time.sleep(POLL_INTERVAL)


class NsqCluster:
    """One nsqlookupd and ``nsqd_count`` nsqd registered with it.

    ``start()`` returns once lookupd's ``/nodes`` lists every nsqd. ``nsqd_kwargs`` go to each
    :class:`NsqdProcess`. ``stop()`` stops everything and is always safe.
    """

    def __init__(self, nsqd_count: int = 3, **nsqd_kwargs: Any) -> None:
        self.lookupd = NsqlookupdProcess()
        self.nsqds: list[NsqdProcess] = []
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
    def daemons(self) -> list[Daemon]:
        """The lookupd then every nsqd (a new list)."""
        return [self.lookupd, *self.nsqds]

    def start(self, timeout: float = 20.0) -> None:
        """Start lookupd, then each nsqd, and return once lookupd lists them all.

        ``timeout`` (seconds) bounds the whole start. On failure everything started is stopped
        and the error is re-raised.
        """
        deadline = time.monotonic() + timeout
        try:
            self.lookupd.start(timeout)
            while len(self.nsqds) < self._nsqd_count:
                nsqd = NsqdProcess(
                    lookupd_tcp_addresses=[self.lookupd.tcp_address], **self._nsqd_kwargs
                )
                self.nsqds.append(nsqd)
                nsqd.start(max(deadline - time.monotonic(), 0.1))
            self.lookupd.wait_for_nodes(
                self.nsqd_tcp_addresses, max(deadline - time.monotonic(), 0.1)
            )
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every daemon, nsqd first (``timeout`` seconds each for a clean shutdown).

        Always safe; stops the rest even if one fails, then raises the first error.
        """
        errors: list[BaseException] = []
        for daemon in reversed(self.daemons):
            try:
                daemon.stop(timeout)
            except Exception as exc:  # stop the others anyway
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> NsqCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
