"""Network faults between a client and nsqd, on demand: :class:`FaultProxy`.

An in-process TCP proxy (asyncio; on the running loop or a thread of its own) that cuts
connections (FIN or RST), stalls them, slows them, drops bytes, refuses new connections and
damages frames toward the client, each fault undone by a call or a ``with`` block, and counts
what it forwarded and did. See docs/testing.md, "Testing your consumer against network faults".
"""

from __future__ import annotations

from .proxy import Fault, FaultCounters, FaultProxy

__all__ = ["Fault", "FaultCounters", "FaultProxy"]
