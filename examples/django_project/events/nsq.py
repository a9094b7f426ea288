"""One SyncWriter per process, created on first use and shared by every request thread.

It is safe across a forking server (gunicorn ``--preload``): in a forked worker the writer
rebuilds its connection on first use. At process exit nsqclient closes it gracefully.
"""

from __future__ import annotations

import threading

from django.conf import settings

from nsqclient.sync import SyncWriter

_writer: SyncWriter | None = None
_lock = threading.Lock()


def get_writer() -> SyncWriter:
    global _writer
    writer = _writer
    if writer is None or writer.is_closed:
        with _lock:
            if _writer is None or _writer.is_closed:
                _writer = SyncWriter(nsqd_tcp_addresses=settings.NSQD_TCP_ADDRESSES)
            writer = _writer
    return writer


def close_writer() -> None:
    """Close the process's writer (publishes still queued are sent first)."""
    global _writer
    with _lock:
        writer, _writer = _writer, None
    if writer is not None:
        writer.graceful_close()
