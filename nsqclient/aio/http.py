"""Kept for compatibility: the HTTP clients moved to :mod:`nsqclient.http`.

That package holds the blocking clients and an I/O-free core as well as the asyncio ones, so it
no longer lives under ``aio``; this module re-exports the same objects so code importing
``nsqclient.aio.http`` keeps working. New code imports ``nsqclient.http``.
"""

from __future__ import annotations

from ..http import (
    ACCEPT,
    Call,
    HTTPConnectError,
    HTTPError,
    HTTPProtocolError,
    HTTPTimeoutError,
    LookupdHTTPClient,
    LookupResult,
    Node,
    NsqdHTTPClient,
    Producer,
    SyncLookupdHTTPClient,
    SyncNsqdHTTPClient,
    decode_response,
)

__all__ = [
    "ACCEPT",
    "Call",
    "HTTPConnectError",
    "HTTPError",
    "HTTPProtocolError",
    "HTTPTimeoutError",
    "LookupResult",
    "LookupdHTTPClient",
    "Node",
    "NsqdHTTPClient",
    "Producer",
    "SyncLookupdHTTPClient",
    "SyncNsqdHTTPClient",
    "decode_response",
]
