"""The link between the supervisor and one child: a Unix socket pair, one JSON object a line.

Both ends are non-blocking and neither ever waits for the other: a send goes to an outbox that
is written as far as the socket takes it (and again at the next :meth:`Link.flush`), so a child
that stopped reading cannot stall the supervisor, nor a stopped supervisor a child's handlers.
A dead peer reads as end of file (:meth:`Link.receive` returns None), which is how a child learns
that its supervisor is gone and how the supervisor learns of a death before ``waitpid`` says why.

What travels, child to supervisor: ``started`` (its Reader subscribed), ``ready`` with ``ok``
(it has, or lost, every connection to nsqd), ``recycle`` with ``reason`` (past a limit: replace
me), ``stats`` with ``id`` and ``stats`` (an answer). Supervisor to child: ``stats`` with ``id``
(a question). Stopping is by signal (SIGTERM graceful, SIGQUIT at once), which reaches a child
whatever it is doing, and which Kubernetes or ``docker stop`` may send it directly as well.
"""

from __future__ import annotations

import json
import socket
from typing import Any

__all__ = ["MAX_OUTBOX", "Link"]

#: bytes a peer may leave unread before further sends are dropped (it is wedged; only stats
#: answers are large, and they are asked for again)
MAX_OUTBOX = 1 << 20
_MAX_LINE = 1 << 22  # a peer sending more than this without a newline is broken


class Link:
    """One end of a child's socket pair. Single-threaded: the owner calls every method."""

    __slots__ = ("_inbox", "_outbox", "closed", "sock")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._inbox = bytearray()
        self._outbox = bytearray()
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, kind: str, **fields: Any) -> bool:
        """Queue one message and write what the socket takes; False if the link is gone or
        the peer has not read for too long (the message is dropped)."""
        if self.closed:
            return False
        if len(self._outbox) > MAX_OUTBOX:
            return False
        fields["t"] = kind
        self._outbox += json.dumps(fields, separators=(",", ":"), default=str).encode() + b"\n"
        return self.flush()

    def flush(self) -> bool:
        """Write what is queued, as far as the socket takes it; False once the peer is gone."""
        while self._outbox and not self.closed:
            try:
                sent = self.sock.send(self._outbox)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                self.close()
                return False
            del self._outbox[:sent]
        return not self.closed

    @property
    def pending(self) -> bool:
        """Bytes are waiting to be written."""
        return bool(self._outbox)

    def receive(self) -> list[dict[str, Any]] | None:
        """The complete messages that arrived (maybe none); None at end of file or error."""
        if self.closed:
            return None
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.close()
                return None
            if not chunk:
                self.close()
                return None
            self._inbox += chunk
            if len(self._inbox) > _MAX_LINE and b"\n" not in self._inbox:
                self.close()
                return None
        messages: list[dict[str, Any]] = []
        inbox = self._inbox
        start = 0
        while True:
            end = inbox.find(b"\n", start)
            if end < 0:
                break
            try:
                message = json.loads(inbox[start:end])
            except ValueError:
                message = None
            if isinstance(message, dict):
                messages.append(message)
            start = end + 1
        del inbox[:start]
        return messages

    def close(self) -> None:
        """Close this end (only this process's descriptor: the peer's is untouched)."""
        if not self.closed:
            self.closed = True
            self._outbox.clear()
            self.sock.close()
