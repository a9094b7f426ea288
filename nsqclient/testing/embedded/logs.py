"""Recent log lines of an embedded daemon, formatted like nsqd's, readable from any thread.

Lines are kept in a bounded buffer (what ``logs()`` returns, as a real daemon's captured stderr
would be) and also passed at DEBUG level to the ``logging`` logger
``nsqclient.testing.embedded.<name>`` (DEBUG, so that a client's protocol errors, which nsqd logs
as ERROR, do not reach stderr through logging's last-resort handler).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

__all__ = ["LogBuffer", "log_line"]

_LEVELS: Final = {"DEBUG": 1, "INFO": 2, "WARN": 3, "ERROR": 4, "FATAL": 5}
_LABELS: Final = {"WARN": "WARNING"}  # Go's lg.LogLevel.String()


def log_line(prefix: str, level: str, text: str) -> str:
    """One line as Go's ``log`` with nsqd's flags prints it: ``PREFIX2024/01/02 15:04:05.000000
    INFO: text`` (``WARN`` shows as ``WARNING``, as nsqd's ``lg`` names it)."""
    now = time.time()
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now))
    return f"{prefix}{stamp}.{int(now % 1 * 1e6):06d} {_LABELS.get(level, level)}: {text}"


class LogBuffer:
    """``log(level, text)`` appends ``[name] 2024/01/02 15:04:05.000000 LEVEL: text`` (the
    prefix is ``--log-prefix``; lines below ``level``, nsqd's ``--log-level``, are dropped)."""

    def __init__(self, name: str, *, maxlen: int = 5000) -> None:
        self.name = name
        self.prefix = f"[{name}] "
        self.level = 2
        self.echo: Callable[[str], None] | None = None  # also hand each line here (CLI: stderr)
        self._lines: deque[tuple[int, str]] = deque(maxlen=maxlen)  # (offset, line)
        self._size = 0
        self._lock = threading.Lock()
        self._logger = logging.getLogger(f"nsqclient.testing.embedded.{name}")

    def __call__(self, level: str, text: str) -> None:
        number = _LEVELS.get(level, 2)
        if number < self.level:
            return
        line = log_line(self.prefix, level, text)
        with self._lock:
            self._lines.append((self._size, line))
            self._size += len(line) + 1
        self._logger.debug("%s %s", level, text)
        if self.echo is not None:
            self.echo(line)

    def text(self, since: int = 0) -> str:
        """Lines logged from offset ``since`` on (see :meth:`size`), oldest first."""
        with self._lock:
            lines = [line for offset, line in self._lines if offset >= since]
        return "".join(line + "\n" for line in lines)

    def size(self) -> int:
        """Characters logged so far (what ``text(since=...)`` counts from)."""
        with self._lock:
            return self._size
