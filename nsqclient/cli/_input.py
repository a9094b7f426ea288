"""Input for ``nsqclient pub``: sources read in a daemon thread, split into message bodies.

Each delimited piece is one body; a source's last piece needs no delimiter; empty pieces are
skipped (nsqd refuses empty bodies) and counted. A stop request ends the input early.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator, Sequence

from ._running import Stop

__all__ = ["ChunkReader", "bodies"]

_CHUNK = 1 << 16


class ChunkReader:
    """Reads the sources in a daemon thread; chunks cross to the loop with backpressure.

    An empty chunk marks the end of one source. Reads are unbuffered ``os.read`` calls: a daemon
    thread blocked in a buffered reader's lock would abort the interpreter's shutdown, and one
    blocked on an idle terminal must neither keep the process alive nor block the loop.
    """

    def __init__(self, paths: Sequence[str], stop: Stop) -> None:
        self._paths = list(paths) or ["-"]
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self._slots = threading.Semaphore(8)
        self._stop = stop
        thread = threading.Thread(target=self._read, name="nsqclient-pub-input", daemon=True)
        thread.start()

    def _push(self, item: bytes | BaseException | None) -> None:
        self._slots.acquire()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _read(self) -> None:
        try:
            for path in self._paths:
                if path == "-":
                    self._drain(sys.stdin.fileno())
                else:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        self._drain(fd)
                    finally:
                        os.close(fd)
                self._push(b"")
            self._push(None)
        except BaseException as exc:  # reported by the loop side
            try:
                self._push(exc)
            except RuntimeError:  # the loop is gone: the command ended meanwhile
                pass

    def _drain(self, fd: int) -> None:
        while not self._stop.requested:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return
            self._push(chunk)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Chunks until the input ends or a stop is requested (then it ends early)."""
        queue = self._queue
        stopped = asyncio.ensure_future(self._stop.event.wait())
        try:
            while True:
                if queue.empty():
                    get = asyncio.ensure_future(queue.get())
                    await asyncio.wait((get, stopped), return_when=asyncio.FIRST_COMPLETED)
                    if not get.done():
                        get.cancel()
                        return
                    item = get.result()
                else:
                    item = queue.get_nowait()
                self._slots.release()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stopped.cancel()


async def bodies(args: argparse.Namespace, stop: Stop, skipped: list[int]) -> AsyncIterator[bytes]:
    """Messages in input order; ``skipped[0]`` counts empty pieces left out."""
    if args.body:
        for text in args.body:
            if text:
                yield text.encode("utf-8")
            else:
                skipped[0] += 1
        return
    delim: bytes = args.delimiter
    rest = b""
    async for chunk in ChunkReader(args.files, stop).chunks():
        if not chunk:  # end of one source: its last piece needs no delimiter
            if rest:
                yield rest
            rest = b""
            continue
        pieces = (rest + chunk).split(delim)
        rest = pieces.pop()
        for piece in pieces:
            if piece:
                yield piece
            else:
                skipped[0] += 1
