"""The blocking facade: SyncReader and SyncWriter over the asyncio core on a loop thread.

One background thread (``nsqclient-loop``) per process runs the asyncio core; every sync object
shares it. It starts on first use (creating a SyncReader/SyncWriter starts nothing, so objects
may be created before a server forks) and stops when the last object closes. ``sync_obj.aio`` is
the core object itself, and :func:`run_in_loop` runs a coroutine on that loop, so threads and
coroutines can share connections and the in-flight tracker. After ``os.fork()`` an object
rebuilds itself in the child on first use; objects left open are closed gracefully at exit.

The blocking HTTP clients live in :mod:`nsqclient.http`, the ``stats()`` types in
:mod:`nsqclient`.
"""

from __future__ import annotations

from ..message import Message
from .portal import get_loop, run_in_loop
from .reader import SyncReader
from .writer import SyncWriter

__all__ = ["Message", "SyncReader", "SyncWriter", "get_loop", "run_in_loop"]
