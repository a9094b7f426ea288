"""Helpers for testing code that uses nsqclient: real nsqd/nsqlookupd processes, an embedded
(in-process) nsqd/nsqlookupd, and pytest fixtures for either.

* Real daemons (binaries from ``$NSQ_BIN_DIR`` or ``$PATH``):
  :class:`NsqdProcess`, :class:`NsqlookupdProcess`, :class:`NsqCluster`.
* Embedded ones (pure Python, no binaries): :class:`EmbeddedNsqd`, :class:`EmbeddedLookupd` on
  your asyncio loop; :class:`ThreadedEmbeddedNsqd`, :class:`ThreadedEmbeddedLookupd`,
  :class:`ThreadedEmbeddedCluster` on a loop thread of their own, with the real ones' API.
* Network faults between a client and any nsqd: :class:`FaultProxy` (:mod:`.faults`).
* Either: :func:`start_nsqd`, :func:`start_lookupd`, :func:`start_cluster` with a backend of
  ``"real"``, ``"embedded"`` or ``"auto"`` (:mod:`.backends`).
* The pytest plugin (:mod:`.plugin`, loaded automatically once nsqclient is installed):
  fixtures ``nsqd``, ``nsqd_factory``, ``nsqlookupd``, ``nsq_cluster``, option ``--nsq-backend``.
* ``python -m nsqclient.testing`` (or ``nsqclient nsqd``) runs the embedded nsqd from a
  shell.

Names are imported lazily, so loading the pytest plugin costs nothing until a fixture is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backends import (
        BACKEND_ENV,
        LookupdServer,
        NsqdServer,
        real_binaries_available,
        resolve_backend,
        start_cluster,
        start_lookupd,
        start_nsqd,
    )
    from .daemons import (
        NsqBinaryNotFound,
        NsqCluster,
        NsqDaemonError,
        NsqdProcess,
        NsqlookupdProcess,
        find_nsq_binary,
    )
    from .embedded import (
        EmbeddedLookupd,
        EmbeddedNsqd,
        ThreadedEmbeddedCluster,
        ThreadedEmbeddedLookupd,
        ThreadedEmbeddedNsqd,
    )
    from .faults import Fault, FaultCounters, FaultProxy

__all__ = [
    "BACKEND_ENV",
    "EmbeddedLookupd",
    "EmbeddedNsqd",
    "Fault",
    "FaultCounters",
    "FaultProxy",
    "LookupdServer",
    "NsqBinaryNotFound",
    "NsqCluster",
    "NsqDaemonError",
    "NsqdProcess",
    "NsqdServer",
    "NsqlookupdProcess",
    "ThreadedEmbeddedCluster",
    "ThreadedEmbeddedLookupd",
    "ThreadedEmbeddedNsqd",
    "find_nsq_binary",
    "real_binaries_available",
    "resolve_backend",
    "start_cluster",
    "start_lookupd",
    "start_nsqd",
]

_WHERE = {
    **dict.fromkeys(
        (
            "BACKEND_ENV",
            "LookupdServer",
            "NsqdServer",
            "real_binaries_available",
            "resolve_backend",
            "start_cluster",
            "start_lookupd",
            "start_nsqd",
        ),
        ".backends",
    ),
    **dict.fromkeys(
        (
            "NsqBinaryNotFound",
            "NsqCluster",
            "NsqDaemonError",
            "NsqdProcess",
            "NsqlookupdProcess",
            "find_nsq_binary",
        ),
        ".daemons",
    ),
    **dict.fromkeys(
        (
            "EmbeddedLookupd",
            "EmbeddedNsqd",
            "ThreadedEmbeddedCluster",
            "ThreadedEmbeddedLookupd",
            "ThreadedEmbeddedNsqd",
        ),
        ".embedded",
    ),
    **dict.fromkeys(("Fault", "FaultCounters", "FaultProxy"), ".faults"),
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
