"""One TCP connection to one nsqd: the read path, coalesced writes, replies, liveness.

The handshake is carried out by :mod:`nsqclient.aio.handshake` (``connect()`` hands it every
chunk read until it is done); when the connection is dead is decided by
:mod:`nsqclient.flow.liveness`, without I/O.

The connection is an ``asyncio.Protocol`` feeding :class:`~nsqclient.protocol.FrameDecoder`
directly from ``data_received``, so a chunk of N message frames costs one decoder call and one
``_on_messages`` call to the owner. Every command written during one loop iteration is joined and
written once at the end of it (``call_soon``), so a burst of FINs or pipelined PUBs is one syscall.

Reply-producing commands (SUB, PUB, MPUB, DPUB, CLS) are matched to responses in FIFO order. An
error frame fails exactly the command it answers; the three non-fatal response errors
(E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED) go to the owner and the connection stays up; any
other error closes the connection and fails everything still pending on it.

Liveness: each connection arms one timer, only for when something can next become due (see
:mod:`nsqclient.flow.liveness`, which decides), so an idle connection wakes about once per
heartbeat interval. It declares the connection dead when no complete frame was decoded for two
heartbeat intervals (bytes alone do not count: a damaged size field leaves a partial frame that
heartbeats keep growing but never complete, so a frame must complete within that bound), when the
oldest pending request is past its deadline and nothing was answered for ``publish_timeout``
(replies come in order: nothing behind it can be answered either), and when writes stayed paused
longer than ``write_timeout``. It also fails pending requests whose deadline passed, so no
per-request timer is ever created. The read path only records a timestamp.

(Longer than most modules, about 930 lines: the read path, reply matching, write coalescing
and the liveness timer share the transport, the decoder and the pending-reply FIFO, and the read
and write paths are the per-message hot paths. One class keeps each step one attribute away,
with no hop per frame or per command; what could leave without one, the handshake and the
liveness decision, has.)
"""

from __future__ import annotations

import asyncio
import collections
import enum
import functools
import itertools
import logging
import os
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from ..addresses import format_address
from ..errors import (
    ClosedError,
    ConnectError,
    ConnectionClosedError,
    NSQTimeoutError,
    ProtocolError,
    ResponseFailedError,
    ServerError,
)
from ..flow import liveness
from ..flow.requeue import requeue_delay_ms
from ..message import Message
from ..protocol import commands
from ..protocol.compression import Codec
from ..protocol.frames import (
    CLOSE_WAIT,
    HEARTBEAT,
    OK,
    ErrorFrame,
    Event,
    FrameDecoder,
    Response,
)

if TYPE_CHECKING:
    from ..config import Config
    from ..protocol.identify import AuthResponse, IdentifyOptions, IdentifyResponse
    from ..stats import ConnectionStats
    from .handshake import Setup

_M = TypeVar("_M", bound=Callable[..., Any])


def _under_door(method: _M) -> _M:
    """Run ``method`` under the door's lock when the connection is shared with publishing
    threads (for what reads or changes the pending FIFO off the hot paths)."""

    @functools.wraps(method)
    def locked(self: Connection, *args: Any) -> Any:
        door = self._door
        if door is None:
            return method(self, *args)
        with door:
            return method(self, *args)

    return locked  # type: ignore[return-value]


__all__ = [
    "CLOSE_FLOOR",
    "Connection",
    "ConnectionOwner",
    "ConnectionState",
    "Pending",
    "close_all",
]

log = logging.getLogger("nsqclient.connection")

_NOP: Final = commands.nop()
_fin = commands.fin_unchecked
_req = commands.req_unchecked
_touch = commands.touch_unchecked
_rdy = commands.rdy_unchecked
#: Bytes handed to the transport per write when a lot is queued. asyncio (3.11) keeps unsent
#: bytes in one bytearray and moves the whole remainder after every partial send, so handing it
#: hundreds of megabytes at once is quadratic; bigger batches go out in slices of this size,
#: following pause_writing/resume_writing.
_MAX_WRITE = 1 << 20
_INF: Final = float("inf")
#: Bytes read per read call (see :class:`Connection`): below glibc's mmap threshold (128 KiB),
#: and four of nsqd's default output buffers.
_READ_SIZE: Final = 64 * 1024
#: what a closed connection reads into, should the transport still ask (nothing is decoded)
_CLOSED_VIEW: Final = memoryview(bytearray(256))
#: after a failed write, what is read of what nsqd sent before its end (see _read_what_is_left)
_LEFT_READS: Final = 16
_LEFT_READ_SIZE: Final = 64 * 1024
#: seconds a graceful close keeps for its last steps (CLS, closing) even when its timeout ran
#: out, so that timeout 0 still closes a healthy connection politely; within the stated margin
CLOSE_FLOOR: Final = 0.25
_Future = asyncio.Future
#: connection ids: unique per Connection object in the process, in creation order (``next`` on
#: a count is atomic under the GIL, so loops on several threads may draw from it)
_next_id = itertools.count(1).__next__


