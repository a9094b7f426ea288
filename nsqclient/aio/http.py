"""Kept for compatibility: the HTTP clients moved to :mod:`nsqclient.http`.

That package holds the blocking clients and an I/O-free core as well as the asyncio ones, so it
no longer lives under ``aio``; this module re-exports the same objects so code importing
``nsqclient.aio.http`` keeps working. New code imports ``nsqclient.http``.
"""

from __future__ import annotations

from .. import http as _moved
from ..http import *  # noqa: F403  (the same objects, under the old name)

__all__ = _moved.__all__
