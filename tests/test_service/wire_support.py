"""Just enough of the NSQ TCP protocol, with the standard library only, to check the test daemons.

Deliberately independent of :mod:`nsqclient.protocol`: these tests check the infrastructure
(certificates, auth server, daemons), so they must not depend on the code the infrastructure
exists to test. Frames are ``[int32 size][int32 type][payload]`` (nsq-protocol.md §2.3).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

MAGIC = b"  V2"
FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2
TIMEOUT = 10.0


def connect(address: str, timeout: float = TIMEOUT) -> socket.socket:
    """Open a connection to nsqd and send the protocol magic."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.sendall(MAGIC)
    return sock


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """(frame type, payload) of the next frame, skipping heartbeats."""
    while True:
        size, frame_type = struct.unpack(">ii", recv_exact(sock, 8))
        payload = recv_exact(sock, size - 4)
        if (frame_type, payload) != (FRAME_RESPONSE, b"_heartbeat_"):
            return frame_type, payload


def send(sock: socket.socket, line: bytes, body: bytes | None = None) -> None:
    data = line + b"\n"
    if body is not None:
        data += struct.pack(">I", len(body)) + body
    sock.sendall(data)


def identify(sock: socket.socket, **fields: Any) -> dict[str, Any]:
    """IDENTIFY with feature negotiation; returns nsqd's JSON reply."""
    send(sock, b"IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode())
    frame_type, payload = read_frame(sock)
    assert frame_type == FRAME_RESPONSE, payload
    reply: dict[str, Any] = json.loads(payload)
    return reply


def auth(sock: socket.socket, secret: bytes) -> tuple[int, bytes]:
    send(sock, b"AUTH", secret)
    return read_frame(sock)
