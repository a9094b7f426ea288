"""Publish coalescing: the PUBs to one topic that wait to be written together leave as one MPUB.

One acknowledged PUB costs nsqd and the client a command, a reply frame and a wake-up each; an
MPUB of n messages costs one of each. So when several callers' PUBs to the same topic are
queued in the same loop iteration (or within ``linger``), the Writer sends them as one MPUB on
one connection, and nsqd's one OK acknowledges every one of them. A batch goes at once when it
reaches 64 KiB (so nsqd stores one while the next fills), and never exceeds nsqd's
``max_body_size``. DPUB and MPUB never come here.

A PUB while nothing of its topic is on its way (no open batch, and the last PUB that went alone
answered) goes at once as the PUB it is, exactly as without coalescing; the PUBs that follow it
while it is unanswered are batched. So one caller publishing in a loop sends plain PUBs at
their cost, and many callers send one PUB, then MPUBs. (Batching every PUB until the loop
iteration ends cost a lone caller 6-10% more latency: a Python object and callback per PUB.)

Every caller keeps its own outcome, as without coalescing:

* OK: each caller's waiter gets it (the sync facade's threads are woken in that one pass).
* nsqd refused the MPUB (E_BAD_BODY, E_BAD_MESSAGE, E_MPUB_FAILED; over HTTP a 400 or 413):
  nsqd stores an MPUB all or none, so nothing was stored; each message is sent again alone, as
  the PUB it was, through the Writer's resend path (another or a fresh connection, or the HTTP
  fallback), and so only the offending one fails, with the error its own PUB gets.
* Anything else (the connection broke with the MPUB unanswered, no reply in time, a closed
  Writer): each caller gets that error, its own copy ("may or may not have been stored").

A batch's deadline is the earliest of its publishes'; a publish joins a batch only if its own
deadline is within half the ``tolerance`` of the batch's first one (so none is timed out more
than ``tolerance`` early; the aio callers of one loop iteration have the same deadline), else
the batch goes and a new one starts.
"""

from __future__ import annotations

import asyncio
import struct
from asyncio import InvalidStateError
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import HTTPError, ServerError

if TYPE_CHECKING:
    from .connection import Connection, Pending, ReplyWaiter
    from .resend import Dispatch

__all__ = ["Coalescer", "copy_error", "join_mpub", "join_pub", "refused_whole", "split_pub"]

_pack_u32 = struct.Struct(">I").pack

#: MPUB body size at which a batch goes at once, mid-iteration, and is written straight away, so
#: that nsqd stores it while the next one fills (one batch of everything queued would leave nsqd
#: idle while the client gathers it, then the client idle while nsqd stores it). 64 KiB: 256
#: outstanding PUBs of 512 B went 18% faster than in one batch, at the same CPU per message
#: (2026-12-02; 32 KiB the same within noise).
_FULL = 1 << 16

#: a body as queued: the caller's bytes, or a view into an encoded PUB (the sync facade's)
Part = bytes | memoryview

#: nsqd's refusals of an MPUB that store nothing and that a PUB of each message may not get
_REFUSED = frozenset({"E_BAD_BODY", "E_BAD_MESSAGE", "E_MPUB_FAILED"})


def join_pub(prefix: bytes, body: Part) -> bytes:
    """The PUB of ``prefix`` (``b"PUB <topic>\\n"``) and ``body``."""
    return b"".join((prefix, _pack_u32(len(body)), body))


def join_mpub(prefix: bytes, bodies: list[Part], size: int) -> bytes:
    """The MPUB of ``bodies`` to the topic of ``prefix`` (``b"PUB <topic>\\n"``); ``size`` is
    its body's: 4 + the sum of 4 + len(body)."""
    parts: list[Part] = [b"M" + prefix, _pack_u32(size), _pack_u32(len(bodies))]
    append = parts.append
    for body in bodies:
        append(_pack_u32(len(body)))
        append(body)
    return b"".join(parts)


def split_pub(data: bytes) -> tuple[bytes, memoryview]:
    """An encoded PUB's prefix (``b"PUB <topic>\\n"``) and a view of its body (no copy)."""
    plen = data.index(b"\n", 4) + 1
    return data[:plen], memoryview(data)[plen + 4 :]


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


def refused_whole(exc: BaseException) -> bool:
    """nsqd refused the whole MPUB for what one message in it may be (nothing was stored)."""
    if isinstance(exc, ServerError):
        return exc.code in _REFUSED
    return isinstance(exc, HTTPError) and exc.status_code in (400, 413)


