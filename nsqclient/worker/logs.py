"""Log lines that say which process wrote them: ``[worker 2 pid 4711]``, ``[supervisor pid 4700]``.

Every record made in a worker's processes gets a ``worker`` attribute (``supervisor``, or
``worker N`` in the child with index N, set right after the fork) through a log record factory,
so the supervisor's handler format, or an application's own (``%(worker)s``), can show it beside
``%(process)d``. :func:`setup` installs the format on the root logger when nothing else has
(the command always; :func:`nsqclient.worker.run` only when the application configured no
logging), so the handler's own log lines are shown too.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["FORMAT", "set_label", "setup"]

FORMAT = "%(asctime)s %(levelname)s [%(worker)s pid %(process)d] %(name)s: %(message)s"

_label = "supervisor"
_installed = False


def set_label(label: str) -> None:
    """Name this process in every record made from now on (a child calls it after the fork)."""
    global _label
    _label = label
    _install_factory()


def _install_factory() -> None:
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.worker = _label
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


def setup(level: int | None, *, force: bool = False) -> None:
    """The worker format on stderr at ``level`` (None: INFO), unless the root logger has
    handlers already and ``force`` is false (the application's configuration stands; its
    level too, when ``level`` is None)."""
    _install_factory()
    root = logging.getLogger()
    if root.handlers and not force:
        if level is not None:
            logging.getLogger("nsqclient").setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.INFO if level is None else level)
