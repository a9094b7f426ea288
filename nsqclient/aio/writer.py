"""The Writer: PUB, MPUB and DPUB to one or more nsqd, each call resolved by nsqd's reply.

Every publish is acknowledged or raises a typed error: never a silent loss, never a hang (the
connection's ticker enforces ``publish_timeout`` without a timer per call). Commands are pipelined
on each connection and replies matched in FIFO order. With several nsqd, publishes go round-robin
over healthy connections; a connection that drops fails its pending publishes at once (they may or
may not have been stored: the error says so) and reconnects in the background with capped,
jittered backoff while new publishes go to the others. ``max_pending_publishes`` bounds what is
outstanding, so a slow nsqd makes callers wait instead of growing memory.

``http_fallback_addresses`` (nsqd HTTP addresses) make HTTP the way out when no TCP connection
is up: a publish that finds none goes to ``/pub`` or ``/mpub`` at once instead of waiting for a
reconnect. Only publishes not yet sent over TCP take that path, so a fallback never duplicates.

Every way of publishing (``pub``, ``mpub``/``dpub``, ``publish_nowait``, the sync facade's
tickets, the resend backlog) goes through one admission (a free slot, a started and open Writer:
:meth:`Writer._admissible` spelled inline), one dispatch (:meth:`Writer._dispatch`: the
connection choice, else the HTTP fallback) and one settlement (:meth:`Writer._settle`: counters,
slot and idle waiters, the observer). ``pub`` keeps an inlined copy of ``_publish`` and of
``_settle``'s success (one coroutine frame and one call less per publish); a test pins each
copy to its original.

With ``coalesce=True`` a PUB goes through the same admission and settlement, and to
:mod:`.coalesce` in between, which sends it as it is or in its topic's MPUB (through the same
dispatch).

The connections themselves are the :class:`~.nodes.NodeSet`'s; what happens after nsqd refuses a
publish (resending what it never ran, learning its size limits) is :mod:`.resend`'s; the HTTP
fallback is :mod:`.fallback`'s; coalescing is :mod:`.coalesce`'s. (About 800 lines, over the
~500 of the others, ``pub``'s two inlined branches included: the five public doors with their
documented contracts, the admission's waits for a slot or a connection and the close all read
and change one piece of state, the outstanding-publish count and its waiters; split, each part
would reach into the others' privates. The waits are the next candidate.)
"""

from __future__ import annotations

import asyncio
import collections
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Unpack, overload

from ..addresses import (
    format_address,
    parse_address,
)
from ..config import Config, lists_options
from ..errors import (
    ClosedError,
    NoConnectionsError,
    NotSentTimeoutError,
    ResponseFailedError,
    ServerError,
)
from ..message import _DONE, Message
from ..observer import Observer, observer_for
from ..protocol import commands
from ..protocol.names import Body, single_body_batch
from .coalesce import Coalescer, join_pub, split_pub
from .connection import CLOSE_FLOOR, Connection, ConnectionState, Pending, ReplyWaiter
from .fallback import HTTPFallback
from .nodes import NodeSet
from .options import ClientOptions, validate_client_options
from .replies import SharedWaiter
from .resend import Backlog, learn_limit
from .window import Guard, Window

if TYPE_CHECKING:
    from ..options import ConfigOptions
    from ..stats import WriterStats
    from .sharing import Shared

__all__ = ["ThreadDoors", "ThreadSeam", "Writer"]

_CONNECTED = ConnectionState.CONNECTED
_encode_pub = commands.pub
_pub_parts = commands.pub_parts
_check_timeout = commands.check_timeout
_Future = asyncio.Future

log = logging.getLogger("nsqclient.writer")


def _retrieved(task: asyncio.Task[None]) -> None:
    """A start nobody awaited any more: its error was the waiting publishes' (or nobody's)."""
    if not task.cancelled():
        task.exception()


def _describe(data: bytes) -> tuple[str, str]:
    """(verb, topic) of an encoded PUB/MPUB/DPUB, for the observer of ``publish_nowait``."""
    head = data[: data.index(b"\n")].split(b" ")
    return head[0].decode("ascii").lower(), head[1].decode("ascii")


class ThreadDoors(Protocol):
    """The blocking facade's publishing threads (:mod:`nsqclient.sync.door`), told of the
    connections a Writer shares with them (see :meth:`Writer.share_with_threads`)."""

    def new_lock(self) -> Guard:
        """A lock for the core to take where threads share its state (a ``threading.Lock``)."""
        ...

    def opened(self, shared: Shared) -> None:
        """A connection came up, shared (loop thread)."""

    def coalesced(self) -> tuple[int, int, int]:
        """What the threads' own coalescing joined: batches, messages, batches refused."""
        ...


