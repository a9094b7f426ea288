"""A bare reference design for the blocking benchmark (``benchmarks.blocking``, case
``bare-shared-16``): what sharing one socket among publishing threads costs with no library
around it, so that SyncWriter's figure can be read against the same design's floor, not only
against a socket per thread.

The design is the one the door and the read baton implement (:mod:`nsqclient.sync.door`,
:mod:`nsqclient.sync.baton`), with nothing else: one socket; a thread appends its waiter to the
FIFO and sends its PUB under a lock; the waiting threads take turns reading (the reader
releases the waiter of each OK it reads and hands reading to the next waiter when its own is
in). No timeouts, no admission, no heartbeats, no errors: it is a floor, not a client.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import deque

__all__ = ["BareShared"]

_OK = struct.pack(">ll", 6, 0) + b"OK"


class _Waiter:
    __slots__ = ("done", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.done = False


class BareShared:
    """One socket to nsqd shared by publishing threads (see the module docstring)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.sendall(b"  V2")
        self._write = threading.Lock()
        self._state = threading.Lock()  # the FIFO, the reader, the partial reply
        self._fifo: deque[_Waiter] = deque()
        self._reader: _Waiter | None = None
        self._rest = b""

    def pub(self, command: bytes) -> None:
        me = _Waiter()
        with self._write:
            self._fifo.append(me)
            self._sock.sendall(command)
        while True:
            with self._state:
                if me.done:
                    return
                reading = self._reader is None or self._reader is me
                if reading:
                    self._reader = me
            if reading:
                self._read_until(me)
                return
            me.lock.acquire()  # done, or reading passed to this thread

    def _read_until(self, me: _Waiter) -> None:
        while True:
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("nsqd closed the connection")
            buf = self._rest + data if self._rest else data
            n = len(buf) // len(_OK)
            if buf[: n * len(_OK)] != _OK * n:
                raise RuntimeError(f"nsqd answered {buf!r}")
            self._rest = buf[n * len(_OK) :]
            with self._state:
                for _ in range(n):
                    waiter = self._fifo.popleft()
                    waiter.done = True
                    if waiter is not me:
                        waiter.lock.release()
                if me.done:
                    self._reader = None
                    if self._fifo:  # the next waiter reads next
                        self._reader = self._fifo[0]
                        self._reader.lock.release()
                    return

    def close(self) -> None:
        self._sock.close()