class ConnectionState(enum.Enum):
    """Where a :class:`Connection` is in its life; ``CONNECTED``/``SUBSCRIBED`` take commands."""

    INIT = "init"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    SUBSCRIBED = "subscribed"
    CLOSING = "closing"
    CLOSED = "closed"


_CONNECTED: Final = ConnectionState.CONNECTED
_SUBSCRIBED: Final = ConnectionState.SUBSCRIBED


class ConnectionOwner(Protocol):
    """What a Reader or Writer hears from its connections. Called on the loop thread.

    Internal: the members carry underscore names so they stay off the Reader's and Writer's
    public surface (go-nsq's private delegate, without the extra hop per call).
    """

    #: whether every FIN must be reported through ``_on_message_result`` (else only counted)
    _watch_fin: bool

    def _on_messages(self, conn: Connection, messages: list[Message]) -> None: ...

    def _on_message_result(self, conn: Connection, msg: Message, fin: bool, backoff: bool) -> None:
        """A FIN (``fin=True``) or REQ was written for ``msg``."""

    def _on_response_error(self, conn: Connection, error: ResponseFailedError) -> None: ...

    def _on_connection_lost(self, conn: Connection, exc: BaseException | None) -> None: ...

    def _on_fatal_error(
        self, conn: Connection, error: ServerError, unexecuted: list[Pending]
    ) -> bool:
        """nsqd answered with a fatal ``error`` and is closing ``conn``; heard before the
        command it answers fails, so what the error teaches (a size limit) applies to the very
        next call. ``unexecuted`` were pipelined behind it and never run by nsqd: True if the
        owner takes them (to send them again elsewhere), False to have them fail with
        ConnectionClosedError."""


class Door(Protocol):
    """A connection shared with publishing threads (see :meth:`Connection.open_door`)."""

    #: publishes written through it (by threads), of those settled by the loop, the ones the
    #: threads settled (their replies read by a thread), and the messages acknowledged to those
    sent: int
    done: int
    done_threads: int
    ok: int
    #: with ``coalesce``: MPUBs it sent of two or more publishes, those publishes, and the
    #: MPUBs nsqd refused (each publish then sent again alone)
    batches: int
    messages: int
    split: int

    def __enter__(self) -> None: ...

    def __exit__(self, *exc_info: object) -> None: ...

    def close(self) -> None: ...

    #: reading may pass to the threads at the end of this read (then ``after_read()``)
    _switch: bool
    #: threads read the socket (the transport's reading is paused); set only by the loop
    reading: bool

    def after_read(self) -> None: ...

    def take_back(self) -> None: ...


