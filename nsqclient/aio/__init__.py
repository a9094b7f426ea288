"""The asyncio core: connections, Writer, Reader, lookupd discovery and HTTP helpers.

Everything here runs on one event loop and needs no locks; the blocking facade in
:mod:`nsqclient.sync` drives these same objects from a background loop thread.
"""

from __future__ import annotations

from ..message import Message
from .connection import Connection, ConnectionState
from .delivery import MessageSink
from .http import LookupdHTTPClient, LookupResult, Node, NsqdHTTPClient, Producer
from .reader import Reader, ReaderState, create_reader
from .tracker import MessageTracker
from .writer import Writer, create_writer

__all__ = [
    "Connection",
    "ConnectionState",
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
    "Writer",
    "create_reader",
    "create_writer",
]
