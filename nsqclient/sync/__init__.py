"""The blocking facade: SyncReader and SyncWriter over the asyncio core on a loop thread.

One background thread (``nsqclient-loop``) per process runs the asyncio core; every sync object
shares it. It starts on first use (creating a SyncReader/SyncWriter starts nothing, so objects
may be created before a server forks) and stops when the last object closes. ``sync_obj.aio`` is
the core object itself, and :func:`run_in_loop` runs a coroutine on that loop, so threads and
coroutines can share connections and the in-flight tracker. After ``os.fork()`` an object
rebuilds itself in the child on first use; objects left open are closed gracefully at exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..message import Message
from ..stats import ConnectionStats, SyncReaderStats, SyncWriterStats, WriterConnectionStats
from .portal import get_loop, run_in_loop
from .reader import SyncReader
from .writer import SyncWriter

__all__ = [
    "ConnectionStats",
    "Message",
    "SyncLookupdHTTPClient",
    "SyncNsqdHTTPClient",
    "SyncReader",
    "SyncReaderStats",
    "SyncWriter",
    "SyncWriterStats",
    "WriterConnectionStats",
    "get_loop",
    "run_in_loop",
]

if TYPE_CHECKING:
    from ..http import SyncLookupdHTTPClient, SyncNsqdHTTPClient


def __getattr__(name: str) -> Any:
    """The HTTP helpers (and httpx) load on first use."""
    if name in ("SyncLookupdHTTPClient", "SyncNsqdHTTPClient"):
        from .. import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
