"""A connection's replies: nsqd's answers matched to what waits for them, and sections.

The half of :class:`~nsqclient.aio.connection.Connection` that handles what nsqd answers (a
mixin: one object, so the PUB hot path stays one attribute away): OKs in a row matched together
through the one FIFO (:class:`~.replies.ReplyQueue`), ``CLOSE_WAIT``, error frames (an error
fails exactly the command it answers; the non-fatal ones go to the owner and the connection
stays up; after a fatal one, what nsqd never ran is handed to the owner to send again), and the
end of the connection (everything pending fails as maybe applied).

:class:`Section` is how the loop changes a shared connection (:mod:`.sharing`): holding its
guard, with every completion deferred until the guard is let go (a completion may run user
code, which may publish again on this very connection).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final

from ..errors import ConnectionClosedError, ProtocolError, ResponseFailedError
from ..message import Message
from ..protocol import commands
from ..protocol.frames import CLOSE_WAIT, HEARTBEAT, OK, ErrorFrame, Event, Response
from .replies import ReplyQueue, ReplyWaiter
from .state import ConnectionState
from .window import Guard

if TYPE_CHECKING:
    from .sharing import Shared

__all__ = ["ReplyPath", "Section"]

log = logging.getLogger("nsqclient.connection")

_NOP: Final = commands.nop()
_CLOSED: Final = ConnectionState.CLOSED


class ReplyPath:
    """The reply half of a Connection (which sets these attributes up)."""

    address: str
    owner: Any  # ConnectionOwner
    state: ConnectionState
    close_exception: BaseException | None
    heartbeats_received: int
    _loop: asyncio.AbstractEventLoop | None
    _replies: ReplyQueue
    _shared: Shared | None
    _wire: Guard | None
    _guard: Guard | None
    _section: Section
    _depth: int
    _later: list[tuple[ReplyWaiter, BaseException | None]]
    _last_read: float
    _close_wait: asyncio.Future[None] | None

    if TYPE_CHECKING:  # (the Connection's; declared for the type checker only)

        def abort(self, exc: BaseException | None = None) -> None: ...

        def _write(self, data: bytes) -> None: ...

        def _deliver(self, messages: list[Message]) -> None: ...

    def _dispatch_mixed(self, events: list[Event]) -> None:
        messages: list[Message] = []
        oks = 0  # OKs in a row, matched together (the PUB hot path)
        for event in events:
            if event is OK:
                oks += 1
                continue
            if oks:
                self._acknowledged(oks)
                oks = 0
                if self.state is _CLOSED:
                    break
            if event.__class__ is Message:
                messages.append(event)
            elif event is HEARTBEAT:
                self.heartbeats_received += 1
                self._write(_NOP)
            elif isinstance(event, ErrorFrame):
                if self._on_error_frame(event, events):
                    break  # fatal: the connection is dropped; what follows is not acted on
            elif isinstance(event, Response):
                self._on_response(event)
        if oks:
            self._acknowledged(oks)
        if messages:
            self._deliver(messages)

    def _acknowledged(self, oks: int) -> None:
        """``oks`` OKs in a row: their waiters completed (on a shared connection once the
        section let go of the guard); an OK with nothing pending is a damaged stream."""
        replies = self._replies
        extra = oks - len(replies)
        shared = self._shared
        if shared is None:  # the loop's alone: completed here (asyncio futures, in order)
            for waiter in replies.pop_oks(oks, self._last_read):
                if not waiter.done():
                    waiter.set_result(b"OK")
        else:
            done: list[ReplyWaiter] = []
            if replies.pop_oks_shared(oks, self._last_read, done):
                shared.turns.settled_for_thread()  # a thread waited for one: its turn next
            self._later.extend((waiter, None) for waiter in done)
        if extra > 0:
            self._on_response(OK)  # (drops the connection)

    def _on_response(self, event: Response) -> None:
        """After the handshake the only replies are ``OK`` (matched in ``_dispatch``) and
        ``CLOSE_WAIT`` (to CLS). Anything else, or a reply with nothing pending, is a damaged or
        foreign stream: taking it as an acknowledgement could confirm a publish nsqd never got.
        """
        with self._section:
            replies = self._replies
            if event is CLOSE_WAIT and replies:
                close_wait = self._close_wait
                if close_wait is not None and not close_wait.done():
                    close_wait.set_result(None)
                entry = replies.pop(self._last_read)
                assert entry is not None
                if not entry[0].done():  # else the caller gave up; the reply still used its slot
                    entry[0].set_result(event.data)
                return
            expected = "an acknowledgement (OK)" if replies else "no reply (nothing was pending)"
            error = ProtocolError(
                f"nsqd {self.address} sent response {event.data[:40]!r} where {expected} was "
                "expected; the connection is dropped (a pending command may or may not have "
                "been applied)"
            )
            log.error("%s", error)
            entry = replies.pop(self._last_read)
            self.abort(error)
            if entry is not None:
                self._complete(entry[0], error)

    def _on_error_frame(self, frame: ErrorFrame, events: list[Event]) -> bool:
        """Fail the command ``frame`` answers; True if it was fatal (the connection is dropped).

        ``events`` is the decoded batch ``frame`` came in: after a fatal error nsqd executes
        and answers nothing more, so a reply after it in the same batch means the stream is
        damaged (or forged). Then no pending command can be trusted to be unexecuted: all of
        them fail as "may or may not have been applied", and none is sent again (a re-send of a
        publish whose OK was in that batch would store it twice).
        """
        error = frame.to_exception(self.address)
        if isinstance(error, ResponseFailedError):  # the non-fatal family (errors.NON_FATAL_CODES)
            owner = self.owner
            if owner is not None:
                owner._on_response_error(self, error)
            else:
                log.warning("%s", error)
            return False
        after = _reply_after(frame, events)
        if after is not None:
            damaged = ProtocolError(
                f"nsqd {self.address} sent {after} after the fatal error {error.text[:80]!r}, "
                "which nsqd never does: the stream is damaged; the connection is dropped and "
                "each pending command may or may not have been applied (none is sent again)"
            )
            log.error("%s", damaged)
            self.abort(damaged)  # connection_lost fails every pending command with it as cause
            return True
        log.debug("nsqd %s: %s", self.address, error)
        with self._section:
            replies = self._replies
            entry = replies.pop(self._last_read)
            # nsqd executes a connection's commands in order and stops at the fatal one: what
            # was pipelined behind it never ran, so it can go again elsewhere, at most once
            unexecuted = [(w, d, data) for w, d, data, _s in replies.take_all() if not w.done()]
            self.close_exception = error
            # nsqd closes the connection after every other error; do not wait for it (and be
            # marked unusable before the waiter, which may publish again at once, hears of it)
            self.abort(error)
            owner = self.owner
            taken = owner is not None and owner._on_fatal_error(self, error, unexecuted)
            if entry is not None:
                self._complete(entry[0], error)
            if unexecuted and not taken:
                for waiter, _deadline, _data in unexecuted:
                    self._complete(waiter, _closed_error(self.address, error))
        return True

    def _complete(self, waiter: ReplyWaiter, error: BaseException | None) -> None:
        """End ``waiter`` (``error`` None: with nsqd's OK): once the section let go of the
        guard on a shared connection (a completion may run user code), else at once."""
        if self._depth and self._guard is not None:
            self._later.append((waiter, error))
        elif not waiter.done():
            if error is None:
                waiter.set_result(b"OK")
            else:
                waiter.set_exception(error)

    def _fail_pending(self, cause: BaseException | None) -> None:
        """Every pending command fails as maybe applied (the connection is gone)."""
        with self._section:
            for waiter, _deadline, _data, _shared in self._replies.take_all():
                if not waiter.done():
                    self._complete(waiter, _closed_error(self.address, cause))


def _reply_after(frame: ErrorFrame, events: list[Event]) -> str | None:
    """What follows ``frame`` in ``events`` that nsqd never sends after a fatal error: a
    response or another error frame (messages and heartbeats come from nsqd's other goroutine
    and may still follow), described for the log; None if nothing does."""
    for i in range(len(events) - 1, -1, -1):
        if events[i] is frame:
            break
    else:
        return None
    for event in events[i + 1 :]:
        if isinstance(event, ErrorFrame):
            return f"another error frame ({event.text[:40]!r})"
        if isinstance(event, Response):
            return f"a response ({bytes(event.data[:40])!r})"
    return None


class Section:
    """``with conn._section:`` on the loop thread: the wire and the guard of a shared connection
    (taken once however the sections nest: ``_depth`` is the loop's alone), and after letting go
    of them the completions the section deferred, then the door's look at what threads queued
    meanwhile.
    On an unshared connection only the nesting is counted."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        conn = self._conn
        if not conn._depth and conn._guard is not None:
            conn._wire.acquire()  # (wire, then guard: the order of .sharing)
            conn._guard.acquire()
        conn._depth += 1

    def __exit__(self, *exc_info: object) -> None:
        conn = self._conn
        conn._depth -= 1
        if conn._depth:
            return
        guard = conn._guard
        if guard is None:
            return
        guard.release()
        conn._wire.release()
        later = conn._later
        while later:  # (a completion may queue more: each runs outside the guard)
            conn._later = []
            for waiter, error in later:
                if not waiter.done():
                    if error is None:
                        waiter.set_result(b"OK")
                    else:
                        waiter.set_exception(error)
            later = conn._later
        shared = conn._shared
        side = shared.side if shared is not None else None
        if side is not None:
            side.after_loop()


def _closed_error(address: str, cause: BaseException | None) -> ConnectionClosedError:
    error = ConnectionClosedError(
        "connection closed before nsqd replied; the command may or may not have been applied",
        address=address,
    )
    error.__cause__ = cause
    return error
