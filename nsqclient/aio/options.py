"""Checking a client's addresses and options without building a Reader or Writer.

The blocking facade builds its core object later, on the loop thread, but must refuse bad input
at once, in the caller's thread. This runs the same checks the core's constructor runs, in the
same order, from the same pure pieces (``Config`` was built already): IDENTIFY options and their
ranges, the TLS context, the Reader's need for heartbeats, topic and channel names, and the
address lists. It builds no connection, queue or timer.

The TLS context is the one piece that touches the filesystem (``tls_ca_file``, ``tls_cert_file``
and ``tls_key_file`` are read). It is built here anyway, and thrown away: a missing or bad
certificate file must fail at construction, as it does for the asyncio classes, not at the first
connect on the loop thread. Nothing is read unless ``tls_v1`` is on and no ``tls_context`` given.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..addresses import parse_addresses, parse_http_addresses, require_addresses
from ..config import Config
from ..errors import ConfigError
from ..protocol.identify import IdentifyOptions
from ..protocol.names import validate_channel, validate_topic
from .tls import make_ssl_context

__all__ = ["validate_client_options"]


def validate_client_options(
    config: Config,
    *,
    nsqd_tcp_addresses: Iterable[object] | str | None,
    lookupd_http_addresses: Iterable[object] | str | None,
    http_fallback_addresses: Iterable[object] | str | None = None,
    topic: str | None = None,
    channel: str | None = None,
    consumer: bool = False,
) -> None:
    """Raise what the core Reader (``consumer=True``) or Writer would raise for these options.

    ``topic`` and ``channel`` are checked when given; ``http_fallback_addresses`` is a Writer's.
    """
    identify = IdentifyOptions.from_config(config)
    if topic is not None:
        validate_topic(topic)
    if channel is not None:
        validate_channel(channel)
    make_ssl_context(config)
    if consumer and identify.heartbeat_interval == -1:
        raise ConfigError("a Reader needs heartbeats: nsqd refuses SUB with heartbeat_interval=-1")
    nsqd = parse_addresses(nsqd_tcp_addresses, 4150)
    lookupd = parse_http_addresses(lookupd_http_addresses, 4161)
    parse_http_addresses(http_fallback_addresses, 4151, "http_fallback_addresses")
    require_addresses(nsqd_tcp_addresses=nsqd, lookupd_http_addresses=lookupd)
