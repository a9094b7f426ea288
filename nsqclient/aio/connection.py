"""One TCP connection to one nsqd: the read path, and the parts that share its state.

The handshake is carried out by :mod:`.handshake` (``connect()`` hands it every chunk read
until it is done). The connection is an ``asyncio.BufferedProtocol`` feeding
:class:`~nsqclient.protocol.FrameDecoder` directly, so a chunk of N message frames costs one
decoder call and one ``_on_messages`` call to the owner. Its other parts are mixins, each in
its own module, so that the per-message paths stay one attribute away: the write path
(:mod:`.writes`: every command of one loop iteration written once), the replies
(:mod:`.answers`: matched in FIFO order through :mod:`.replies`, error frames, the end), the
liveness timer (:mod:`.watchdog`, deciding with :mod:`nsqclient.flow.liveness`), and the stream
layers (:mod:`.layers`: TLS, which the connection runs itself over its raw transport
(:mod:`.tlswire`), and compression). A Writer connection of the blocking facade, of any kind,
is shared with publishing threads through :mod:`.sharing`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..addresses import format_address
from ..errors import (
    ClosedError,
    ConnectError,
    ConnectionClosedError,
    ProtocolError,
    ResponseFailedError,
    ServerError,
)
from ..flow.requeue import requeue_delay_ms
from ..flow.turns import Turn
from ..message import Message
from ..protocol import commands
from ..protocol.compression import Codec
from ..protocol.frames import (
    Event,
    FrameDecoder,
)
from .answers import ReplyPath, Section
from .layers import StreamLayers
from .replies import Pending, ReplyQueue, ReplyWaiter
from .sharing import Shared
from .state import ConnectionState
from .tlswire import TLSWire
from .watchdog import Watchdog
from .window import Guard
from .writes import WritePath

if TYPE_CHECKING:
    from ..config import Config
    from ..protocol.identify import AuthResponse, IdentifyOptions, IdentifyResponse
    from ..stats import ConnectionStats
    from .handshake import Setup

__all__ = [
    "CLOSE_FLOOR",
    "Connection",
    "ConnectionOwner",
    "ConnectionState",
    "Pending",
    "ReplyWaiter",
    "close_all",
]

log = logging.getLogger("nsqclient.connection")

_NOP: Final = commands.nop()
_fin = commands.fin_unchecked
_req = commands.req_unchecked
_touch = commands.touch_unchecked
_rdy = commands.rdy_unchecked
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
_LOOP_TURN: Final = Turn.LOOP
#: connection ids: unique per Connection object in the process, in creation order (``next`` on
#: a count is atomic under the GIL, so loops on several threads may draw from it)
_next_id = itertools.count(1).__next__


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


class Connection(ReplyPath, WritePath, Watchdog, StreamLayers, asyncio.BufferedProtocol):
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
        self._tls: TLSWire | None = None
        self._codec: Codec | None = None
        self._encode: Callable[[bytes], bytes] | None = None  # see StreamLayers
        #: the handshake while it runs: it gets what is read until then (see connect())
        self._setup: Setup | None = None
        self._rview = memoryview(bytearray(_READ_SIZE))  # see get_buffer()
        #: a Writer connection shared with publishing threads (the sync facade's: see
        #: :meth:`share`): its guard then brackets every change to the reply FIFO and every
        #: write, the loop's ones included (``with self._section:``)
        self._wire: Guard | None = None
        self._guard: Guard | None = None
        self._shared: Shared | None = None
        self._depth = 0  # the loop's nesting of sections (loop thread only)
        #: waiters a section ended, completed once it let go of the guard: (waiter, error)
        self._later: list[tuple[ReplyWaiter, BaseException | None]] = []
        self._section = Section(self)
        self._wbuf: list[bytes] = []
        self._wrest: memoryview | None = None  # unsent rest of a big batch, written first
        #: bytes a publishing thread could not send whole: the loop writes them before the rest
        self._raw_rest: list[bytes] = []
        self._flush_scheduled = False
        self._batch_now: float | None = None  # see request()
        self._replies = ReplyQueue()
        self._closed_future: asyncio.Future[None] | None = None
        self._close_wait: asyncio.Future[None] | None = None
        self._wake: asyncio.TimerHandle | None = None  # the liveness timer, when armed
        self._wake_at = _INF  # when it fires (inf: not armed)
        self._last_read = 0.0  # when the last complete frame was decoded (after the handshake)
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
                self._set_stream(setup.tls, setup.codec)
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
        shared = self._shared
        if shared is not None:  # the turn may pass to publishing threads now (flow.turns)
            with self._section:
                shared.loop_read_ended_locked(self._loop.time())  # type: ignore[union-attr]

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
            events = self.decode(data)
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
        if self._guard is not None:
            with self._section:
                self._dispatch_mixed(events)
        else:
            self._dispatch_mixed(events)

    def _dispatch_handed_back(self, events: list[Event]) -> None:
        """What a publishing thread read that only the loop may handle (:mod:`.sharing`)."""
        self._dispatch(events)
        shared = self._shared
        if shared is not None and self.state is not ConnectionState.CLOSED:
            with self._section:
                shared.loop_read_ended_locked(self._loop.time())  # type: ignore[union-attr]

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

    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio.Protocol callback: mark the connection closed, fail every pending request and
        tell the owner. Idempotent; called by the loop (or by :meth:`abort`).
        """
        if self.state is ConnectionState.CLOSED:
            return
        if (
            isinstance(exc, OSError)
            and self._replies
            and self._setup is None
            and self._read_what_is_left()
        ):
            return  # what was left closed the connection
        with self._section:
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
            self._raw_rest.clear()
            # the 64 KiB read buffer goes now, not when a full collection finds this connection
            # (a connection lives long enough to be collected only with the oldest generation)
            self._rview = _CLOSED_VIEW
            cause = self.close_exception
            self._fail_pending(cause)
            shared = self._shared
            if shared is not None:
                shared.lost()
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

    def _read_what_is_left(self) -> bool:
        """A write failed (nsqd closed the connection): read what nsqd sent before its end;
        True if that closed the connection.

        Why: nsqd answers a refused publish with an error frame and closes; a command written
        after that meets the reset, and asyncio then drops the transport without reading the
        frame still waiting in the socket, so the refused publish (and each one before it)
        would fail as maybe-sent instead of with nsqd's answer. The socket stays open until
        this callback returns, and the kernel hands out received bytes before the reset, so
        they are read here (a bounded number of non-blocking reads), through the stream's layers
        (TLS too: the connection runs it). Not while a publishing thread may read the socket (it
        reads the answer itself).
        """
        transport = self._transport
        shared = self._shared
        if transport is None or (shared is not None and shared.turns.state is not _LOOP_TURN):
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
            if self.state is ConnectionState.CLOSED or not self._replies:
                break
        return self.state is ConnectionState.CLOSED

    def request(self, data: bytes, timeout: float | None = None) -> asyncio.Future[bytes]:
        """Queue a reply-producing command; the future gets the response payload or the error.

        The deadline (``timeout`` seconds) is enforced by the connection's liveness timer, which
        fails the future with NSQTimeoutError; a reply that comes later is consumed and dropped.
        """
        # The publish hot path: request_to's body inlined (tests/aio/test_inlined_copies.py keeps
        # the two equal), the future made without the loop's
        # create_future() hop (which returns this same asyncio.Future on asyncio's loops and on
        # uvloop; an asyncio.Future works on any loop)
        if self._guard is not None:  # shared with publishing threads: in a section
            return self._request_future_shared(data, timeout)
        state = self.state
        if state is not _CONNECTED and state is not _SUBSCRIBED:
            raise ConnectionClosedError(f"connection is {state.value}", address=self.address)
        loop = self._loop
        fut: asyncio.Future[bytes] = _Future(loop=loop)
        # one clock read per batch: the time of the first request since the last flush, at most
        # one loop iteration old (a deadline a little early, never late)
        now = self._batch_now
        if now is None:
            now = self._batch_now = loop.time()  # type: ignore[union-attr]
        deadline = _INF if timeout is None else now + timeout
        if self._replies.push(fut, deadline, data, False, now) and deadline < self._wake_at:
            self._arm(deadline)
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)  # type: ignore[union-attr]
        return fut

    def request_to(self, waiter: ReplyWaiter, data: bytes, timeout: float | None = None) -> None:
        """Like :meth:`request`, completing ``waiter`` (see :class:`ReplyWaiter`) directly.

        The same statements as :meth:`request` but for its future (a test keeps them equal).
        """
        if self._guard is not None:  # shared with publishing threads: in a section
            self._request_shared(waiter, data, timeout)
            return
        state = self.state
        if state is not _CONNECTED and state is not _SUBSCRIBED:
            raise ConnectionClosedError(f"connection is {state.value}", address=self.address)
        loop = self._loop
        now = self._batch_now
        if now is None:
            now = self._batch_now = loop.time()  # type: ignore[union-attr]
        deadline = _INF if timeout is None else now + timeout
        if self._replies.push(waiter, deadline, data, False, now) and deadline < self._wake_at:
            self._arm(deadline)
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _request_shared(
        self, waiter: ReplyWaiter, data: bytes, timeout: float | None, shared_waiter: bool = False
    ) -> None:
        """:meth:`request_to` on a connection shared with publishing threads: in a section,
        and reading stays the loop's while a reply only it may complete is pending."""
        with self._section:
            state = self.state
            if state is not _CONNECTED and state is not _SUBSCRIBED:
                raise ConnectionClosedError(f"connection is {state.value}", address=self.address)
            now = self._loop.time()  # type: ignore[union-attr]
            deadline = _INF if timeout is None else now + timeout
            pushed = self._replies.push(waiter, deadline, data, shared_waiter, now)
            if pushed and deadline < self._wake_at:
                self._arm(deadline)
            self._write(data)
            if not shared_waiter:
                shared = self._shared
                assert shared is not None
                shared.loop_command_locked(now)

    def _request_future_shared(self, data: bytes, timeout: float | None) -> asyncio.Future[bytes]:
        fut: asyncio.Future[bytes] = _Future(loop=self._loop)
        self._request_shared(fut, data, timeout)
        return fut

    def request_shared(self, waiter: ReplyWaiter, data: bytes, timeout: float | None) -> None:
        """Queue a reply-producing command whose ``waiter`` any thread may complete (the sync
        facade's tickets, sent by the loop: :class:`~.replies.SharedWaiter`); on an unshared
        connection the same as :meth:`request_to`."""
        if self._guard is None:
            self.request_to(waiter, data, timeout)
        else:
            self._request_shared(waiter, data, timeout, shared_waiter=True)

    def share(self, wire: Guard, guard: Guard) -> Shared | None:
        """Share this connection with publishing threads (the sync facade's Writer; loop
        thread, connected, once): from now on ``wire`` (a lock the facade made) orders every
        write and ``guard`` every change to the reply FIFO and the turn (see :mod:`.sharing`;
        the loop's sections take both), and the returned :class:`~.sharing.Shared` is the
        threads' way in.

        Every kind is shared: plain TCP, TLS and compression (the stream layers, :mod:`.layers`,
        are used holding the wire; the decompressor by the reader). None once closed, or for a
        transport without a socket.
        """
        transport = self._transport
        if self._shared is not None:
            return self._shared
        if (
            self.state is not _CONNECTED
            or transport is None
            or transport.get_extra_info("socket") is None
        ):
            return None
        shared = Shared(self, wire, guard)
        self._shared = shared
        self._wire = wire
        self._guard = guard
        return shared

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet decoded: the start of a frame whose rest has not come."""
        return self._decoder.buffered

    @property
    def pending_requests(self) -> int:
        """How many sent commands still await nsqd's reply (PUB/MPUB/DPUB/SUB/...)."""
        return len(self._replies)

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
        now = self._loop.time()
        deadline = now + timeout
        placeholder = self._loop.create_future()  # CLOSE_WAIT's slot; a timeout is False here
        placeholder.add_done_callback(_retrieve)
        if self._replies.push(placeholder, deadline, b"", False, now) and deadline < self._wake_at:
            self._arm(deadline)
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

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Close after flushing queued writes."""
        if self.state is ConnectionState.CLOSED:
            return
        with self._section:
            if self._wbuf or self._wrest is not None or self._raw_rest:
                self._flush_locked(force=True)  # everything queued, even past a pause: the
                # transport delivers its buffer before closing
            if self._tls is not None:
                self._say_goodbye()
            if self.state is not ConnectionState.INIT:
                self.state = ConnectionState.CLOSING
            self._closing_on_purpose = True
            if self._transport is not None:
                self._transport.close()
                # nothing more is read once the transport closes: no reply can come any more
                if self._replies:
                    self._fail_pending(self.close_exception)
            elif self._closed_future is not None:
                self.connection_lost(None)

    def abort(self, exc: BaseException | None = None) -> None:
        """Drop the connection at once."""
        if self.state is ConnectionState.CLOSED:
            return
        with self._section:
            if exc is not None and self.close_exception is None:
                self.close_exception = exc
            if self.state is _CONNECTED or self.state is _SUBSCRIBED:
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
            "pending": len(self._replies),
            "heartbeats_received": self.heartbeats_received,
        }

    def __repr__(self) -> str:
        return (
            f"<Connection #{self.connection_id} nsqd={self.address} {self.state.value}"
            f" rdy={self.rdy}>"
        )


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
