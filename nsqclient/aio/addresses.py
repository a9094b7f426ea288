"""Kept for compatibility: address parsing moved to :mod:`nsqclient.addresses`.

It does no asyncio, so it no longer lives under ``aio``; this module re-exports the same objects
so code importing ``nsqclient.aio.addresses`` keeps working. New code imports
``nsqclient.addresses``.
"""

from __future__ import annotations

from ..addresses import (
    Address,
    AddressLike,
    format_address,
    parse_address,
    parse_addresses,
    parse_http_address,
    parse_http_addresses,
    require_addresses,
)

__all__ = [
    "Address",
    "AddressLike",
    "format_address",
    "parse_address",
    "parse_addresses",
    "parse_http_address",
    "parse_http_addresses",
    "require_addresses",
]
