"""Publish coalescing: the PUBs to one topic that wait to be written together leave as one MPUB.

One acknowledged PUB costs nsqd and the client a command, a reply frame and a wake-up each; an
MPUB of n messages costs one of each. So when several callers' PUBs to the same topic are
queued in the same loop iteration (or within ``linger``), the Writer sends them as one MPUB on
one connection, up to nsqd's ``max_body_size``, and nsqd's one OK acknowledges every one of
them. A PUB alone in its batch goes as the very PUB it was; DPUB and MPUB never come here.

Every caller keeps its own outcome, as without coalescing:

* OK: each caller's waiter gets it (the sync facade's threads are woken in that one pass).
* nsqd refused the MPUB (E_BAD_BODY, E_BAD_MESSAGE, E_MPUB_FAILED; over HTTP a 400 or 413):
  nsqd stores an MPUB all or none, so nothing was stored; each message is sent again alone, as
  the PUB it was, through the Writer's resend path (another or a fresh connection, or the HTTP
  fallback), and so only the offending one fails, with the error its own PUB gets.
* Anything else (the connection broke with the MPUB unanswered, no reply in time, a closed
  Writer): each caller gets that error, its own copy ("may or may not have been stored").

A batch's deadline is its first publish's; a publish joins a batch only if its own deadline is
at most ``tolerance`` later (so none is timed out more than that early; the aio callers of one
loop iteration have the same deadline), else the batch goes and a new one starts.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import HTTPError, ServerError

if TYPE_CHECKING:
    from .connection import Pending, ReplyWaiter
    from .resend import Dispatch

__all__ = ["Coalescer", "copy_error"]

_pack_u32 = struct.Struct(">I").pack

#: nsqd's refusals of an MPUB that store nothing and that a PUB of each message may not get
_REFUSED = frozenset({"E_BAD_BODY", "E_BAD_MESSAGE", "E_MPUB_FAILED"})


def copy_error(exc: BaseException) -> BaseException:
    """A shallow copy of ``exc`` (same class, args, attributes and cause), so that each caller
    raises an exception of its own (raising one object in many tasks or threads would grow and
    share its traceback)."""
    cls = exc.__class__
    try:
        new = cls.__new__(cls)
        new.__dict__.update(exc.__dict__)
        new.args = exc.args
    except Exception:  # an exception type that cannot be copied this way: share it
        return exc
    new.__cause__ = exc.__cause__
    new.__context__ = exc.__context__
    new.__suppress_context__ = exc.__suppress_context__
    return new


def _refused(exc: BaseException) -> bool:
    """nsqd refused the whole MPUB for what one message in it may be (nothing was stored)."""
    if isinstance(exc, ServerError):
        return exc.code in _REFUSED
    return isinstance(exc, HTTPError) and exc.status_code in (400, 413)


class _Batch:
    """The publishes of one MPUB, and the waiter of that MPUB (a ReplyWaiter) that passes its
    outcome on to each of theirs."""

    __slots__ = ("body", "coalescer", "datas", "deadline", "finished", "plen", "waiters")

    def __init__(
        self, coalescer: Coalescer, waiter: ReplyWaiter, data: bytes, deadline: float
    ) -> None:
        self.coalescer = coalescer
        self.waiters = [waiter]
        self.datas = [data]
        self.deadline = deadline
        #: len(b"PUB <topic>\n"): each PUB is that prefix, then the size and body MPUB carries
        self.plen = plen = data.index(b"\n") + 1
        self.body = 4 + len(data) - plen  # the MPUB body: the count, then size + body each
        self.finished = False

    def encode(self) -> bytes:
        """The MPUB carrying every publish (each PUB's size and body, as they are)."""
        plen = self.plen
        datas = self.datas
        first = datas[0]
        return b"".join(
            (
                b"MPUB ",
                first[4 : plen - 1],
                b"\n",
                _pack_u32(self.body),
                _pack_u32(len(datas)),
                *[d[plen:] for d in datas],  # a copy each, as cheap as a memoryview
            )
        )

    # -- ReplyWaiter: the connection (or the HTTP fallback, or the resend backlog) completes it

    def done(self) -> bool:
        return self.finished

    def set_result(self, reply: bytes, /) -> None:
        self.finished = True
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(reply)

    def set_exception(self, exception: BaseException, /) -> None:
        self.finished = True
        if _refused(exception):
            self.coalescer.resend_alone(self)
            return
        first = True
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_exception(exception if first else copy_error(exception))
                first = False


class Coalescer:
    """Collects a Writer's PUBs per topic and sends each collection once the loop iteration
    ends (``linger`` 0) or ``linger`` seconds after its first publish.

    ``dispatch`` is the Writer's one dispatch (a connection, else the HTTP fallback; False if
    neither is up); ``keep`` hands a publish to the Writer's resend backlog (sent when a
    connection comes back, or failed at its deadline); ``resend`` sends publishes again alone
    (after a refused MPUB); ``max_body_size()`` is the Writer's current MPUB limit;
    ``flush_writes()`` writes what the dispatches queued on the connections now rather than one
    loop iteration later.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        linger: float,
        tolerance: float,
        dispatch: Dispatch,
        keep: Callable[[Pending], None],
        resend: Callable[[list[Pending]], None],
        max_body_size: int,
        max_msg_size: int,
        flush_writes: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._linger = linger
        self._tolerance = tolerance
        self._dispatch = dispatch
        self._keep = keep
        self._resend = resend
        #: the largest MPUB body and message; the Writer lowers them when nsqd names smaller ones
        self.max_body_size = max_body_size
        self.max_msg_size = max_msg_size
        self._flush_writes = flush_writes
        self._open: dict[object, _Batch] = {}
        self._handle: asyncio.Handle | None = None
        self._now: float | None = None  # the clock, read once per collection
        self.batches = 0  # MPUBs sent by coalescing (of two or more publishes)
        self.messages = 0  # publishes that went in them
        self.split = 0  # coalesced MPUBs nsqd refused, their publishes then sent alone

    def add(self, topic: object, waiter: ReplyWaiter, data: bytes, timeout: float) -> None:
        """Queue the encoded PUB ``data`` of ``topic``, due within ``timeout`` seconds;
        ``waiter`` gets its outcome."""
        now = self._now  # the clock, read once per collection rather than per publish
        if now is None:
            now = self._now = self._loop.time()
        deadline = now + timeout
        batch = self._open.get(topic)
        if batch is not None:
            size = batch.body + len(data) - batch.plen
            if size <= self.max_body_size and 0 <= deadline - batch.deadline <= self._tolerance:
                batch.waiters.append(waiter)
                batch.datas.append(data)
                batch.body = size
                return
            del self._open[topic]  # full, or this publish's deadline is too far off: send it
            self._send(batch, now)
        self._open[topic] = _Batch(self, waiter, data, deadline)
        if self._handle is None:
            if self._linger > 0:
                self._handle = self._loop.call_later(self._linger, self.flush)
            else:
                self._handle = self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send every open batch now (the timer's callback; also the Writer's, when closing)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()
        batches = self._open
        if not batches:
            self._now = None
            return
        self._open = {}
        now = self._loop.time()
        self._now = None
        for batch in batches.values():
            self._send(batch, now)
        self._flush_writes()

    def _send(self, batch: _Batch, now: float) -> None:
        waiters = batch.waiters
        n = len(waiters)
        if n == 1:  # alone: the PUB it was, as without coalescing
            waiter, data = waiters[0], batch.datas[0]
        else:
            waiter, data = batch, batch.encode()
            self.batches += 1
            self.messages += n
        if not self._dispatch(waiter, data, n, batch.deadline - now):
            self._keep((waiter, batch.deadline, data))

    def resend_alone(self, batch: _Batch) -> None:
        """nsqd refused ``batch``'s MPUB, so stored none of it: send each publish again alone,
        the ones over nsqd's message size (as learnt from its refusal) last, so that the good
        ones are not pipelined behind the one nsqd refuses."""
        self.split += 1
        limit = self.max_msg_size + batch.plen + 4
        good: list[Pending] = []
        bad: list[Pending] = []
        for waiter, data in zip(batch.waiters, batch.datas, strict=True):
            if not waiter.done():
                (good if len(data) <= limit else bad).append((waiter, batch.deadline, data))
        self._resend(good + bad)
