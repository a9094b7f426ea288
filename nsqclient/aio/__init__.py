"""The asyncio core: Writer, Reader and what their handlers and sinks receive.

Everything here runs on one event loop. The blocking facade in :mod:`nsqclient.sync` drives
these same objects from a background loop thread; a Writer connection it shares with publishing
threads takes the locks the facade injects (:mod:`nsqclient.aio.sharing`), and pure asyncio use
takes none. The HTTP clients live in :mod:`nsqclient.http`, the ``stats()`` types and the error
tree in :mod:`nsqclient`, asyncnsq's ``create_reader``/``create_writer`` in
:mod:`nsqclient.compat`.
"""

from __future__ import annotations

from ..message import Message
from .delivery import MessageSink
from .reader import Reader, ReaderState
from .tracker import MessageTracker
from .writer import Writer

__all__ = ["Message", "MessageSink", "MessageTracker", "Reader", "ReaderState", "Writer"]
