"""Listening sockets made the way Go's ``net.Listen("tcp", address)`` makes nsqd's.

So a script that reaches real nsqd over IPv6 reaches the embedded one too: a wildcard host
(``:4150``, ``0.0.0.0:4150``, ``[::]:4150``) is one dual-stack IPv6 socket (IPv4 and IPv6, shown
as ``[::]:4150``, as nsqd's banner says), a specific address stays that family only
(``127.0.0.1`` is IPv4 only, as on real), and the backlog is the kernel's ``somaxconn`` as Go
reads it (not asyncio's 100). Sockets are made with the protocol named (``IPPROTO_TCP``), so
that asyncio sets ``TCP_NODELAY`` on every accepted connection, as Go does on every TCP
connection: without it a reply written in two pieces (nsqd's snappy chunk header and body, a
deflate block and its flush marker) waited for the client's delayed ACK, 40 ms a publish.
"""

from __future__ import annotations

import socket
from typing import Final

__all__ = ["WILDCARD_HOSTS", "backlog", "bound_address", "listen_socket", "peer_address"]

WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})
_SOMAXCONN: Final = "/proc/sys/net/core/somaxconn"


def backlog() -> int:
    """Go's ``maxListenerBacklog``: the kernel's somaxconn, at most 65535 (else 4096)."""
    try:
        with open(_SOMAXCONN, encoding="ascii") as f:
            value = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 4096
    return min(value, 65535) if value > 0 else 4096


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket for ``host:port``; OSError if it is taken."""
    if host in WILDCARD_HOSTS and socket.has_ipv6:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        except OSError:  # IPv6 disabled in this kernel or namespace: IPv4 only, as Go then does
            return _bound(socket.AF_INET, ("0.0.0.0", port))
        return _finish(sock, ("::", port), dual_stack=True)
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    return _bound(family, address)


def _bound(family: int, address: tuple[object, ...]) -> socket.socket:
    return _finish(
        socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP), address, dual_stack=False
    )


def _finish(sock: socket.socket, address: tuple[object, ...], *, dual_stack: bool) -> socket.socket:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack else 1)
        sock.bind(address)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def bound_address(sock: socket.socket) -> str:
    """What Go's ``listener.Addr()`` prints: ``[::]:4150``, ``127.0.0.1:4150``."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if sock.family == socket.AF_INET6 else f"{host}:{port}"


def peer_address(peer: object) -> tuple[str, str] | None:
    """``(host, "host:port")`` of a ``peername`` as Go prints it: an IPv4 client of a
    dual-stack socket (``::ffff:127.0.0.1``) as plain IPv4, IPv6 in brackets."""
    if not isinstance(peer, tuple) or len(peer) < 2:
        return None
    host = str(peer[0])
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host, (f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}")