class ReplyWaiter(Protocol):
    """What waits for a reply: an ``asyncio.Future[bytes]``, or anything with these three
    methods (the sync facade's publish tickets, which then need no future and no callback hop).
    """

    def done(self) -> bool: ...

    def set_result(self, result: bytes, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


#: A reply-producing command waiting for its response: (waiter, deadline, the command's bytes).
#: A tuple, not an object: one is made per publish. The bytes are the caller's own object (no
#: copy), kept so a command nsqd never executed can be sent again on another connection.
Pending = tuple[ReplyWaiter, float, bytes]


class Connection(asyncio.BufferedProtocol):
    """A connection to one nsqd, used by exactly one Reader or Writer on one event loop.

    A buffered protocol: the transport reads into one buffer of ``_READ_SIZE`` bytes owned by
    the connection (``get_buffer``), and ``buffer_updated`` decodes a copy of what was read.
    asyncio's plain ``Protocol`` reads with ``recv(256 KiB)``: CPython allocates those 256 KiB
    for every read, above glibc's mmap threshold, which cost about 9 µs per read here against
    1 µs for ``recv_into`` (a Writer reads one 10-byte OK at a time).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        config: Config,
        identify: IdentifyOptions,
        owner: ConnectionOwner | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.address = format_address(host, port)
        #: unique per connection object in this process (a reconnect is a new one): tells apart
        #: two connections to one address (through one proxy, or one after the other)
        self.connection_id: int = _next_id()
        self.config = config
        self.identify_options = identify
        self.owner = owner
        self.ssl_context = ssl_context
        self.state = ConnectionState.INIT
        self.identify_response: IdentifyResponse | None = None
        self.auth_response: AuthResponse | None = None
        #: last RDY value sent
        self.rdy = 0
        #: messages delivered on this connection and not yet answered (id -> Message); the
        #: Reader's MessageTracker holds this same dict
        self.in_flight: dict[bytes, Message] = {}
        self.messages_received = 0
        self.messages_finished = 0
        self.messages_requeued = 0
        self.heartbeats_received = 0
        self.last_message_time = 0.0
        #: seconds from sending IDENTIFY to its reply: the round trip RDY decisions are scaled by
        self.rtt = 0.0
        self.close_exception: BaseException | None = None
        self._closing_on_purpose = False  # close() or CLS: no warning when the socket closes

        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(self, max_frame_size=config.frame_size_limit)
        self._codec: Codec | None = None
        #: the handshake while it runs: it gets what is read until then (see connect())
        self._setup: Setup | None = None
        self._rview = memoryview(bytearray(_READ_SIZE))  # see get_buffer()
        #: the door for publishing threads (a sync facade's Writer: see
        #: :mod:`nsqclient.sync.door`), a context manager holding its lock: every write, and
        #: every change to the pending FIFO, then happens inside it
        self._door: Door | None = None
        self._wbuf: list[bytes] = []
        self._wrest: memoryview | None = None  # unsent rest of a big batch, written first
        self._flush_scheduled = False
        self._batch_now: float | None = None  # see request()
        self._pending: collections.deque[Pending] = collections.deque()
        #: the earliest deadline among pending requests (may be stale-early, never late)
        self._next_deadline = float("inf")
        self._closed_future: asyncio.Future[None] | None = None
        self._close_wait: asyncio.Future[None] | None = None
        self._wake: asyncio.TimerHandle | None = None  # the liveness timer, when armed
        self._wake_at = _INF  # when it fires (inf: not armed)
        self._last_read = 0.0  # when the last complete frame was decoded (after the handshake)
        #: since when the oldest pending request has waited: its send, or the previous reply
        self._waiting_since = 0.0
        self._stuck_after = config.sec.publish_timeout
        self._write_paused_at: float | None = None
        self._paused_buffer_size = 0
        self._drain_waiters: list[asyncio.Future[None]] = []
        hb = identify.heartbeat_interval
        hb_s = (hb if hb > 0 else 30_000) / 1000.0
        #: without heartbeats silence is only suspicious while a reply is awaited
        self._heartbeats_off = hb < 0
        self._dead_after = 2 * hb_s if hb >= 0 else config.sec.read_timeout

    # ------------------------------------------------------------------ setup

    async def connect(self) -> IdentifyResponse:
        """Dial, handshake (IDENTIFY, upgrades, AUTH). Raises ConnectError or a typed error."""
        if self.state is not ConnectionState.INIT:
            raise ClosedError(f"connection to {self.address} was already used")
        self.state = ConnectionState.CONNECTING
        loop = self._loop = asyncio.get_running_loop()
        self._closed_future = loop.create_future()
        try:
            async with asyncio.timeout(self.config.sec.dial_timeout):
                await loop.create_connection(lambda: self, self.host, self.port)
        except BaseException as exc:
            if self.state is not ConnectionState.CLOSED:  # no transport: nothing else will
                self.state = ConnectionState.CLOSED
                self._closed_future.set_result(None)
            if not isinstance(exc, OSError | TimeoutError):
                raise  # cancelled
            reason = (
                "timed out" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
            )
            raise ConnectError(f"cannot connect: {reason}", address=self.address) from exc
        from .handshake import Setup, handshake_error  # with the first connection (import time)

        setup = self._setup = Setup(self._decoder, self.address)
        assert self._transport is not None
        try:
            try:
                async with asyncio.timeout(self.config.sec.read_timeout):
                    leftover = await setup.run(
                        self._transport,
                        self,
                        options=self.identify_options,
                        auth_secret=self.config.auth_secret_bytes,
                        ssl_context=self.ssl_context,
                        server_hostname=self.config.tls_server_hostname or self.host,
                    )
            finally:
                self._transport = setup.transport or self._transport
                self._codec = setup.codec
            self.rtt = setup.rtt
            self.identify_response = setup.identify
            self.auth_response = setup.auth
            self._setup = None
            self._dispatch(leftover)
            if self.state is ConnectionState.CLOSED:
                # nsqd answered the last handshake step and hung up in the same breath
                raise ConnectError(
                    "nsqd closed the connection right after the handshake", address=self.address
                ) from self.close_exception
        except BaseException as exc:
            self.abort(exc if isinstance(exc, Exception) else None)
            error = handshake_error(exc, self.address)
            if error is exc:
                raise
            raise error from exc
        self.state = ConnectionState.CONNECTED
        self._check()
        assert self.identify_response is not None
        return self.identify_response

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """asyncio.Protocol callback (the transport is up); called by the loop, not by users."""
        self._transport = transport  # type: ignore[assignment]
        assert self._loop is not None
        self._last_read = self._loop.time()

    def get_buffer(self, sizehint: int) -> memoryview:
        """asyncio.BufferedProtocol callback: where the transport reads to (one buffer, reused)."""
        return self._rview

    def buffer_updated(self, nbytes: int) -> None:
        """asyncio.BufferedProtocol callback: ``nbytes`` were read into the buffer."""
        self.data_received(self._rview[:nbytes].tobytes())
        door = self._door
        if door is not None and door._switch:  # reading may pass to publishing threads now
            door.after_read()

    def data_received(self, data: bytes) -> None:
        """Decode frames and dispatch them; called by the loop.

        A protocol error from nsqd's bytes aborts the connection (pending requests fail with it).
        """
        setup = self._setup
        if setup is not None:
            self._last_read = self._loop.time()  # type: ignore[union-attr]
            setup.feed(data)
            return
        try:
            if self._codec is not None:
                data = self._codec.decompress(data)
            events = self._decoder.feed(data)
        except ProtocolError as exc:
            log.error("nsqd %s: %s; closing the connection", self.address, exc)
            self.abort(exc)
            return
        if events:
            self._last_read = self._loop.time()  # type: ignore[union-attr]
            self._dispatch(events)

    def _dispatch(self, events: list[Event]) -> None:
        if not events:
            return
        for event in events:
            if event.__class__ is not Message:
                break
        else:
            self._deliver(events)  # type: ignore[arg-type]  # all messages: the common case
            return
        messages: list[Message] = []
        pending = self._pending
        for event in events:
            if event is OK and pending:  # a publish acknowledged: the PUB hot path
                future = pending.popleft()[0]
                self._waiting_since = self._last_read
                if not future.done():
                    future.set_result(b"OK")
            elif event.__class__ is Message:
                messages.append(event)
            elif event is HEARTBEAT:
                self.heartbeats_received += 1
                self._write(_NOP)
            elif isinstance(event, ErrorFrame):
                if self._on_error_frame(event, events):
                    break  # fatal: the connection is dropped; what follows is not acted on
            elif isinstance(event, Response):
                self._on_response(event)
        if messages:
            self._deliver(messages)

    def _deliver(self, messages: list[Message]) -> None:
        in_flight = self.in_flight
        for msg in messages:
            in_flight[msg.id] = msg
        self.messages_received += len(messages)
        self.last_message_time = self._last_read
        owner = self.owner
        if owner is None:
            log.warning(
                "nsqd %s sent %d messages to a connection without a reader",
                self.address,
                len(messages),
            )
            return
        owner._on_messages(self, messages)

    def _on_response(self, event: Response) -> None:
        """After the handshake the only replies are ``OK`` (handled in ``_dispatch``) and
        ``CLOSE_WAIT`` (to CLS). Anything else, or a reply with nothing pending, is a damaged or
        foreign stream: taking it as an acknowledgement could confirm a publish nsqd never got.
        """
        pending = self._pending
        if event is CLOSE_WAIT and pending:
            close_wait = self._close_wait
            if close_wait is not None and not close_wait.done():
                close_wait.set_result(None)
            future = pending.popleft()[0]
            self._waiting_since = self._last_read
            if not future.done():  # else the caller gave up; the reply still used its slot
                future.set_result(event.data)
            return
        expected = "an acknowledgement (OK)" if pending else "no reply (nothing was pending)"
        error = ProtocolError(
            f"nsqd {self.address} sent response {event.data[:40]!r} where {expected} was "
            "expected; the connection is dropped (a pending command may or may not have been "
            "applied)"
        )
        log.error("%s", error)
        waiter = pending.popleft()[0] if pending else None
        self.abort(error)
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    @_under_door
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
        pending = self._pending
        waiter = pending.popleft()[0] if pending else None
        self._waiting_since = self._last_read
        # nsqd executes a connection's commands in order and stops at the fatal one: what was
        # pipelined behind it never ran, so it can go again on another connection, at most once
        unexecuted = [item for item in pending if not item[0].done()]
        pending.clear()
        self.close_exception = error
        # nsqd closes the connection after every other error; do not wait for it (and be
        # marked unusable before the waiter, which may publish again at once, hears of it)
        self.abort(error)
        owner = self.owner
        taken = owner is not None and owner._on_fatal_error(self, error, unexecuted)
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        if unexecuted and not taken:
            pending.extend(unexecuted)
            self._fail_pending(error)
        return True

    @_under_door
    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio.Protocol callback: mark the connection closed, fail every pending request and
        tell the owner. Idempotent; called by the loop (or by :meth:`abort`).
        """
        if self.state is ConnectionState.CLOSED:
            return
        if (
            isinstance(exc, OSError)
            and self._pending
            and self._setup is None
            and self._read_what_is_left()
        ):
            return  # what was left closed the connection
        was_closing = self._closing_on_purpose
        self.state = ConnectionState.CLOSED
        if self.close_exception is None:
            self.close_exception = exc
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
            self._wake_at = _INF
        self._wbuf.clear()
        self._wrest = None
        # the 64 KiB read buffer goes now, not when a full collection finds this connection
        # (a connection lives long enough to be collected only with the oldest generation)
        self._rview = _CLOSED_VIEW
        cause = self.close_exception
        if self._pending:
            self._fail_pending(cause)
        if self._setup is not None:
            self._setup.lost(cause)
        for fut in (self._close_wait, *self._drain_waiters):
            if fut is not None and not fut.done():
                fut.set_result(None)
        self._drain_waiters.clear()
        if self._closed_future is not None and not self._closed_future.done():
            self._closed_future.set_result(None)
        owner = self.owner
        if owner is not None and self._setup is None:
            if not was_closing:
                log.warning(
                    "connection to nsqd %s lost: %s",
                    self.address,
                    cause if cause is not None else "nsqd closed it (shutting down or restarting?)",
                )
            owner._on_connection_lost(self, cause)
        # answers to what is left can no longer be sent (nsqd redelivers after its timeout);
        # an empty ledger is also what makes message_fin a no-op from now on
        self.in_flight.clear()
        if self._door is not None:
            self._door.close()

    def _read_what_is_left(self) -> bool:
        """A write failed (nsqd closed the connection): read what nsqd sent before its end;
        True if that closed the connection.

        Why: nsqd answers a refused publish with an error frame and closes; a command written
        after that meets the reset, and asyncio then drops the transport without reading the
        frame still waiting in the socket, so the refused publish (and each one before it)
        would fail as maybe-sent instead of with nsqd's answer. The socket stays open until
        this callback returns, and the kernel hands out received bytes before the reset, so
        they are read here (a bounded number of non-blocking reads). Not under TLS (its bytes
        pass through an object the transport owns), nor while publishing threads read the
        socket (they read the answer themselves).
        """
        transport = self._transport
        door = self._door
        if (
            transport is None
            or (door is not None and door.reading)
            or transport.get_extra_info("ssl_object") is not None
        ):
            return False
        sock = transport.get_extra_info("socket")
        fd = -1 if sock is None else sock.fileno()
        for _ in range(_LEFT_READS if fd >= 0 else 0):
            try:
                data = os.read(fd, _LEFT_READ_SIZE)
            except OSError:  # nothing more (EAGAIN), or the reset itself
                break
            if not data:
                break
            self.data_received(data)
            if self.state is ConnectionState.CLOSED or not self._pending:
                break
        return self.state is ConnectionState.CLOSED

    @_under_door
    def _fail_pending(self, cause: BaseException | None) -> None:
        for future, _deadline, _data in self._pending:
            if not future.done():
                err = ConnectionClosedError(
                    "connection closed before nsqd replied; the command may or may not "
                    "have been applied",
                    address=self.address,
                )
                err.__cause__ = cause
                future.set_exception(err)
        self._pending.clear()

    def pause_writing(self) -> None:
        """asyncio.Protocol callback: the transport's buffer is over its high-water mark."""
        assert self._loop is not None
        self._write_paused_at = self._loop.time()
        transport = self._transport
        self._paused_buffer_size = transport.get_write_buffer_size() if transport else 0
        due = self._write_paused_at + self.config.sec.write_timeout
        if due < self._wake_at and self.state is not ConnectionState.CLOSED:
            self._arm(due)

    def resume_writing(self) -> None:
        """asyncio.Protocol callback: the buffer drained; flush held-back writes, wake drain()."""
        self._write_paused_at = None
        if (self._wbuf or self._wrest is not None) and not self._flush_scheduled:  # held back
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ writing

    def _write(self, data: bytes) -> None:
        """Queue bytes for the single write at the end of this loop iteration."""
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _flush(self, force: bool = False) -> None:
        door = self._door
        if door is not None:
            with door:
                self._door = None
                try:
                    self._flush(force)
                finally:
                    self._door = door
            return
        self._flush_scheduled = False
        self._batch_now = None
        transport = self._transport
        if transport is None or self.state is ConnectionState.CLOSED:
            self._wbuf.clear()
            self._wrest = None
            return
        if self._write_paused_at is not None and not force:
            return  # resume_writing() flushes; meanwhile the timer enforces write_timeout
        if self._wrest is not None and not self._write_big(None, force):
            return  # paused again before the rest of an earlier big batch went out
        buf = self._wbuf
        if not buf:
            return
        data = buf[0] if len(buf) == 1 else b"".join(buf)
        buf.clear()
        if len(data) > _MAX_WRITE:
            self._write_big(data, force)
            return
        if self._codec is not None:
            data = self._codec.compress(data)
        transport.write(data)

    def _write_big(self, data: bytes | None, force: bool) -> bool:
        """Write ``data`` (or the rest of an earlier batch) in ``_MAX_WRITE`` slices, stopping
        when the transport asks us to pause; True once everything went out."""
        transport = self._transport
        assert transport is not None
        view = memoryview(data) if data is not None else self._wrest
        assert view is not None
        codec = self._codec
        pos, end = 0, len(view)
        while pos < end and (force or self._write_paused_at is None):
            chunk = view[pos : pos + _MAX_WRITE]
            pos += len(chunk)
            # the transport may call pause_writing() before returning
            transport.write(codec.compress(bytes(chunk)) if codec is not None else chunk)
        self._wrest = view[pos:] if pos < end else None
        return self._wrest is None

    def hold_writes(self) -> bool:
        """Queue the commands that follow without scheduling their write; True if this call
        holds them, and the caller then writes them with :meth:`write_held` before its
        callback returns. For commands queued from a callback that itself runs at the end of a
        loop iteration (the Writer's coalescing): scheduling their write would take one loop
        iteration (and one more poll of the selector) more than a PUB. False if a write is
        scheduled already: it takes these too."""
        if self._flush_scheduled:
            return False
        self._flush_scheduled = True
        return True

    def write_held(self) -> None:
        """Write what was queued since :meth:`hold_writes` (and end the hold)."""
        self._flush()

    def send(self, data: bytes) -> None:
        """Queue a command that gets no reply (RDY, FIN, REQ, TOUCH, NOP)."""
        if self.state is ConnectionState.CLOSED:
            raise ConnectionClosedError("connection is closed", address=self.address)
        self._write(data)

    def request(self, data: bytes, timeout: float | None = None) -> asyncio.Future[bytes]:
        """Queue a reply-producing command; the future gets the response payload or the error.

        The deadline (``timeout`` seconds) is enforced by the connection's liveness timer, which
        fails the future with NSQTimeoutError; a reply that comes later is consumed and dropped.
        """
        # The publish hot path: request_to's body inlined (tests/aio/test_inlined_copies.py keeps
        # the two equal), the future made without the loop's
        # create_future() hop (which returns this same asyncio.Future on asyncio's loops and on
        # uvloop; an asyncio.Future works on any loop)
        if self._door is not None:  # shared with publishing threads: under the door's lock
            return self._shared(self.request, data, timeout)  # type: ignore[no-any-return]
        state = self.state
        if state is not _CONNECTED and state is not _SUBSCRIBED:
            raise ConnectionClosedError(f"connection is {state.value}", address=self.address)
        loop = self._loop
        fut: asyncio.Future[bytes] = _Future(loop=loop)
        pending = self._pending
        # one clock read per batch: the time of the first request since the last flush, at most
        # one loop iteration old (a deadline a little early, never late)
        now = self._batch_now
        if now is None:
            now = self._batch_now = loop.time()  # type: ignore[union-attr]
        if timeout is not None:
            deadline = now + timeout
            if deadline < self._next_deadline:
                self._next_deadline = deadline
                if deadline < self._wake_at:
                    self._arm(deadline)
        else:
            deadline = _INF
        if not pending:
            self._waiting_since = now
        pending.append((fut, deadline, data))
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)  # type: ignore[union-attr]
        return fut

    def request_to(self, waiter: ReplyWaiter, data: bytes, timeout: float | None = None) -> None:
        """Like :meth:`request`, completing ``waiter`` (see :class:`ReplyWaiter`) directly.

        The same statements as :meth:`request` but for its future (a test keeps them equal).
        """
        if self._door is not None:  # shared with publishing threads: under the door's lock
            self._shared(self.request_to, waiter, data, timeout)
            return
        state = self.state
        if state is not _CONNECTED and state is not _SUBSCRIBED:
            raise ConnectionClosedError(f"connection is {state.value}", address=self.address)
        loop = self._loop
        pending = self._pending
        now = self._batch_now
        if now is None:
            now = self._batch_now = loop.time()  # type: ignore[union-attr]
        if timeout is not None:
            deadline = now + timeout
            if deadline < self._next_deadline:
                self._next_deadline = deadline
                if deadline < self._wake_at:
                    self._arm(deadline)
        else:
            deadline = _INF
        if not pending:
            self._waiting_since = now
        pending.append((waiter, deadline, data))
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _shared(self, method: Callable[..., Any], *args: Any) -> Any:
        """Run ``method`` (request or request_to) under the door's lock, as if unshared."""
        door = self._door
        assert door is not None
        with door:
            self._door = None
            try:
                result = method(*args)
            finally:
                self._door = door
        door.take_back()  # the reply to the loop's own command is the loop's to read
        return result

    def open_door(self, make: Callable[[Connection], Door]) -> Door | None:
        """Share this connection's writes with publishing threads (loop thread; once): the
        door ``make(self)`` returns then brackets every write and change to the pending FIFO
        (``with door:``), and is closed (``door.close()``) when the connection is lost.

        Only a plain TCP connection gets one (TLS and compression pass the bytes through
        objects the loop owns): None otherwise, or once closed.
        """
        transport = self._transport
        if (
            self._door is not None
            or self.state is not _CONNECTED
            or transport is None
            or self._codec is not None
            or transport.get_extra_info("ssl_object") is not None
            or transport.get_extra_info("socket") is None
        ):
            return self._door
        self._door = make(self)
        return self._door

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet decoded: the start of a frame whose rest has not come."""
        return self._decoder.buffered

    @property
    def pending_requests(self) -> int:
        """How many sent commands still await nsqd's reply (PUB/MPUB/DPUB/SUB/...)."""
        return len(self._pending)

    @property
    def writable(self) -> bool:
        """False while the transport's buffer is above its high-water mark."""
        return self._write_paused_at is None

    async def drain(self) -> None:
        """Wait until the transport accepts more data (or the connection closes)."""
        if self._write_paused_at is None or self.state is ConnectionState.CLOSED:
            return
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(fut)
        await fut

    # ------------------------------------------------------------------ consumer commands

    async def subscribe(self, topic: str, channel: str, timeout: float | None = None) -> None:
        """Send SUB for ``topic``/``channel``, wait for nsqd's OK; the state becomes ``SUBSCRIBED``.

        ``timeout`` is in seconds (default: ``Config.read_timeout``). Raises InvalidTopicError or
        InvalidChannelError before sending on a bad name, NSQTimeoutError if nsqd does not answer
        in time, a ResponseFailedError subclass if nsqd refuses, ConnectionClosedError if the
        connection is not open. Call on the connection's loop.
        """
        data = commands.sub(topic, channel)
        await self.request(data, timeout if timeout is not None else self.config.sec.read_timeout)
        self.state = ConnectionState.SUBSCRIBED

    def send_rdy(self, count: int) -> None:
        """Write ``RDY count``, capped at :attr:`max_rdy_count`; a no-op once closed.

        The Reader owns RDY; calling this on a Reader's connection fights its flow control.
        Loop thread only.
        """
        if self.state is ConnectionState.CLOSED:
            return
        max_rdy = self.max_rdy_count
        if count > max_rdy:
            count = max_rdy
        self.rdy = count
        self._write(_rdy(count))

    @property
    def max_rdy_count(self) -> int:
        """The largest RDY nsqd accepts (from its IDENTIFY reply; 2500, nsqd's default, before)."""
        resp = self.identify_response
        return resp.max_rdy_count if resp is not None else 2500

    async def cls(self, timeout: float) -> bool:
        """Send CLS and wait for CLOSE_WAIT. True if nsqd confirmed within ``timeout``."""
        if self.state is not ConnectionState.SUBSCRIBED:
            return False
        assert self._loop is not None
        self._close_wait = self._loop.create_future()
        self.state = ConnectionState.CLOSING
        self._closing_on_purpose = True
        self.rdy = 0
        deadline = self._loop.time() + timeout
        self._next_deadline = min(self._next_deadline, deadline)
        if deadline < self._wake_at:
            self._arm(deadline)
        if not self._pending:
            self._waiting_since = self._loop.time()
        placeholder = self._loop.create_future()  # CLOSE_WAIT's slot; a timeout is False here
        placeholder.add_done_callback(_retrieve)
        self._pending.append((placeholder, deadline, b""))
        self._write(commands.cls())
        try:
            async with asyncio.timeout(timeout):
                await self._close_wait
        except TimeoutError:
            return False
        return self.state is not ConnectionState.CLOSED

    # ------------------------------------------------------------------ Responder (Message)

    def message_fin(self, msg: Message) -> None:
        """Write FIN for ``msg`` if this connection still holds it; otherwise a no-op.

        Called through :meth:`Message.fin`, not directly. Loop thread only.
        """
        # The hottest method of a consumer. A closed connection's ledger is empty, so the pop
        # also answers "is this connection still open".
        in_flight = self.in_flight
        found = in_flight.pop(msg.id, None)
        if found is not msg:
            if found is not None:
                # nsqd redelivered this id (the old delivery timed out): that one is not ours
                in_flight[msg.id] = found
            return
        self.messages_finished += 1
        owner = self.owner
        if owner is not None and owner._watch_fin:
            # first, as go-nsq does: a RDY this result causes (backoff) goes out before the FIN,
            # so nsqd cannot fill the freed slot before it sees the new RDY
            owner._on_message_result(self, msg, True, False)
        self._wbuf.append(_fin(msg.id))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]

    def message_req(self, msg: Message, delay_ms: int | None, backoff: bool) -> None:
        """Write REQ for ``msg`` with ``delay_ms`` milliseconds (None: the Config's attempt-scaled
        requeue delay); a no-op if this connection no longer holds it. Called through
        :meth:`Message.req`. Loop thread only.
        """
        found = self.in_flight.pop(msg.id, None)
        if found is not msg or self.state is ConnectionState.CLOSED:
            if found is not None and found is not msg:
                self.in_flight[msg.id] = found  # a redelivery of this id is not ours to answer
            return
        if delay_ms is None:
            config = self.config
            delay_ms = requeue_delay_ms(
                msg.attempts, config.msec.default_requeue_delay, config.msec.max_requeue_delay
            )
        self.messages_requeued += 1
        owner = self.owner
        if owner is not None:
            owner._on_message_result(self, msg, False, backoff)  # RDY 0 before the REQ
        self._write(_req(msg.id, delay_ms))

    def message_touch(self, msg: Message) -> None:
        """Write TOUCH for ``msg`` (reset nsqd's message timeout) if this connection holds it.

        Called through :meth:`Message.touch`. Loop thread only.
        """
        if self.in_flight.get(msg.id) is msg and self.state is not ConnectionState.CLOSED:
            self._write(_touch(msg.id))

    # ------------------------------------------------------------------ liveness

    def _arm(self, when: float) -> None:
        """Make the liveness timer fire by ``when`` (earlier than it is armed for now)."""
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        self._wake_at = when
        if when < _INF:
            self._wake = self._loop.call_at(when, self._check)  # type: ignore[union-attr]

    def _arm_by(self, when: float) -> None:
        """Make the liveness timer fire by ``when`` unless it will already (a publishing
        thread's request: see :mod:`nsqclient.sync.door`)."""
        if when < self._wake_at and self.state is not ConnectionState.CLOSED:
            self._arm(when)

    def _check(self) -> None:
        """The liveness timer: act on what :func:`liveness.check` finds due, then re-arm."""
        self._wake = None
        self._wake_at = _INF
        if self.state is ConnectionState.CLOSED:
            return
        now = self._loop.time()  # type: ignore[union-attr]
        pending = self._pending
        transport = self._transport
        verdict = liveness.check(
            now,
            liveness.Watch(
                last_read=self._last_read,
                dead_after=self._dead_after,
                heartbeats_off=self._heartbeats_off,
                pending=len(pending),
                buffered=self._decoder.buffered,
                oldest_deadline=pending[0][1] if pending else _INF,
                waiting_since=self._waiting_since,
                stuck_after=self._stuck_after,
                next_deadline=self._next_deadline,
                write_paused_at=self._write_paused_at,
                write_timeout=self.config.sec.write_timeout,
                paused_size=self._paused_buffer_size,
                buffer_size=transport.get_write_buffer_size() if transport is not None else 0,
            ),
        )
        watch = verdict.watch
        self._last_read = watch.last_read
        self._next_deadline = watch.next_deadline
        self._write_paused_at = watch.write_paused_at
        self._paused_buffer_size = watch.paused_size
        if verdict.dead is not None:
            text = liveness.describe(verdict.dead, now, watch)
            self.abort(NSQTimeoutError(text, address=self.address))
            return
        if verdict.expire:
            self._expire(now)
            watch = watch._replace(next_deadline=self._next_deadline)
        self._arm(liveness.next_wake(now, watch))

    @_under_door
    def _expire(self, now: float) -> None:
        """Fail every pending request whose deadline passed; the replies keep their slots."""
        earliest = float("inf")
        for future, deadline, _data in self._pending:
            if future.done():
                continue
            if deadline <= now:
                future.set_exception(
                    NSQTimeoutError(
                        "no reply from nsqd before the timeout; the command may "
                        "or may not have been applied",
                        address=self.address,
                    )
                )
            elif deadline < earliest:
                earliest = deadline
        self._next_deadline = earliest

    # ------------------------------------------------------------------ closing

    @_under_door
    def close(self) -> None:
        """Close after flushing queued writes."""
        if self.state is ConnectionState.CLOSED:
            return
        if self._wbuf or self._wrest is not None:
            self._flush(force=True)  # everything queued, even past a pause: the transport
            # delivers its buffer before closing
        if self.state is not ConnectionState.INIT:
            self.state = ConnectionState.CLOSING
        self._closing_on_purpose = True
        if self._transport is not None:
            self._transport.close()
            # nothing more is read once the transport closes: no reply can come any more
            if self._pending:
                self._fail_pending(self.close_exception)
        elif self._closed_future is not None:
            self.connection_lost(None)

    @_under_door
    def abort(self, exc: BaseException | None = None) -> None:
        """Drop the connection at once."""
        if self.state is ConnectionState.CLOSED:
            return
        if exc is not None and self.close_exception is None:
            self.close_exception = exc
        if self.state is ConnectionState.CONNECTED or self.state is ConnectionState.SUBSCRIBED:
            # unusable from now on, not only once connection_lost runs: a waiter completed
            # below may publish again at once and must not be given this connection
            self.state = ConnectionState.CLOSING
        if self._transport is not None:
            self._transport.abort()
        else:
            self.connection_lost(None)

    async def wait_closed(self) -> None:
        """Wait until the connection has closed (cancelling the wait does not close it)."""
        if self._closed_future is not None:
            await asyncio.shield(self._closed_future)

    @property
    def is_open(self) -> bool:
        """True while the connection accepts commands (``CONNECTED`` or ``SUBSCRIBED``)."""
        return self.state in (ConnectionState.CONNECTED, ConnectionState.SUBSCRIBED)

    def on_closed(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` (on the loop) once the connection has closed, however it closed."""
        assert self._closed_future is not None
        self._closed_future.add_done_callback(lambda _f: callback())

    def stats(self) -> ConnectionStats:
        """Counters and state of this connection (a new dict each call): :mod:`nsqclient.stats`."""
        return {
            "address": self.address,
            "connection_id": self.connection_id,
            "state": self.state.value,
            "buffered_bytes": self._decoder.buffered,
            "rdy": self.rdy,
            "in_flight": len(self.in_flight),
            "received": self.messages_received,
            "finished": self.messages_finished,
            "requeued": self.messages_requeued,
            "pending": len(self._pending),
            "heartbeats_received": self.heartbeats_received,
        }

    def __repr__(self) -> str:
        return (
            f"<Connection #{self.connection_id} nsqd={self.address} {self.state.value}"
            f" rdy={self.rdy}>"
        )


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


def _retrieve(fut: asyncio.Future[bytes]) -> None:
    if not fut.cancelled():
        fut.exception()


async def close_all(conns: Iterable[Connection], timeout: float) -> None:
    """Close connections (queued writes are flushed first) and wait for them, aborting any that
    has not closed within ``timeout`` seconds (a peer that stopped reading): one deadline for
    all, so that many stuck connections take no longer than one."""
    conns = list(conns)
    for conn in conns:
        conn.close()
    deadline = asyncio.get_running_loop().time() + timeout
    for conn in conns:
        try:
            async with asyncio.timeout_at(deadline):
                await conn.wait_closed()
        except TimeoutError:
            conn.abort()
