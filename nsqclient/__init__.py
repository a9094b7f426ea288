"""nsqclient: a fast, dependable NSQ client.

For asyncio (:mod:`nsqclient.aio`) and for blocking code (:mod:`nsqclient.sync`), over one engine
and a protocol layer with no I/O (:mod:`nsqclient.protocol`). Each public name has one home,
listed in docs/architecture.md ("Where each public name lives"): the option object, the delivered
``Message`` and the error tree here; the ``stats()`` types in :mod:`nsqclient.stats`; the HTTP
clients in :mod:`nsqclient.http`; other clients' names in :mod:`nsqclient.compat`.
"""

from __future__ import annotations

from ._version import __version__
from .config import Config
from .errors import *  # noqa: F403  (the error tree is part of the top-level API)
from .errors import __all__ as _errors_all
from .message import Message
from .options import ConfigOptions

__all__ = ["Config", "ConfigOptions", "Message", "__version__", *_errors_all]
