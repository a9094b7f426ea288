"""The asyncio core: connections, Writer, Reader and lookupd discovery.

Everything here runs on one event loop and needs no locks; the blocking facade in
:mod:`nsqclient.sync` drives these same objects from a background loop thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..compat import create_reader, create_writer
from ..message import Message
from ..stats import ConnectionStats, ReaderStats, WriterConnectionStats, WriterStats
from .connection import Connection, ConnectionState
from .delivery import MessageSink
from .reader import Reader, ReaderState
from .tracker import MessageTracker
from .writer import Writer

__all__ = [
    "Connection",
    "ConnectionState",
    "ConnectionStats",
    "LookupResult",
    "LookupdHTTPClient",
    "Message",
    "MessageSink",
    "MessageTracker",
    "Node",
    "NsqdHTTPClient",
    "Producer",
    "Reader",
    "ReaderState",
    "ReaderStats",
    "Writer",
    "WriterConnectionStats",
    "WriterStats",
    "create_reader",
    "create_writer",
]

# The HTTP helpers load httpx (about 10 MiB of RSS) only when first used: a Reader or Writer on
# direct nsqd addresses never needs them.
_HTTP_NAMES = frozenset({"LookupResult", "LookupdHTTPClient", "Node", "NsqdHTTPClient", "Producer"})

if TYPE_CHECKING:
    from ..http import LookupdHTTPClient, LookupResult, Node, NsqdHTTPClient, Producer


def __getattr__(name: str) -> Any:
    if name in _HTTP_NAMES:
        from .. import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
