"""Options of the embedded nsqd, named and defaulted like nsqd's flags (durations in ms).

:meth:`NsqdOptions.config_value` answers ``GET /config/<opt>`` with the Go-typed value nsqd
would return (durations as integer nanoseconds).
"""

from __future__ import annotations

import dataclasses
import re
import socket
import ssl
from collections.abc import Collection, Sequence
from typing import Any, Final

__all__ = ["TLS_MIN_VERSIONS", "NsqdOptions", "go_duration_ms", "parse_flags", "split_address"]

_NS_PER_MS = 1_000_000


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:4150"`` for IPv6) to ``(host, port)``."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


# --tls-min-version: the ssl minimum and the value /config/tls_min_version reports (Go's uint16).
# OpenSSL 3 builds usually lack SSL 3.0, so "ssl3.0" allows what the build still has (TLS 1.0).
TLS_MIN_VERSIONS: Final = {
    "ssl3.0": (ssl.TLSVersion.MINIMUM_SUPPORTED, 0x0300),
    "tls1.0": (ssl.TLSVersion.TLSv1, 0x0301),
    "tls1.1": (ssl.TLSVersion.TLSv1_1, 0x0302),
    "tls1.2": (ssl.TLSVersion.TLSv1_2, 0x0303),
    "tls1.3": (ssl.TLSVersion.TLSv1_3, 0x0304),
}


@dataclasses.dataclass
class NsqdOptions:
    """Everything that shapes the embedded nsqd's behaviour. Durations are milliseconds."""

    tcp_address: str = "127.0.0.1:0"
    http_address: str = "127.0.0.1:0"
    https_address: str | None = None
    broadcast_address: str | None = None
    broadcast_tcp_port: int = 0  # 0: the port listened on, as nsqd
    broadcast_http_port: int = 0
    lookupd_tcp_addresses: tuple[str, ...] = ()
    lookupd_ping_interval: int = 15_000
    node_id: int = 0
    msg_timeout: int = 60_000
    max_msg_timeout: int = 900_000
    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_req_timeout: int = 3_600_000
    heartbeat_interval: int = 30_000  # nsqd's ClientTimeout / 2; no flag
    max_heartbeat_interval: int = 60_000
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65_536
    max_output_buffer_timeout: int = 30_000
    min_output_buffer_timeout: int = 25
    output_buffer_timeout: int = 250
    max_channel_consumers: int = 0
    mem_queue_size: int = 10_000
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_required: bool | str = False  # True, False or "tcp-https"
    tls_client_auth_policy: str | None = None
    tls_root_ca_file: str | None = None
    tls_min_version: str = "tls1.0"
    auth_http_addresses: tuple[str, ...] = ()
    http_client_connect_timeout: int = 2_000
    http_client_request_timeout: int = 5_000
    snappy: bool = True
    deflate: bool = True
    max_deflate_level: int = 6
    log_level: int = 2  # nsqd's lg.INFO
    log_prefix: str = "[nsqd] "
    # nsqd's queue scan (queueScanLoop): timeouts and deferred messages are found by sampling
    # channels every interval; new channels join the sample at the next refresh. The interval,
    # refresh and dirty share are not flags in nsqd (here keyword arguments, in ms).
    queue_scan_interval: int = 100
    queue_scan_refresh_interval: int = 5_000
    queue_scan_selection_count: int = 20
    queue_scan_worker_pool_max: int = 4
    queue_scan_dirty_percent: float = 0.25
    precise_timeouts: bool = False  # True: one exact timer per channel instead (faster tests)

    def __post_init__(self) -> None:
        if isinstance(self.tls_required, str) and self.tls_required != "tcp-https":
            self.tls_required = self.tls_required.lower() in ("1", "t", "true")
        if not 1 <= self.max_deflate_level <= 9:
            raise ValueError("--max-deflate-level must be [1,9]")
        if not 0 <= self.node_id < 1024:
            raise ValueError("--node-id must be [0,1024)")
        if self.tls_client_auth_policy and not self.tls_required:
            self.tls_required = True
        if self.tls_required and not (self.tls_cert and self.tls_key):
            raise ValueError("cannot require TLS client connections without TLS key and cert")
        if self.tls_client_auth_policy not in (None, "", "require", "require-verify"):
            raise ValueError("tls_client_auth_policy must be 'require' or 'require-verify'")
        self.tls_min_version = self.tls_min_version.lower()
        if self.tls_min_version not in TLS_MIN_VERSIONS:
            choices = ", ".join(TLS_MIN_VERSIONS)
            raise ValueError(f"--tls-min-version {self.tls_min_version!r}: use one of {choices}")
        split_address(self.tcp_address)
        split_address(self.http_address)
        self.lookupd_tcp_addresses = tuple(self.lookupd_tcp_addresses)
        self.auth_http_addresses = tuple(self.auth_http_addresses)

    def config_value(self, name: str, *, tcp_port: int, http_port: int) -> tuple[bool, Any]:
        """``(found, value)`` for an nsqd config name (flag name with ``-`` as ``_``)."""
        ms = _NS_PER_MS
        values: dict[str, Any] = {
            "id": self.node_id,
            "log_level": self.log_level,
            "log_prefix": self.log_prefix,
            "tcp_address": self.tcp_address,
            "http_address": self.http_address,
            "https_address": self.https_address or "",
            "broadcast_address": self.broadcast_address or socket.gethostname(),
            "broadcast_tcp_port": tcp_port,
            "broadcast_http_port": http_port,
            "nsqlookupd_tcp_addresses": list(self.lookupd_tcp_addresses),
            "auth_http_addresses": list(self.auth_http_addresses),
            "http_client_connect_timeout": self.http_client_connect_timeout * ms,
            "http_client_request_timeout": self.http_client_request_timeout * ms,
            "data_path": "",
            "mem_queue_size": self.mem_queue_size,
            "max_bytes_per_file": 104_857_600,
            "sync_every": 2500,
            "sync_timeout": 2000 * ms,
            "queue_scan_selection_count": self.queue_scan_selection_count,
            "queue_scan_worker_pool_max": self.queue_scan_worker_pool_max,
            "msg_timeout": self.msg_timeout * ms,
            "max_msg_timeout": self.max_msg_timeout * ms,
            "max_msg_size": self.max_msg_size,
            "max_body_size": self.max_body_size,
            "max_req_timeout": self.max_req_timeout * ms,
            "max_heartbeat_interval": self.max_heartbeat_interval * ms,
            "max_rdy_count": self.max_rdy_count,
            "max_output_buffer_size": self.max_output_buffer_size,
            "max_output_buffer_timeout": self.max_output_buffer_timeout * ms,
            "min_output_buffer_timeout": self.min_output_buffer_timeout * ms,
            "output_buffer_timeout": self.output_buffer_timeout * ms,
            "max_channel_consumers": self.max_channel_consumers,
            "statsd_address": "",
            "statsd_prefix": "nsq.%s",
            "statsd_interval": 60_000 * ms,
            "statsd_mem_stats": True,
            "statsd_udp_packet_size": 508,
            "statsd_exclude_ephemeral": False,
            "e2e_processing_latency_window_time": 600_000 * ms,
            "e2e_processing_latency_percentiles": None,
            "tls_cert": self.tls_cert or "",
            "tls_key": self.tls_key or "",
            "tls_client_auth_policy": self.tls_client_auth_policy or "",
            "tls_root_ca_file": self.tls_root_ca_file or "",
            "tls_required": {False: 0, "tcp-https": 1, True: 2}[self.tls_required],
            "tls_min_version": TLS_MIN_VERSIONS[self.tls_min_version][1],
            "deflate": self.deflate,
            "max_deflate_level": self.max_deflate_level,
            "snappy": self.snappy,
        }
        if name not in values:
            return False, None
        return True, values[name]


