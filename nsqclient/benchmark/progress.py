"""The progress line on stderr: rewritten in place on a terminal, one line per scenario otherwise.

It reads the scenario's live counter (:class:`~.params.Probe`) from a daemon thread twice a
second; that is display only, no measurement depends on it.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from .params import Probe

__all__ = ["Progress"]


class Progress:
    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._label = ""
        self._width = 0

    def start(self, index: int, count: int, label: str, total: int, probe: Probe) -> None:
        if not self.enabled:
            return
        self._label = f"[{index}/{count}] {label}"
        if not self.live:
            self._write_line(f"{self._label}: running ({total:,} messages)")
            return
        self._stop.clear()
        started = time.perf_counter()

        def tick() -> None:
            while not self._stop.wait(0.5):
                done = probe.read()
                rate = done / max(1e-9, time.perf_counter() - started)
                self._rewrite(f"{self._label}: {done:,}/{total:,} ({rate:,.0f} msg/s)")

        self._thread = threading.Thread(target=tick, name="bench-progress", daemon=True)
        self._thread.start()

    def finish(self, summary: str) -> None:
        if not self.enabled:
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join(2)
            self._thread = None
        if self.live:
            self._rewrite("")
            self.stream.write("\r")
        self._write_line(f"{self._label}: {summary}")

    def note(self, text: str) -> None:
        if self.enabled:
            self._write_line(text)

    def _rewrite(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
        self._width = 0