class _Batch:
    """The publishes of one MPUB, and the waiter of that MPUB (a ReplyWaiter) that passes its
    outcome on to each of theirs."""

    __slots__ = (
        "bodies",
        "coalescer",
        "deadline",
        "finished",
        "first",
        "prefix",
        "size",
        "waiters",
    )

    def __init__(
        self, coalescer: Coalescer, prefix: bytes, waiter: ReplyWaiter, body: Part, deadline: float
    ) -> None:
        self.coalescer = coalescer
        self.prefix = prefix  # b"PUB <topic>\n"
        self.waiters = [waiter]
        self.bodies = [body]
        self.first = self.deadline = deadline  # the first publish's, and the earliest one
        self.size = 8 + len(body)  # the MPUB body: the count, then each size and body
        self.finished = False

    def encode(self) -> bytes:
        """The MPUB carrying every body (``b"MPUB <topic>\\n"``, size, count, size + body each)."""
        return join_mpub(self.prefix, self.bodies, self.size)

    # -- ReplyWaiter: the connection (or the HTTP fallback, or the resend backlog) completes it

    def done(self) -> bool:
        return self.finished

    def set_result(self, reply: bytes, /) -> None:
        self.finished = True
        for waiter in self.waiters:
            try:
                waiter.set_result(reply)
            except InvalidStateError:  # its caller gave up (a cancelled future): fine
                pass

    def set_exception(self, exception: BaseException, /) -> None:
        self.finished = True
        if refused_whole(exception):
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
    neither is up); ``resend`` hands publishes to the Writer's resend backlog (sent on another
    connection, or when one comes back, or failed at their deadline): a batch no connection
    could take, or each PUB of a refused MPUB again alone; ``max_body_size``/``max_msg_size``
    are the Writer's limits (it lowers them when nsqd names smaller ones); ``hold_writes()``
    and ``write_held(held)`` bracket the dispatches so that what they queue on the connections
    is written at once, not one loop iteration later (see
    :meth:`~.connection.Connection.hold_writes`).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        linger: float,
        tolerance: float,
        dispatch: Dispatch,
        resend: Callable[[list[Pending]], None],
        max_body_size: int,
        max_msg_size: int,
        hold_writes: Callable[[], list[Connection]],
        write_held: Callable[[list[Connection]], None],
    ) -> None:
        self._loop = loop
        self._linger = linger
        self._half = tolerance / 2  # deadlines within this of a batch's first one join it
        self._dispatch = dispatch
        self._resend = resend
        #: the largest MPUB body and message; the Writer lowers them when nsqd names smaller ones
        self.max_body_size = max_body_size
        self.max_msg_size = max_msg_size
        self._hold_writes = hold_writes
        self._write_held = write_held
        self._open: dict[bytes, _Batch] = {}
        self._alone: dict[bytes, ReplyWaiter] = {}  # per topic, the last PUB that went alone
        self._handle: asyncio.Handle | None = None
        self._now: float | None = None  # the clock, read once per collection
        self.batches = 0  # MPUBs sent by coalescing (of two or more publishes)
        self.messages = 0  # publishes that went in them
        self.split = 0  # coalesced MPUBs nsqd refused, their publishes then sent alone

    def add(self, prefix: bytes, waiter: ReplyWaiter, body: Part, timeout: float) -> None:
        """Queue a PUB (its ``b"PUB <topic>\\n"`` and body, as :func:`~nsqclient.protocol.
        commands.pub_parts` gives them), due within ``timeout`` seconds; ``waiter`` gets its
        outcome."""
        now = self._now  # the clock, read once per collection rather than per publish
        if now is None:
            now = self._now = self._loop.time()
        deadline = now + timeout
        batch = self._open.get(prefix)
        if batch is not None:
            size = batch.size + 4 + len(body)
            off = deadline - batch.first
            if size <= self.max_body_size and -self._half <= off <= self._half:
                batch.waiters.append(waiter)
                batch.bodies.append(body)
                batch.size = size
                if off < 0:
                    batch.deadline = min(batch.deadline, deadline)
                if size >= _FULL:  # full: it goes now, written at once, so that
                    del self._open[prefix]  # nsqd stores it while the next one fills
                    held = self._hold_writes()
                    self._send(batch, now)
                    self._write_held(held)
                return
            del self._open[prefix]  # no room, or this publish's deadline is too far off
            self._send(batch, now)
        self._open[prefix] = _Batch(self, prefix, waiter, body, deadline)
        if self._handle is None:
            if self._linger > 0:
                self._handle = self._loop.call_later(self._linger, self._flush)
            else:
                self._handle = self._loop.call_soon(self._flush)

    def alone(self, prefix: bytes, waiter: ReplyWaiter) -> bool:
        """True if nothing of this topic is on its way (no open batch, and the last PUB that
        went alone is answered): then the publish of ``waiter`` should go at once as the PUB it
        is, written when a PUB would be, and is remembered as the one that went alone. So one
        caller publishing in a loop sends plain PUBs at exactly their cost, and concurrent
        callers send one PUB, then MPUBs of the rest while it is unanswered."""
        if prefix in self._open:
            return False
        last = self._alone.get(prefix)
        if last is not None and not last.done():
            return False
        if len(self._alone) >= 4096:  # topics come and go: bounded, as the PUB prefix cache
            self._alone.clear()
        self._alone[prefix] = waiter
        return True

    def flush(self) -> None:
        """Send every open batch now (the Writer's, when closing: before ``linger``)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()
        self._flush()

    def _flush(self) -> None:
        """Send every open batch: the end of a collection (the timer's callback)."""
        self._handle = None
        batches = self._open
        if not batches:
            self._now = None
            return
        self._open = {}
        now = self._loop.time()
        self._now = None
        held = self._hold_writes()
        for batch in batches.values():
            self._send(batch, now)
        self._write_held(held)

    def _send(self, batch: _Batch, now: float) -> None:
        waiters = batch.waiters
        n = len(waiters)
        if n == 1:  # alone: the PUB it was, as without coalescing
            waiter, data = waiters[0], join_pub(batch.prefix, batch.bodies[0])
        else:
            waiter, data = batch, batch.encode()
            self.batches += 1
            self.messages += n
        if not self._dispatch(waiter, data, n, batch.deadline - now):
            self._resend([(waiter, batch.deadline, data)])  # kept until a connection is up

    def resend_alone(self, batch: _Batch) -> None:
        """nsqd refused ``batch``'s MPUB, so stored none of it: send each publish again alone,
        the ones over nsqd's message size (as learnt from its refusal) last, so that the good
        ones are not pipelined behind the one nsqd refuses."""
        self.split += 1
        limit = self.max_msg_size
        good: list[Pending] = []
        bad: list[Pending] = []
        for waiter, body in zip(batch.waiters, batch.bodies, strict=True):
            if not waiter.done():
                item = (waiter, batch.deadline, join_pub(batch.prefix, body))
                (good if len(body) <= limit else bad).append(item)
        self._resend(good + bad)