class ThreadSeam(NamedTuple):
    """What a Writer gives the blocking facade (:meth:`Writer.share_with_threads`)."""

    #: max_pending_publishes and the counts, shared (see :mod:`.window`)
    window: Window
    #: whether a publish could be sent at once (slots aside): started, open, a connection up
    ready: Callable[[], bool]
    #: send an admitted, claimed publish any thread may complete: (waiter, data, count, timeout)
    send: Callable[[SharedWaiter, bytes, int, float], bool]
    #: send again what nsqd never ran (each keeps its slot): [(waiter, deadline, data)]
    resend: Callable[[list[Pending]], None]
    #: the NoConnectionsError for a publish that timed out unsent while no nsqd is up
    unreachable: Callable[[], NoConnectionsError | None]


@lists_options
class Writer:
    """Publish to nsqd. Options are :class:`~nsqclient.config.Config` fields."""

    _watch_fin = False  # ConnectionOwner: a Writer's connections never receive messages

    def __init__(
        self,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        *,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        http_fallback_addresses: Iterable[object] | str | None = None,
        host: str | None = None,
        port: int | None = None,
        config: Config | None = None,
        **options: Unpack[ConfigOptions],
    ) -> None:
        # asyncnsq style: host may be "127.0.0.1" or "tcp://127.0.0.1:4150"
        extra = (
            [parse_address(host or "127.0.0.1", port or 4150)]
            if host is not None or port is not None
            else []
        )
        self._init(
            validate_client_options(
                Config.from_options(config, **options),
                nsqd_tcp_addresses=nsqd_tcp_addresses,
                lookupd_http_addresses=lookupd_http_addresses,
                http_fallback_addresses=http_fallback_addresses,
                extra_nsqd=extra,
            )
        )

    @classmethod
    def _from_checked(cls, checked: ClientOptions) -> Writer:
        """A Writer of options checked already (the blocking facade checks them in the
        caller's thread): kept off the public signature."""
        writer = cls.__new__(cls)
        writer._init(checked)
        return writer

    def _init(self, checked: ClientOptions) -> None:
        self.config = checked.config
        self._ssl_context = checked.ssl_context
        self._http_fallback = checked.http_fallback_addresses
        self._nodes = NodeSet(
            checked,
            self,
            running=self._accepting,
            on_up=self._on_connection_up,
            log=log,
            prompt_after_error=True,
            on_loop_end=self.close,
        )
        self._conns = self._nodes.conns  # the same dict: read here, changed by the node set
        self._healthy: list[Connection] = []
        self._rr = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False
        self._start_lock: asyncio.Lock | None = None
        #: the start a publish or wait_ready began (it goes on past their deadline, shielded)
        self._start_task: asyncio.Task[None] | None = None
        self._healthy_event: asyncio.Event | None = None
        #: max_pending_publishes and the publish counts, shared with publishing threads once
        #: the blocking facade uses this Writer (see :meth:`share_with_threads`)
        self._window = Window(self.config.max_pending_publishes)
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle_waiters: list[asyncio.Future[None]] = []
        cfg = self.config
        self._max_pending = cfg.max_pending_publishes
        self._publish_timeout = cfg.sec.publish_timeout
        self._max_msg_size = cfg.max_msg_size
        self._max_body_size = cfg.max_body_size
        self._http = HTTPFallback(
            self._http_fallback,
            self._ssl_context,
            limits=lambda: (self._publish_timeout, self._max_msg_size, self._max_body_size),
            closed=lambda: self._closed,
            dial_now=self._nodes.dial_now,
        )
        #: publishes nsqd never executed (pipelined behind a fatal error) waiting for a connection
        self._backlog = Backlog(send=self._dispatch, closed=lambda: self._closed)
        #: PUBs queued together leave as one MPUB (the ``coalesce`` option; made on start)
        self._coalesce: Coalescer | None = None
        #: the blocking facade's publishing threads, told of each connection shared with them
        self._threads: ThreadDoors | None = None
        #: told of every publish (None: none attached; see :mod:`nsqclient.observer`)
        self._obs: Observer | None = observer_for(self)

    @property
    def published_over_http(self) -> int:
        """Of ``published``, how many went by the HTTP fallback."""
        return self._http.published

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect to every configured nsqd (each tried once, within ``dial_timeout``).

        An nsqd that cannot be reached yet does not make this fail: it is retried in the
        background (capped, jittered backoff; a WARNING names it), and publishes made meanwhile
        wait up to their timeout for a connection, then raise :class:`NoConnectionsError`. So a
        service started before its nsqd comes up by itself. An answer that retrying cannot
        change (an HTTP port, TLS or AUTH refused) raises here, at once. Idempotent; the first
        publish starts an unstarted Writer too. The same verb as :meth:`Reader.start
        <nsqclient.aio.Reader.start>`.
        """
        await self._start()

    async def connect(self) -> None:
        """The same as :meth:`start`: the name asyncnsq's and pynsq's writers use, kept for
        code migrating from them."""
        await self._start()

    async def _start(self) -> None:
        if self._closed:
            raise ClosedError("this Writer was closed; create a new one")
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self.is_started:  # another task started it while this one waited
                return
            if self.is_closed:
                raise ClosedError("this Writer was closed; create a new one")
            self._loop = asyncio.get_running_loop()
            if self.config.coalesce and self._coalesce is None:
                self._coalesce = self._coalescer(self._loop)
            if self._healthy_event is None:
                self._healthy_event = asyncio.Event()
            try:
                await self._nodes.start()
            except Exception:  # refused: misconfiguration, said now rather than retried forever
                self._healthy.clear()
                await self._nodes.drop_connections()
                raise
            self._started = True

    async def _start_by(self, deadline: float) -> None:
        """Start within a caller's deadline (loop time): the first connects (dial, then the
        handshake: up to ``dial_timeout + read_timeout``) may take longer than a publish may
        wait, so they run in a task of their own, which goes on when the caller gives up."""
        loop = asyncio.get_running_loop()
        task = self._start_task
        if task is None or task.done():
            task = self._start_task = loop.create_task(self._start(), name="nsq-writer-start")
            task.add_done_callback(_retrieved)
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(task)
        except TimeoutError:
            if task.done():
                raise  # the start's own error, as is
            raise NoConnectionsError(
                "no nsqd connection before the timeout: the first connection is still being "
                "made (dial, then the handshake; addresses: "
                f"{', '.join(format_address(*a) for a in self._nodes.addresses)}); the Writer "
                "keeps trying, so retrying later is safe (never sent)"
            ) from None

    def _coalescer(self, loop: asyncio.AbstractEventLoop) -> Coalescer:
        linger = self.config.sec.linger
        return Coalescer(
            loop,
            linger=linger,
            # sync tickets of one drain have deadlines microseconds apart, and with ``linger``
            # a batch's later PUBs are that much younger: none of a batch is timed out more
            # than this early (1% of the publish timeout, or twice ``linger``)
            tolerance=max(2 * linger, 0.01 * self._publish_timeout),
            dispatch=self._dispatch,
            resend=self._resend,
            max_body_size=self._max_body_size,
            max_msg_size=self._max_msg_size,
            hold_writes=self._hold_writes,
            write_held=self._write_held,
        )

    def _hold_writes(self) -> list[Connection]:
        return [conn for conn in self._healthy if conn.hold_writes()]

    @staticmethod
    def _write_held(held: list[Connection]) -> None:
        for conn in held:
            conn.write_held()

    async def __aenter__(self) -> Writer:
        await self._start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.graceful_close()

    def _accepting(self) -> bool:
        return not self._closed

    def share_with_threads(self, threads: ThreadDoors) -> ThreadSeam:
        """The blocking facade's seam (:mod:`nsqclient.sync.door`), before the Writer starts:
        each connection that comes up is shared with publishing threads
        (:meth:`Connection.share <nsqclient.aio.connection.Connection.share>`) and given to
        ``threads``, and the publish window is theirs too (its lock is the one every admission
        and settlement takes from then on). Returns what the facade's loop path uses."""
        self._threads = threads
        self._window.share(threads.new_lock(), self._after_release_threadsafe)
        return ThreadSeam(
            window=self._window,
            ready=self._ready_now,
            send=self._send_shared,
            resend=self._resend,
            unreachable=self._unreachable,
        )

    def _ready_now(self) -> bool:
        """Whether a publish could be sent at once (slots aside): started, open, and a
        connection or the HTTP fallback up."""
        return (
            self._started
            and not self._closed
            and (self._pick() is not None or bool(self._http_fallback))
        )

    def _send_shared(self, waiter: SharedWaiter, data: bytes, count: int, timeout: float) -> bool:
        """Send a publish of the facade's loop path (its slot held, settled by the waiter
        itself): any thread may read its reply."""
        return self._send(waiter, data, count, timeout, shared=True)

    def _after_release_threadsafe(self) -> None:
        """A publishing thread gave a slot back while the loop waits for one (or for none
        to be taken: a graceful close)."""
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._after_release)
            except RuntimeError:  # the loop is closed
                pass

    def _on_connection_up(self, conn: Connection) -> None:
        threads = self._threads
        if threads is not None:
            shared = conn.share(threads.new_lock(), threads.new_lock())
            if shared is not None:
                threads.opened(shared)
        self._healthy.append(conn)
        assert self._healthy_event is not None
        self._healthy_event.set()
        if self._backlog:
            self._resend()

    # ------------------------------------------------------------------ ConnectionOwner

    def _on_connection_lost(self, conn: Connection, exc: BaseException | None) -> None:
        # after an error frame the node set reconnects at once (prompt_after_error), so what
        # waits in the backlog goes soon
        self._nodes.lost(conn, exc)
        if conn in self._healthy:
            self._healthy.remove(conn)
        if not self._healthy and self._healthy_event is not None:
            self._healthy_event.clear()

    def _on_fatal_error(
        self, conn: Connection, error: ServerError, unexecuted: list[Pending]
    ) -> bool:
        """ConnectionOwner: learn nsqd's size limit from ``error`` and send ``unexecuted``
        again elsewhere (nsqd never ran them). Called by the connection, not by users."""
        # before the refused publish raises: the next call knows
        self._max_msg_size, self._max_body_size = learn_limit(
            error, self._max_msg_size, self._max_body_size
        )
        co = self._coalesce
        if co is not None:
            co.max_body_size, co.max_msg_size = self._max_body_size, self._max_msg_size
        if unexecuted:
            self._resend(unexecuted)
        return True

    @property
    def max_msg_size(self) -> int:
        """The largest body a publish may carry: ``max_msg_size``, or less once nsqd said so."""
        return self._max_msg_size

    @property
    def max_body_size(self) -> int:
        """The largest MPUB body: ``max_body_size``, or less once nsqd said so."""
        return self._max_body_size

    @property
    def resent(self) -> int:
        """Publishes sent again after nsqd refused one pipelined ahead of them."""
        return self._backlog.resent

    def _resend(self, commands: Iterable[Pending] = ()) -> None:
        """Send publishes that nsqd never executed (``commands``, and any kept from before) on
        another connection or over the HTTP fallback (see :mod:`.resend`)."""
        assert self._loop is not None
        self._backlog.resend(self._loop, commands)

    def _on_messages(self, conn: Connection, messages: list[Message]) -> None:
        log.warning(
            "writer connection %s received %d messages; ignoring", conn.address, len(messages)
        )

    def _on_message_result(self, conn: Connection, msg: Message, fin: bool, backoff: bool) -> None:
        pass

    def _on_response_error(self, conn: Connection, error: ResponseFailedError) -> None:
        log.warning("%s", error)

    # ------------------------------------------------------------------ publishing

    async def pub(self, topic: str, body: Body, *, timeout: float | None = None) -> None:
        """Publish one message; returns once nsqd acknowledged it, or raises.

        ``timeout`` (seconds >= 0, default ``publish_timeout``) covers waiting for a connection
        and a free slot and for nsqd's acknowledgement. Every error's ``sent`` says whether nsqd
        may have seen the publish. Not published, safe to retry: InvalidInputError (bad topic,
        body or timeout, before anything is sent), NoConnectionsError, NotSentTimeoutError,
        ClosedError, an error frame such as PublishFailedError. May or may not have been
        applied: ConnectionClosedError, NSQTimeoutError (``sent`` True). Call on the Writer's
        loop.
        """
        obs = self._obs
        token = None if obs is None else obs.publish_started("pub", topic, 1)
        co = self._coalesce
        try:
            if timeout is not None:
                _check_timeout(timeout)
            if co is None:
                data = _encode_pub(topic, body, max_msg_size=self._max_msg_size)
            else:  # checked the same, not joined: the body goes into its topic's MPUB
                prefix, part = _pub_parts(topic, body, max_msg_size=self._max_msg_size)
        except BaseException as exc:
            self._refused(exc, token)
            raise
        if co is not None:  # coalescing: the same admission, settlement and errors
            if self._started and not self._closed:
                healthy = self._healthy
                if (
                    (len(healthy) == 1 and healthy[0].state is _CONNECTED) or self._pick()
                ) and self._window.take():
                    fut: asyncio.Future[bytes] = _Future(loop=self._loop)
                    limit = self._publish_timeout if timeout is None else timeout
                    # nothing of its topic on its way: as the PUB it is, now; else batched
                    if not (
                        co.alone(prefix, fut)
                        and self._dispatch(fut, join_pub(prefix, part), 1, limit)
                    ):
                        co.add(prefix, fut, part, limit)
                    try:
                        await fut
                    except BaseException as exc:
                        self._settle(1, exc, token)
                        raise
                    # -- coalesced: _settle(1, None, token) inlined --
                    self._window.settle(1, None)
                    if self._slot_waiters or self._idle_waiters:
                        self._after_release()
                    if obs is not None:
                        obs.publish_settled(token, None)
                    # -- end coalesced settle --
                    return
            await self._publish_slow(b"", 1, timeout, token, (prefix, part))
            return
        # the hot path, _publish inlined (one coroutine frame less to resume per publish; the
        # single-connection pick inlined too). tests/aio/test_publish_paths.py pins it.
        # -- inlined from _publish --
        if self._started and not self._closed:
            healthy = self._healthy
            if len(healthy) == 1 and healthy[0].state is _CONNECTED:
                conn: Connection | None = healthy[0]
            else:
                conn = self._pick()
            if conn is not None and self._window.take():
                try:
                    await conn.request(data, self._publish_timeout if timeout is None else timeout)
                except BaseException as exc:
                    self._settle(1, exc, token)
                    raise
                # -- _settle(1, None, token) inlined (a call less per publish) --
                self._window.settle(1, None)
                if self._slot_waiters or self._idle_waiters:
                    self._after_release()
                if obs is not None:
                    obs.publish_settled(token, None)
                # -- end settle --
                return
        await self._publish_slow(data, 1, timeout, token)
        # -- end --

    @overload
    @single_body_batch("mpub takes a list of bodies: wrap a single body in a list")
    async def mpub(self, topic: str, bodies: Body, *, timeout: float | None = None) -> None: ...
    @overload
    async def mpub(
        self, topic: str, bodies: Iterable[Body], *, timeout: float | None = None
    ) -> None: ...
    async def mpub(
        self, topic: str, bodies: Iterable[Body] | Body, *, timeout: float | None = None
    ) -> None:
        """Publish a batch, ``mpub(topic, [a, b])``, atomically (nsqd stores all or none).

        A single body instead of a list (``str``, ``bytes``, ...), an empty batch, or one over
        ``max_body_size`` raises InvalidInputError before sending; ``timeout`` and the other
        errors are :meth:`pub`'s.
        """
        obs = self._obs
        try:
            items = commands.batch_bodies(bodies)
        except BaseException as exc:  # observed as a refused batch of none
            self._refused(exc, None if obs is None else obs.publish_started("mpub", topic, 0))
            raise
        token = None if obs is None else obs.publish_started("mpub", topic, len(items))
        try:
            if timeout is not None:
                _check_timeout(timeout)
            data = commands.mpub(
                topic, items, max_msg_size=self._max_msg_size, max_body_size=self._max_body_size
            )
        except BaseException as exc:
            self._refused(exc, token)
            raise
        await self._publish(data, len(items), timeout, token)

    async def dpub(
        self, topic: str, delay_ms: int, body: Body, *, timeout: float | None = None
    ) -> None:
        """Publish one message that nsqd delivers after ``delay_ms`` milliseconds.

        A delay outside 0 to nsqd's default ``--max-req-timeout`` (1 hour) raises
        InvalidArgumentError before sending; ``timeout`` and the other errors are :meth:`pub`'s.
        """
        obs = self._obs
        token = None if obs is None else obs.publish_started("dpub", topic, 1)
        try:
            if timeout is not None:
                _check_timeout(timeout)
            data = commands.dpub(topic, delay_ms, body, max_msg_size=self._max_msg_size)
        except BaseException as exc:
            self._refused(exc, token)
            raise
        await self._publish(data, 1, timeout, token)

    async def _publish(self, data: bytes, count: int, timeout: float | None, token: Any) -> None:
        """Admit, dispatch and settle one encoded publish (``timeout`` checked already)."""
        # fast path: connected, a free slot, a healthy connection (one check each, no clock read)
        # -- inlined into pub --
        if self._started and not self._closed:
            conn = self._pick()
            if conn is not None and self._window.take():
                try:
                    await conn.request(data, self._publish_timeout if timeout is None else timeout)
                except BaseException as exc:
                    self._settle(count, exc, token)
                    raise
                self._settle(count, None, token)
                return
        await self._publish_slow(data, count, timeout, token)
        # -- end --

    async def _publish_slow(
        self,
        data: bytes,
        count: int,
        timeout: float | None,
        token: Any,
        parts: tuple[bytes, bytes] | None = None,
    ) -> None:
        """Admit (waiting for a slot and a connection, or taking the HTTP fallback), dispatch
        and settle ``data``; or, with ``parts`` (a coalesced PUB's prefix and body), queue those
        in the Writer's coalescing."""
        limit = self._publish_timeout if timeout is None else timeout
        try:
            if self._closed:
                raise ClosedError("this Writer was closed; create a new one")
            if not self._started:
                deadline = asyncio.get_running_loop().time() + limit
                await self._start_by(deadline)
            else:
                deadline = self._loop.time() + limit  # type: ignore[union-attr]
        except NoConnectionsError as exc:  # no connection in time: a failed publish
            self._refused(exc, token, counted=True)
            raise
        except BaseException as exc:
            self._refused(exc, token)
            raise
        loop = self._loop
        assert loop is not None
        conn = self._pick()
        slot = conn is not None and self._window.take()
        while not slot:  # rare: wait for a free slot, then for a connection, then re-check
            try:
                if self.outstanding >= self._max_pending:
                    await self._wait_slot(deadline)
                conn = self._pick()
                if conn is None:
                    if self._http_fallback:
                        if self._window.take():
                            break  # no TCP connection: publish over HTTP below
                        continue
                    await self._wait_healthy(deadline)
                    conn = self._pick()
                slot = conn is not None and self._window.take()
            except BaseException as exc:
                self._refused(exc, token, counted=True)
                raise
        co = self._coalesce
        try:
            if parts is not None and co is not None:  # a PUB, coalesced (over HTTP: /mpub)
                fut: asyncio.Future[bytes] = loop.create_future()
                co.add(parts[0], fut, parts[1], deadline - loop.time())
                await fut
            elif conn is None:
                await self._http.task(data, count, deadline - loop.time())
            else:
                await conn.request(data, deadline - loop.time())
        except BaseException as exc:
            self._settle(count, exc, token)
            raise
        self._settle(count, None, token)

    def publish_nowait(
        self, data: bytes, count: int = 1, timeout: float | None = None
    ) -> asyncio.Future[bytes] | None:
        """Queue an encoded PUB/MPUB/DPUB (``nsqclient.protocol.commands``) without a task;
        returns the acknowledgement future, or None if it must wait (no connection or no free
        slot: see :meth:`wait_ready`). For callers that keep many publishes in flight from a
        loop callback, where a coroutine per publish would cost more than the publish."""
        if timeout is not None:
            _check_timeout(timeout)
        if self._closed or not self._started or not self._window.take():
            return None
        assert self._loop is not None
        fut: asyncio.Future[bytes] = self._loop.create_future()
        limit = self._publish_timeout if timeout is None else timeout
        if not self._send(fut, data, count, limit):
            self._window.give()
            return None
        obs = self._obs
        token = None if obs is None else obs.publish_started(*_describe(data), count)
        fut.add_done_callback(partial(self._nowait_done, count, token))
        return fut

    def _nowait_done(self, count: int, token: Any, fut: asyncio.Future[bytes]) -> None:
        self._settle(count, asyncio.CancelledError() if fut.cancelled() else fut.exception(), token)

    # ------------------------------------------------------------------ dispatch and settlement

    def _send(
        self, waiter: ReplyWaiter, data: bytes, count: int, timeout: float, shared: bool = False
    ) -> bool:
        """A first send of an admitted, encoded publish (``publish_nowait``, the sync facade's
        tickets): when coalescing, a PUB goes as it is while nothing of its topic is on its way
        and joins its topic's batch otherwise (if a connection or the HTTP fallback could take
        it); anything else goes to :meth:`_dispatch`. False if neither is up."""
        co = self._coalesce
        if co is None or not data.startswith(b"PUB "):
            return self._dispatch(waiter, data, count, timeout, shared)
        if self._pick() is None and not self._http_fallback:
            return False
        prefix, body = split_pub(data)
        if not (co.alone(prefix, waiter) and self._dispatch(waiter, data, count, timeout)):
            co.add(prefix, waiter, body, timeout)
        return True

    def _dispatch(
        self, waiter: ReplyWaiter, data: bytes, count: int, timeout: float, shared: bool = False
    ) -> bool:
        """Send on a healthy connection, else over the HTTP fallback; False if neither is up.
        Takes no slot: the caller admitted the publish (a resend keeps its first admission).
        ``shared``: any thread may complete ``waiter`` (a ticket of the blocking facade)."""
        conn = self._pick()
        if conn is not None:
            if shared:
                conn.request_shared(waiter, data, timeout)
            else:
                conn.request_to(waiter, data, timeout)
            return True
        if self._http_fallback:
            self._http.send(waiter, data, count, timeout)
            return True
        return False

    def _settle(self, count: int, error: BaseException | None, token: Any) -> None:
        """An admitted publish is over: count it, pass its slot on (waking ``graceful_close``
        when none is left), and tell the observer."""
        self._window.settle(count, error)
        if self._slot_waiters or self._idle_waiters:
            self._after_release()
        obs = self._obs
        if obs is not None:
            obs.publish_settled(token, error)

    def _refused(self, error: BaseException, token: Any, *, counted: bool = False) -> None:
        """A publish that was never admitted failed: bad input or a closed Writer (not
        counted), no slot or connection in time (counted in ``failed``)."""
        if counted:
            self._window.refused()
        obs = self._obs
        if obs is not None:
            obs.publish_settled(token, error)

    def _after_release(self) -> None:
        if self._slot_waiters:
            self._wake_slot()
        if self._idle_waiters and not self.outstanding:
            self._wake_idle()
        self._want_slots()

    def _want_slots(self) -> bool:
        """Tell the window whether the loop waits for slots (so that a publishing thread
        that gives one back wakes it); True if one is free now."""
        return self._window.set_wanted(bool(self._slot_waiters or self._idle_waiters))

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until a publish could be sent at once: connected, with a free pending slot.

        Raises NoConnectionsError or NSQTimeoutError if that does not happen within ``timeout``.
        """
        if self._closed:
            raise ClosedError("this Writer was closed; create a new one")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._publish_timeout if timeout is None else timeout)
        if not self._started:
            await self._start_by(deadline)
        fallback = bool(self._http_fallback)
        while self.outstanding >= self._max_pending or (self._pick() is None and not fallback):
            if self.outstanding >= self._max_pending:
                await self._wait_slot(deadline)
            if self._pick() is None and not fallback:
                await self._wait_healthy(deadline)

    def _pick(self) -> Connection | None:
        healthy = self._healthy
        n = len(healthy)
        if n == 1:
            conn = healthy[0]
            return conn if conn.state is _CONNECTED else None
        for _ in range(n):
            self._rr = (self._rr + 1) % n
            conn = healthy[self._rr]
            if conn.is_open and conn.writable:
                return conn
        for conn in healthy:
            if conn.is_open:
                return conn
        return None

    async def _wait_healthy(self, deadline: float) -> Connection:
        loop = self._loop
        assert loop is not None and self._healthy_event is not None
        while True:
            if self._closed:
                raise ClosedError("this Writer was closed while a publish waited for a connection")
            conn = self._pick()
            if conn is not None:
                return conn
            self._healthy_event.clear()
            self._nodes.dial_now(deadline)  # don't wait for the reconnect backoff
            remaining = deadline - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    await self._healthy_event.wait()
            except TimeoutError:
                raise self._no_connections() from self._nodes.last_error

    def _no_connections(self) -> NoConnectionsError:
        last = self._nodes.last_error
        return NoConnectionsError(
            "no nsqd connection became available before the publish timeout "
            f"(addresses: {', '.join(format_address(*a) for a in self._nodes.addresses)}"
            + (f"; last error: {last}" if last is not None else "")
            + ")"
        )

    def _unreachable(self) -> NoConnectionsError | None:
        """For a publish that timed out unsent: the NoConnectionsError that says why, when no
        nsqd connection is up and there is no HTTP fallback; None while one is (so a timeout
        then is the queue's or a slot's). Any thread: it reads a dict's size. Why: the sync
        facade's caller and the loop race at the deadline, and the same outage must raise the
        same error whichever of them looks first."""
        if self._conns or self._http_fallback:
            return None
        error = self._no_connections()
        error.__cause__ = self._nodes.last_error
        return error

    async def _wait_slot(self, deadline: float) -> None:
        loop = self._loop
        assert loop is not None
        while self.outstanding >= self._max_pending:
            fut: asyncio.Future[None] = loop.create_future()
            self._slot_waiters.append(fut)
            if self._want_slots():  # freed meanwhile (by a publishing thread)
                fut.set_result(None)
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await fut
            except BaseException as exc:
                if fut.done() and not fut.cancelled():
                    # woken and timed out or cancelled at once: pass the free slot on
                    self._wake_slot()
                if isinstance(exc, TimeoutError):
                    raise NotSentTimeoutError(
                        f"{self.outstanding} publishes outstanding (max_pending_publishes); "
                        "nsqd did not catch up before the publish timeout, so this one was never "
                        "sent (safe to retry)"
                    ) from None
                raise
            finally:
                if fut in self._slot_waiters:
                    self._slot_waiters.remove(fut)
                self._want_slots()
            if self._closed:
                raise ClosedError("this Writer was closed while a publish waited")

    def _wake_slot(self) -> None:
        while self._slot_waiters:
            fut = self._slot_waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _wake_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    @property
    def outstanding(self) -> int:
        """Publishes admitted and not settled yet (those of publishing threads included)."""
        return self._window.used

    # ------------------------------------------------------------------ closing

    async def graceful_close(self, timeout: float | None = None) -> None:
        """Refuse new publishes, wait for outstanding acks, then close.

        ``timeout`` (seconds, default ``close_timeout``) bounds the wait; publishes still
        unacknowledged then fail with ConnectionClosedError. Idempotent.
        """
        if self._closed and not self._conns:
            return
        self._closed = True
        if self._coalesce is not None:
            self._coalesce.flush()  # what was queued goes now, not ``linger`` later
        self._refuse_waiters()
        loop = self._loop
        wait = self.config.sec.close_timeout if timeout is None else timeout
        left: float | None = None
        if loop is not None:
            deadline = loop.time() + wait
            if self.outstanding:
                fut: asyncio.Future[None] = loop.create_future()
                self._idle_waiters.append(fut)
                self._want_slots()
                if not self.outstanding:  # settled meanwhile (by a publishing thread)
                    fut.set_result(None)
                try:
                    async with asyncio.timeout_at(deadline):
                        await fut
                except TimeoutError:
                    log.warning("writer closing with %d publishes unacknowledged", self.outstanding)
                finally:
                    if fut in self._idle_waiters:
                        self._idle_waiters.remove(fut)
                    self._want_slots()
            left = max(CLOSE_FLOOR, deadline - loop.time())  # closing too ends by the deadline
        await self._shutdown(left)

    def close(self) -> Awaitable[None]:
        """Close at once; unacknowledged publishes fail with ConnectionClosedError.

        Usable as ``writer.close()`` or ``await writer.close()``.
        """
        self._closed = True
        if self._coalesce is not None:
            self._coalesce.flush()  # written before the connections close, as a PUB would be
        self._refuse_waiters()
        self._nodes.close_each()
        self._http.cancel()
        if self._loop is None:
            return _DONE
        return self._loop.create_task(self._shutdown())

    def _refuse_waiters(self) -> None:
        """Wake every publish still waiting for a slot or a connection: they raise ClosedError."""
        if self._backlog:
            self._resend()  # closed now: each raises ClosedError
        for fut in self._slot_waiters:
            if not fut.done():
                fut.set_result(None)
        if self._healthy_event is not None:
            self._healthy_event.set()

    async def _shutdown(self, timeout: float | None = None) -> None:
        self._closed = True
        await self._nodes.stop_discovery()
        await self._nodes.close_connections(timeout)
        await self._http.aclose()  # graceful_close waited for its publishes (bounded)
        if self._healthy_event is not None:
            self._healthy_event.set()  # wake publishes waiting for a connection: they raise

    @property
    def is_started(self) -> bool:
        """True once :meth:`start` (or the first publish) has started the Writer."""
        return self._started

    @property
    def is_closed(self) -> bool:
        """True once close() or graceful_close() began; publishing then raises ClosedError."""
        return self._closed

    @property
    def connections(self) -> list[Connection]:
        """A snapshot list of the nsqd connections (a copy: safe to keep). Loop thread only."""
        return list(self._conns.values())

    def stats(self) -> WriterStats:
        """Counters and state, cheap enough to poll (a new dict each call; nothing per message).

        Every key, its unit and its meaning: :class:`nsqclient.stats.WriterStats` (keys are only
        ever added across releases). Loop thread only.
        """
        co = self._coalesce
        batches, messages, split = (0, 0, 0) if co is None else (co.batches, co.messages, co.split)
        threads = self._threads
        if threads is not None:  # the publishing threads' own coalescing (sync.door_batch)
            b, m, x = threads.coalesced()
            batches, messages, split = batches + b, messages + m, split + x
        window = self._window
        return {
            "published": window.published,
            "published_over_http": self.published_over_http,
            "failed": window.failed,
            "resent": self.resent,
            "coalesced_batches": batches,
            "coalesced_messages": messages,
            "coalesced_split": split,
            "outstanding": self.outstanding,
            "max_pending_publishes": self._max_pending,
            "connection_losses": self._nodes.outages.losses,
            "reconnects": self._nodes.outages.reconnects,
            "nsqd_down": self._nodes.outages.down,
            "connections": [
                {
                    "address": c.address,
                    "connection_id": c.connection_id,
                    "state": c.state.value,
                    "pending": c.pending_requests,
                    "buffered_bytes": c.buffered_bytes,
                }
                for c in self._conns.values()
            ],
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._started else "new")
        return f"<Writer {state} conns={len(self._healthy)} outstanding={self.outstanding}>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # like an unclosed socket's: names the Writer a program left open (shown with -X dev
        # or -W default::ResourceWarning); a loop that ended with it open closed it (nodes.py)
        nodes: NodeSet | None = getattr(self, "_nodes", None)
        if nodes is not None and self._started and (not self._closed or nodes.left_open):
            _warn(
                f"unclosed Writer (nsqd {', '.join(format_address(*a) for a in nodes.addresses)})"
                ": close it (await writer.close(), or async with Writer(...)) before its event "
                "loop ends",
                ResourceWarning,
                source=self,
            )
