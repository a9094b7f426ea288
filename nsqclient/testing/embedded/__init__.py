"""An in-process nsqd / nsqlookupd 1.3.0 for tests: same wire protocol, same HTTP API.

:class:`EmbeddedNsqd` and :class:`EmbeddedLookupd` run on the current asyncio loop
(``await nsqd.start()`` or ``async with``); :class:`ThreadedEmbeddedNsqd` and
:class:`ThreadedEmbeddedLookupd` run them on a private loop thread behind blocking calls, with the
same names as the real-daemon helpers. ``python -m nsqclient.testing`` starts one from a shell.

Modules: :mod:`.wire` (Go-compatible numbers, quoting, JSON), :mod:`.connection`,
:mod:`.client`, :mod:`.commands`, :mod:`.bodies`, :mod:`.identify`, :mod:`.auth` (the TCP
protocol), :mod:`.topic` and :mod:`.channel` (queues and delivery), :mod:`.httpserver`,
:mod:`.nsqd_http`, :mod:`.stats` (HTTP), :mod:`.lookup_peer` (nsqd -> lookupd), :mod:`.lookupd`,
:mod:`.lookupd_db`, :mod:`.lookupd_http` (nsqlookupd), :mod:`.options`, :mod:`.logs`,
:mod:`.threaded` (blocking wrappers, a cluster), :mod:`.fixtures` (pytest fixtures). No module
imports one above it: each part sees what made it (the nsqd, the lookupd, a topic's broker)
through a protocol of its own (``ClientNsqd``, ``StatsNsqd``, ``ChannelBroker``, ...).
Known differences from the real daemons: ``DIFFERENCES.md`` next to this file.
"""

from __future__ import annotations

from .lookupd import EmbeddedLookupd
from .nsqd import EmbeddedNsqd
from .options import NsqdOptions
from .threaded import ThreadedEmbeddedCluster, ThreadedEmbeddedLookupd, ThreadedEmbeddedNsqd

__all__ = [
    "EmbeddedLookupd",
    "EmbeddedNsqd",
    "NsqdOptions",
    "ThreadedEmbeddedCluster",
    "ThreadedEmbeddedLookupd",
    "ThreadedEmbeddedNsqd",
]
