"""A server-side TLS upgrade that, like nsqd, tells the client why a handshake was refused.

asyncio's ``loop.start_tls`` drops the connection when OpenSSL refuses a handshake, leaving the
alert OpenSSL queued (e.g. ``protocol_version`` for a TLS version below ``--tls-min-version``)
unsent, so the client sees an EOF or a reset. Go's ``tls.Conn`` sends the alert, and nsqd then
writes ``E_IDENTIFY_FAILED IDENTIFY failed <reason>`` in plaintext before closing. Here the same
upgrade runs through a small ``SSLProtocol`` subclass that writes the alert and that frame before
asyncio closes the socket. This needs the standard library's event loop (Python 3.11+'s
``sslproto``); any other loop (uvloop) gets plain ``start_tls``, without the alert.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import base_events, sslproto
from collections.abc import Callable
from typing import Any

__all__ = ["start_tls_server"]


class _AlertingProtocol(sslproto.SSLProtocol):
    """Flushes OpenSSL's alert (and ``after_alert``'s bytes) when the handshake fails."""

    after_alert: Callable[[BaseException], bytes] | None = None

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        transport: Any = getattr(self, "_transport", None)
        if handshake_exc is not None and transport is not None and not transport.is_closing():
            try:
                self._process_outgoing()  # type: ignore[attr-defined]  # the queued alert
                if self.after_alert is not None:
                    transport.write(self.after_alert(handshake_exc))
            except Exception:  # best effort: the close below happens anyway
                pass
        super()._on_handshake_complete(handshake_exc)


def _standard_loop(loop: asyncio.AbstractEventLoop) -> bool:
    start_tls = getattr(type(loop), "start_tls", None)
    return isinstance(loop, base_events.BaseEventLoop) and (
        start_tls is base_events.BaseEventLoop.start_tls
    )


async def start_tls_server(
    loop: asyncio.AbstractEventLoop,
    transport: asyncio.Transport,
    protocol: asyncio.BaseProtocol,
    context: ssl.SSLContext,
    *,
    handshake_timeout: float,
    after_alert: Callable[[BaseException], bytes] | None = None,
) -> asyncio.Transport | None:
    """``loop.start_tls(..., server_side=True)``, sending the alert of a refused handshake and
    then ``after_alert(exc)``'s bytes in plaintext (nsqd's error frame). Raises as start_tls."""
    if not _standard_loop(loop) or not getattr(transport, "_start_tls_compatible", False):
        return await loop.start_tls(
            transport, protocol, context, server_side=True, ssl_handshake_timeout=handshake_timeout
        )
    waiter = loop.create_future()
    ssl_protocol = _AlertingProtocol(
        loop,
        protocol,
        context,
        waiter,
        True,
        None,
        ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]  # typeshed: int
        call_connection_made=False,
    )
    ssl_protocol.after_alert = after_alert
    # the same steps as BaseEventLoop.start_tls
    transport.pause_reading()
    transport.set_protocol(ssl_protocol)
    made = loop.call_soon(ssl_protocol.connection_made, transport)
    resumed = loop.call_soon(transport.resume_reading)
    try:
        await waiter
    except BaseException:
        transport.close()
        made.cancel()
        resumed.cancel()
        raise
    app_transport: asyncio.Transport = ssl_protocol._app_transport
    return app_transport
