"""Parsing the address forms users pass: ``"host:port"``, ``"tcp://host:port"``, ``("host", port)``,
``"[::1]:4150"``, bare hosts, and lookupd HTTP addresses with or without a scheme.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias, TypeVar

from .errors import ConfigError

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

Address: TypeAlias = tuple[str, int]
AddressLike: TypeAlias = str | tuple[str, int] | list[object]
_T = TypeVar("_T")


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets around IPv6 literals."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(address: object, default_port: int = 4150) -> Address:
    """Return ``(host, port)`` for any accepted form of a TCP address; raise ConfigError naming
    the bad value. An ``http://`` or ``https://`` URL is refused: a TCP address is not a URL,
    and one written as a URL is usually an HTTP address given where nsqd's TCP port belongs."""
    if isinstance(address, str) and address.strip().lower().startswith(("http://", "https://")):
        scheme = address.strip().partition(":")[0]
        raise ConfigError(
            f"address {address!r} is a URL, but nsqd TCP addresses are host:port (for example "
            f"'127.0.0.1:4150'): drop {scheme + '://'!r}, and check the port is nsqd's TCP "
            "port (usually 4150), not an HTTP port (nsqd's 4151, nsqlookupd's 4161)"
        )
    return _parse(address, default_port)


def _parse(address: object, default_port: int) -> Address:
    if isinstance(address, tuple | list):
        if len(address) != 2:
            raise ConfigError(f"address {address!r} must be (host, port)")
        host, port = address
        return _check(str(host), port, address)
    if not isinstance(address, str) or not address.strip():
        raise ConfigError(f"address must be 'host:port' or (host, port), got {address!r}")
    text = address.strip()
    for scheme in ("tcp://", "http://", "https://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
            break
    text = text.rstrip("/")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ConfigError(f"address {address!r} has an unterminated IPv6 bracket")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""  # bare host or bare IPv6 literal
    return _check(host, port_text or default_port, address)


def parse_addresses(
    addresses: Iterable[object] | str | None,
    default_port: int,
    option: str = "nsqd_tcp_addresses",
) -> list[Address]:
    """Addresses in first-seen order, duplicates dropped; ``None``, ``[]`` and ``""`` are ``[]``.

    A blank item in a list (``["  "]``, ``[None]``) is refused, naming ``option``; a client
    left with no address at all is refused by :func:`require_addresses`, so a blank
    environment variable never quietly means some default nsqd.
    """
    if addresses is None:
        return []
    if isinstance(addresses, str):
        addresses = [a for a in addresses.split(",") if a.strip()]
    elif (
        isinstance(addresses, tuple)
        and len(addresses) == 2
        and isinstance(addresses[0], str)
        and isinstance(addresses[1], int)
    ):
        addresses = [addresses]  # one ("host", port) pair, not two addresses
    return _unique(_parse_item(item, default_port, option) for item in addresses)


def parse_http_address(address: object, default_port: int = 4161) -> str:
    """A base URL (``http://host:port``) for an nsqd or nsqlookupd HTTP address."""
    scheme = "http"
    if isinstance(address, str) and address.strip().startswith("https://"):
        scheme = "https"
    host, port = _parse(address, default_port)
    return f"{scheme}://{format_address(host, port)}"


def parse_http_addresses(
    addresses: Iterable[object] | str | None,
    default_port: int,
    option: str = "lookupd_http_addresses",
) -> list[str]:
    """Base URLs for a list of HTTP addresses (a string may hold several, comma-separated),
    duplicates dropped; empty and blank are handled as in :func:`parse_addresses`."""
    if addresses is None:
        return []
    if isinstance(addresses, str):
        items: Iterable[object] = [a for a in addresses.split(",") if a.strip()]
    else:
        items = addresses
    return _unique(parse_http_address(_item(item, option), default_port) for item in items)


def require_addresses(**given: list[Any]) -> None:
    """Refuse a client with nowhere to connect: naming no address is a ConfigError, never a
    silent ``127.0.0.1:4150``."""
    if not any(given.values()):
        names = " or ".join(given)
        raise ConfigError(
            f"no nsqd address given: pass {names} (for a local nsqd, "
            "nsqd_tcp_addresses=['127.0.0.1:4150']); an empty list or a blank environment "
            "variable counts as none"
        )


def _parse_item(item: object, default_port: int, option: str) -> Address:
    return parse_address(_item(item, option), default_port)


def _item(item: object, option: str) -> object:
    if item is None or (isinstance(item, str) and not item.strip()):
        raise ConfigError(f"{option} contains an empty address ({item!r}); remove it or fix it")
    return item


def _unique(parsed: Iterable[_T]) -> list[_T]:
    """In first-seen order, each once: the same node listed twice is one node."""
    return list(dict.fromkeys(parsed))


def _check(host: str, port: object, original: object) -> Address:
    if not host:
        raise ConfigError(f"address {original!r} has no host")
    try:
        number = int(port)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ConfigError(f"address {original!r} has an invalid port {port!r}") from None
    if not 0 < number < 65536:
        raise ConfigError(f"address {original!r} has a port outside 1..65535")
    return host, number
