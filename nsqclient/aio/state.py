"""Where a connection is in its life (its own module: the connection's parts all test it)."""

from __future__ import annotations

import enum

__all__ = ["ConnectionState"]


class ConnectionState(enum.Enum):
    """Where a :class:`Connection` is in its life; ``CONNECTED``/``SUBSCRIBED`` take commands."""

    INIT = "init"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    SUBSCRIBED = "subscribed"
    CLOSING = "closing"
    CLOSED = "closed"
