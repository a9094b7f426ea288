"""A bare reference design for the blocking benchmark (``benchmarks.blocking``, case
``bare-bridge-16``): the minimal loop-thread bridge issue 29 measured, so that its 0.82x can be
checked on the machine of the day beside SyncWriter and the other references.

Publishing threads append their PUB and a waiter to a deque and call ``call_soon_threadsafe``
only when no drain is pending; the loop thread's drain writes everything queued at once, in
one ``transport.write``; the protocol releases the waiters of all the OKs one read brings in
one pass. A waiter is a lock the publishing thread blocks on. No timeouts, no admission, no
heartbeats, no errors: it is a floor, not a client.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections import deque

__all__ = ["BareBridge"]

_OK = struct.pack(">ll", 6, 0) + b"OK"


class _Protocol(asyncio.Protocol):
    def __init__(self, waiting: deque[threading.Lock]) -> None:
        self._waiting = waiting
        self._rest = b""

    def data_received(self, data: bytes) -> None:
        buf = self._rest + data if self._rest else data
        n = len(buf) // len(_OK)
        if buf[: n * len(_OK)] != _OK * n:
            raise RuntimeError(f"nsqd answered {buf!r}")
        self._rest = buf[n * len(_OK) :]
        pop = self._waiting.popleft
        for _ in range(n):
            pop().release()


class BareBridge:
    """One connection owned by a loop thread, publishing threads bridged to it (see above)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._queue: deque[tuple[bytes, threading.Lock]] = deque()
        self._waiting: deque[threading.Lock] = deque()
        self._pending = False  # a drain is scheduled (changed under _lock)
        self._lock = threading.Lock()

        async def connect() -> asyncio.Transport:
            transport, _ = await self._loop.create_connection(
                lambda: _Protocol(self._waiting), host, int(port)
            )
            transport.write(b"  V2")
            return transport

        future = asyncio.run_coroutine_threadsafe(connect(), self._loop)
        self._transport = future.result(10)

    def pub(self, command: bytes) -> None:
        me = threading.Lock()
        me.acquire()
        with self._lock:
            self._queue.append((command, me))
            wake = not self._pending
            self._pending = True
        if wake:
            self._loop.call_soon_threadsafe(self._drain)
        me.acquire()  # released by the protocol when the OK comes in

    def _drain(self) -> None:
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            self._pending = False
        self._waiting.extend(waiter for _, waiter in items)
        self._transport.write(b"".join(command for command, _ in items))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._transport.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
