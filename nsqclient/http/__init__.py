"""HTTP helpers for nsqd and nsqlookupd, for asyncio and for blocking code.

:class:`NsqdHTTPClient` / :class:`SyncNsqdHTTPClient` publish, read ``/stats`` and administer
topics and channels; :class:`LookupdHTTPClient` / :class:`SyncLookupdHTTPClient` discover
producers and edit lookupd's registry. Both flavours share one I/O-free core (``_core``): a method
builds a validated request and the core reads the answer in either server response format, so the
flavours differ only in how bytes move. Every failure is an :class:`nsqclient.HTTPError` (the
error tree's, imported from :mod:`nsqclient`).

Layout: ``_core`` (requests and answers, no I/O), ``_models`` (Producer, Node, LookupResult),
``_errors``, ``_transport`` (httpx shims), ``_wire`` (the publish calls' own keep-alive HTTP/1.1
connections), ``_clients`` (the public classes).
"""

from __future__ import annotations

from ._clients import LookupdHTTPClient, NsqdHTTPClient, SyncLookupdHTTPClient, SyncNsqdHTTPClient
from ._models import LookupResult, Node, Producer

__all__ = [
    "LookupResult",
    "LookupdHTTPClient",
    "Node",
    "NsqdHTTPClient",
    "Producer",
    "SyncLookupdHTTPClient",
    "SyncNsqdHTTPClient",
]
