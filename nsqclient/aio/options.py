"""Checking a client's addresses and options once, into what the Reader or Writer is built from.

The core Reader and Writer run these checks in their constructors; the blocking facade runs them
at once in the caller's thread (it builds its core object later, on the loop thread) and hands
the result over, so nothing is built twice. The checks are pure pieces run in one order
(``Config`` was built already): IDENTIFY options and their ranges, topic and channel names, the
TLS context, the Reader's need for heartbeats, then the address lists. No connection, queue or
timer is made.

The TLS context is the one piece that touches the filesystem (``tls_ca_file``, ``tls_cert_file``
and ``tls_key_file`` are read), only when ``tls_v1`` is on and no ``tls_context`` given: a missing
or bad certificate file fails at construction, not at the first connect on the loop thread.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..addresses import Address, parse_addresses, parse_http_addresses, require_addresses
from ..config import Config
from ..errors import ConfigError
from ..protocol.names import validate_channel, validate_topic
from .tls import make_ssl_context

if TYPE_CHECKING:
    from ..protocol.identify import IdentifyOptions

__all__ = ["ClientOptions", "validate_client_options"]


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """A client's checked options: what its connections are made with, and where to."""

    config: Config
    identify: IdentifyOptions
    ssl_context: ssl.SSLContext | None
    nsqd_tcp_addresses: list[Address]
    lookupd_http_addresses: list[str]
    http_fallback_addresses: list[str]
    consumer: bool  # a Reader's (its connections SUB), else a Writer's


def validate_client_options(
    config: Config,
    *,
    nsqd_tcp_addresses: Iterable[object] | str | None,
    lookupd_http_addresses: Iterable[object] | str | None,
    http_fallback_addresses: Iterable[object] | str | None = None,
    topic: str | None = None,
    channel: str | None = None,
    consumer: bool = False,
    extra_nsqd: Sequence[Address] = (),
) -> ClientOptions:
    """Raise what the core Reader (``consumer=True``) or Writer would raise for these options;
    return them checked.

    ``topic`` and ``channel`` are checked when given; ``http_fallback_addresses`` is a Writer's,
    as is ``extra_nsqd`` (asyncnsq's ``host``/``port``, added after the list when not in it).
    """
    # here, not at import: IDENTIFY (and json) load with the first Reader or Writer
    from ..protocol.identify import IdentifyOptions

    identify = IdentifyOptions.from_config(config)
    if topic is not None:
        validate_topic(topic)
    if channel is not None:
        validate_channel(channel)
    ssl_context = make_ssl_context(config)
    if consumer and identify.heartbeat_interval == -1:
        raise ConfigError("a Reader needs heartbeats: nsqd refuses SUB with heartbeat_interval=-1")
    nsqd = parse_addresses(nsqd_tcp_addresses, 4150)
    nsqd += [addr for addr in extra_nsqd if addr not in nsqd]
    lookupd = parse_http_addresses(lookupd_http_addresses, 4161)
    fallback = parse_http_addresses(http_fallback_addresses, 4151, "http_fallback_addresses")
    require_addresses(nsqd_tcp_addresses=nsqd, lookupd_http_addresses=lookupd)
    return ClientOptions(config, identify, ssl_context, nsqd, lookupd, fallback, consumer)