_GO_UNITS = {"ns": 1e-6, "us": 1e-3, "\u00b5s": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h)")
DURATION_FLAGS = frozenset(
    {
        "msg_timeout",
        "max_msg_timeout",
        "max_req_timeout",
        "max_heartbeat_interval",
        "max_output_buffer_timeout",
        "min_output_buffer_timeout",
        "output_buffer_timeout",
        "http_client_connect_timeout",
        "http_client_request_timeout",
        "inactive_producer_timeout",
        "tombstone_lifetime",
        "queue_scan_interval",
        "queue_scan_refresh_interval",
    }
)
LIST_FLAGS = {
    "lookupd_tcp_address": "lookupd_tcp_addresses",
    "auth_http_address": "auth_http_addresses",
}
_LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}


def go_duration_ms(text: str) -> int:
    """A Go duration (``"1m30s"``, ``"500ms"``, ``"0"``) in milliseconds."""
    text = text.strip()
    if text == "0":
        return 0
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration {text!r}")
    return round(sum(float(n) * _GO_UNITS[u] for n, u in parts))


def parse_flags(
    args: Sequence[str], known: Collection[str], ignored: Collection[str] = ()
) -> dict[str, Any]:
    """Daemon flags (``--msg-timeout=1s``, ``--snappy=false``, ``--lookupd-tcp-address a``) as
    option keyword arguments. Flags in ``ignored`` (no effect in memory) are dropped; anything
    else unknown is an error."""
    out: dict[str, Any] = {}
    items = list(args)
    while items:
        flag = items.pop(0)
        if not flag.startswith("-"):
            raise ValueError(f"unexpected argument {flag!r}")
        name, sep, value = flag.lstrip("-").partition("=")
        key = name.replace("-", "_")
        if not sep and key not in ("snappy", "deflate", "tls_required"):
            if not items:
                raise ValueError(f"flag {flag} needs a value")
            value = items.pop(0)
        elif not sep:
            value = "true"
        if key in ignored:
            continue
        if key in LIST_FLAGS:
            out.setdefault(LIST_FLAGS[key], []).append(value)
        elif key not in known:
            raise ValueError(f"flag --{name} is not supported by the embedded server")
        elif key in DURATION_FLAGS:
            out[key] = go_duration_ms(value)
        elif key == "log_level":
            if value.lower() not in _LOG_LEVELS:
                raise ValueError(f"--log-level {value!r}: use one of {', '.join(_LOG_LEVELS)}")
            out[key] = _LOG_LEVELS[value.lower()]
        elif value.lower() in ("true", "false") and key != "tls_required":
            out[key] = value.lower() == "true"
        elif value.lstrip("-").isdigit():
            out[key] = int(value)
        else:
            out[key] = value
    return out
