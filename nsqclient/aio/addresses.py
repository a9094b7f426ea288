"""Kept for compatibility: address parsing moved to :mod:`nsqclient.addresses`.

It does no asyncio, so it no longer lives under ``aio``; this module re-exports the same objects
so code importing ``nsqclient.aio.addresses`` keeps working. New code imports
``nsqclient.addresses``.
"""

from __future__ import annotations

from .. import addresses as _moved
from ..addresses import *  # noqa: F403  (the same objects, under the old name)

__all__ = _moved.__all__
