"""Readers' and Writers' keyword options as a TypedDict, so that a type checker refuses a
misspelt option (``Reader(..., max_inflight=5)``) that ``**options: Any`` let through.

``ConfigOptions`` lists :class:`~nsqclient.config.Config`'s fields with their types; the
constructors take ``**options: Unpack[ConfigOptions]``. Every client kind takes every option
(one Config serves Readers and Writers alike), so one TypedDict serves them all;
``ReaderOptions`` and ``WriterOptions`` name it for each kind. ``tests/test_typed_options.py``
keeps it equal to Config (it prints the lines to paste when a field is added).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import ssl

    from .config import BackoffStrategy, Duration, RdyStrategy

__all__ = ["ConfigOptions", "ReaderOptions", "WriterOptions"]


class ConfigOptions(TypedDict, total=False):
    """Every :class:`~nsqclient.config.Config` field, as keyword options (all optional)."""

    client_id: str | None
    hostname: str | None
    user_agent: str | None
    feature_negotiation: bool
    heartbeat_interval: Duration
    output_buffer_size: int
    output_buffer_timeout: Duration
    sample_rate: int
    msg_timeout: Duration
    tls_v1: bool
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None
    tls_insecure_skip_verify: bool
    tls_server_hostname: str | None
    tls_min_version: str | None
    tls_context: ssl.SSLContext | None
    snappy: bool
    deflate: bool
    deflate_level: int
    auth_secret: str | bytes | None
    dial_timeout: Duration
    read_timeout: Duration
    write_timeout: Duration
    reconnect_delay: Duration
    max_reconnect_delay: Duration
    max_msg_size: int
    max_body_size: int
    max_frame_size: int | None
    max_in_flight: int
    max_attempts: int
    lookupd_poll_interval: Duration
    lookupd_poll_jitter: float
    lookupd_poll_timeout: Duration
    default_requeue_delay: Duration
    max_requeue_delay: Duration
    backoff_strategy: BackoffStrategy
    backoff_multiplier: Duration
    max_backoff_duration: Duration
    low_rdy_idle_timeout: Duration
    low_rdy_timeout: Duration
    rdy_redistribute_interval: Duration
    rdy_strategy: RdyStrategy
    close_timeout: Duration
    publish_timeout: Duration
    max_pending_publishes: int
    coalesce: bool
    linger: Duration


ReaderOptions = ConfigOptions
WriterOptions = ConfigOptions
