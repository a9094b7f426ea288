"""Compatibility with the asyncnsq and pynsq APIs, so code written for them runs with few edits.

What lives here: the asyncnsq constructors :func:`create_reader` and :func:`create_writer`
(re-exported from :mod:`nsqclient.aio`, where users import them).

What stays where it is, because it is a second name on a core object rather than code of its own
(each is covered by tests/aio and tests/sync):

- ``Reader.subscribe(topic, channel)`` and ``Reader.connect()``: asyncnsq's two-step start;
- ``Reader.clean_close()`` (= ``graceful_close``) and ``Reader.wait_handler_tasks()``: asyncnsq;
- ``Message.finish`` / ``Message.requeue`` (= ``fin`` / ``req``) and ``Message.enable_async``
  (= ``disable_auto_response``): pynsq's names;
- ``NSQHTTPError``, ``NSQHTTPConnectError``, ``NSQHTTPTimeoutError``, ``NSQHTTPProtocolError``
  in ``nsqclient.aio.http._errors``: aliases of the ``HTTP*Error`` classes in the error tree.

asyncnsq's variadic ``mpub(topic, a, b)`` is not kept: ``mpub(topic, [a, b])`` is the one form
in every face, so a single ``str`` or ``bytes`` can be refused instead of split into messages.

New code should use the core names: ``Reader(...)`` + ``start()``, ``Writer(...)`` +
``connect()``, ``fin``/``req``, ``graceful_close``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aio.reader import Reader
    from .aio.writer import Writer

__all__ = ["create_reader", "create_writer"]

#: asyncnsq options that mean nothing here (the loop is the running one, the queue our own)
_ASYNCNSQ_IGNORED = ("loop", "queue", "consumer", "log_level")


async def create_reader(
    nsqd_tcp_addresses: Iterable[object] | str | None = None,
    max_in_flight: int = 1,
    lookupd_http_addresses: Iterable[object] | str | None = None,
    *,
    topic: str | None = None,
    channel: str | None = None,
    **options: Any,
) -> Reader:
    """Build a Reader (asyncnsq's signature); call ``await reader.subscribe(topic, channel)``."""
    from .aio.reader import Reader  # here, not above: nsqclient.aio imports this module

    reader = Reader(
        topic,
        channel,
        nsqd_tcp_addresses=nsqd_tcp_addresses,
        lookupd_http_addresses=lookupd_http_addresses,
        max_in_flight=max_in_flight,
        **options,
    )
    await reader.connect()
    return reader


async def create_writer(
    host: str = "127.0.0.1",
    port: int = 4150,
    *,
    nsqd_tcp_addresses: Iterable[object] | str | None = None,
    **options: Any,
) -> Writer:
    """Connect a Writer, with asyncnsq's signature ``create_writer(host=..., port=...)``."""
    from .aio.writer import Writer

    for name in _ASYNCNSQ_IGNORED:
        options.pop(name, None)
    if nsqd_tcp_addresses is not None:
        writer = Writer(nsqd_tcp_addresses, **options)
    else:
        writer = Writer(host=host, port=port, **options)
    await writer.connect()
    return writer
