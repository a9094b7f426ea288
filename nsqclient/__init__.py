"""nsqclient: a fast, dependable NSQ client.

For asyncio (:mod:`nsqclient.aio`) and for blocking code (:mod:`nsqclient.sync`), over one engine
and a protocol layer with no I/O (:mod:`nsqclient.protocol`). Each public name has one home,
listed in docs/architecture.md ("Where each public name lives"): the option object, the delivered
``Message`` and the error tree here; the ``stats()`` types in :mod:`nsqclient.stats`; the HTTP
clients in :mod:`nsqclient.http`; other clients' names in :mod:`nsqclient.compat`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ._version import __version__
from .config import Config
from .errors import *  # noqa: F403  (the error tree is part of the top-level API)
from .errors import __all__ as _errors_all
from .message import Message
from .options import ConfigOptions

__all__ = ["Config", "ConfigOptions", "Message", "__version__", *_errors_all]

#: names people look for here (other clients export them at the top), and their one home
_HOMES = {
    **dict.fromkeys(("Reader", "Writer", "ReaderState", "MessageSink", "MessageTracker"), "aio"),
    **dict.fromkeys(("SyncReader", "SyncWriter", "run_in_loop", "get_loop"), "sync"),
    **dict.fromkeys(
        (
            "NsqdHTTPClient",
            "LookupdHTTPClient",
            "SyncNsqdHTTPClient",
            "SyncLookupdHTTPClient",
            "LookupResult",
            "Node",
            "Producer",
        ),
        "http",
    ),
    **dict.fromkeys(
        (
            "ReaderStats",
            "WriterStats",
            "SyncReaderStats",
            "SyncWriterStats",
            "ConnectionStats",
            "WriterConnectionStats",
        ),
        "stats",
    ),
    **dict.fromkeys(
        ("create_reader", "create_writer", "AsyncnsqReader", "PynsqMessageNames"), "compat"
    ),
}
_OTHER_FACE = {"Reader": "SyncReader", "Writer": "SyncWriter"}


def _where(name: str) -> str | None:
    home = _HOMES.get(name)
    if home is None:
        return None
    text = f"nsqclient has no {name}: it lives in nsqclient.{home}"
    text += f" (from nsqclient.{home} import {name})"
    other = _OTHER_FACE.get(name)
    if other is not None:
        text += f" for asyncio; for blocking code, from nsqclient.sync import {other}"
    return text


if not TYPE_CHECKING:  # type checkers keep reporting the missing name themselves

    def __getattr__(name: str) -> object:
        """A name that lives in a subpackage says where (module ``__getattr__``, PEP 562).

        ``from nsqclient import Reader`` gets an ImportError saying so: the import machinery
        asks ``hasattr`` first (``_handle_fromlist``) and would replace an AttributeError with
        its own "cannot import name". Any other access gets an AttributeError with the same
        text, so ``hasattr``/``getattr(..., default)`` keep working.
        """
        text = _where(name)
        if text is None:
            raise AttributeError(f"module 'nsqclient' has no attribute {name!r}", name=name)
        if sys._getframe(1).f_code.co_name == "_handle_fromlist":
            raise ImportError(text, name="nsqclient")
        raise AttributeError(text, name=name)
