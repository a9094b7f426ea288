"""nsqclient: a fast, dependable NSQ client.

For asyncio (:mod:`nsqclient.aio`) and for blocking code (:mod:`nsqclient.sync`), over one engine
and a protocol layer with no I/O (:mod:`nsqclient.protocol`).
"""

from __future__ import annotations

__version__ = "0.1.0"

from .config import Config
from .errors import *  # noqa: F403  (the error tree is part of the top-level API)
from .errors import __all__ as _errors_all
from .message import Message
from .options import ConfigOptions
from .stats import *  # noqa: F403  (the stats() types, named where the clients are)
from .stats import __all__ as _stats_all

__all__ = ["Config", "ConfigOptions", "Message", "__version__", *_errors_all, *_stats_all]
