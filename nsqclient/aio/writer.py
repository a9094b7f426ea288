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

The connections themselves are the :class:`~.nodes.NodeSet`'s; what happens after nsqd refuses a
publish (resending what it never ran, learning its size limits) is :mod:`.resend`'s. (Longer than
most modules: the publish paths, the wait for a slot or a connection, the HTTP fallback and the
close share one piece of state, the outstanding-publish count and its waiters, and the publish
paths are kept whole so they read, and profile, as one.)
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Unpack, overload

from ..addresses import (
    format_address,
    parse_address,
)
from ..config import Config
from ..errors import (
    ClosedError,
    NoConnectionsError,
    NotSentTimeoutError,
    NSQTimeoutError,
    ResponseFailedError,
    ServerError,
)
from ..message import _DONE, Message
from ..observability import _hook
from ..protocol import commands
from ..protocol.names import Body, single_body_batch
from .connection import Connection, ConnectionState, Pending, ReplyWaiter
from .nodes import NodeSet
from .options import ClientOptions, validate_client_options
from .resend import Backlog, learn_limit
from .resend import complete_waiter as _complete_waiter

if TYPE_CHECKING:
    from ..http import NsqdHTTPClient
    from ..options import ConfigOptions
    from ..stats import WriterStats

__all__ = ["Writer"]

_CONNECTED = ConnectionState.CONNECTED
_encode_pub = commands.pub
_check_timeout = commands.check_timeout

log = logging.getLogger("nsqclient.writer")


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
        _checked: ClientOptions | None = None,
        **options: Unpack[ConfigOptions],
    ) -> None:
        # ``_checked``: the options checked already (the blocking facade did, in its thread)
        if _checked is None:
            # asyncnsq style: host may be "127.0.0.1" or "tcp://127.0.0.1:4150"
            extra = (
                [parse_address(host or "127.0.0.1", port or 4150)]
                if host is not None or port is not None
                else []
            )
            _checked = validate_client_options(
                Config.from_options(config, **options),
                nsqd_tcp_addresses=nsqd_tcp_addresses,
                lookupd_http_addresses=lookupd_http_addresses,
                http_fallback_addresses=http_fallback_addresses,
                extra_nsqd=extra,
            )
        self.config = _checked.config
        self._ssl_context = _checked.ssl_context
        self._http_fallback = _checked.http_fallback_addresses
        self._http_clients: list[NsqdHTTPClient] = []  # made on first use, on the loop
        self._http_rr = 0
        self._http_tasks: set[asyncio.Task[bytes]] = set()
        self._nodes = NodeSet(
            _checked,
            self,
            running=self._accepting,
            on_up=self._on_connection_up,
            log=log,
            prompt_after_error=True,
        )
        self._conns = self._nodes.conns  # the same dict: read here, changed by the node set
        self._healthy: list[Connection] = []
        self._rr = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False
        self._start_lock: asyncio.Lock | None = None
        self._healthy_event: asyncio.Event | None = None
        self._outstanding = 0
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle_waiters: list[asyncio.Future[None]] = []
        cfg = self.config
        self._max_pending = cfg.max_pending_publishes
        self._publish_timeout = cfg.sec.publish_timeout
        self._max_msg_size = cfg.max_msg_size
        self._max_body_size = cfg.max_body_size
        #: publishes nsqd never executed (pipelined behind a fatal error) waiting for a connection
        self._backlog = Backlog(
            pick=self._pick,
            http=self._http_task if self._http_fallback else None,
            closed=lambda: self._closed,
        )
        self.published = 0  # messages acknowledged
        self.failed = 0  # publish calls that raised
        self.published_over_http = 0  # of ``published``, how many went by the HTTP fallback
        if _hook.active is not None:  # observability.instrument(): all logic is there
            _hook.active.attach(self)

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Connect to every configured nsqd (each tried once, within ``dial_timeout``).

        An nsqd that cannot be reached yet does not make this fail: it is retried in the
        background (capped, jittered backoff; a WARNING names it), and publishes made meanwhile
        wait up to their timeout for a connection, then raise :class:`NoConnectionsError`. So a
        service started before its nsqd comes up by itself. An answer that retrying cannot
        change (an HTTP port, TLS or AUTH refused) raises here, at once.
        """
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
            if self._healthy_event is None:
                self._healthy_event = asyncio.Event()
            try:
                await self._nodes.start()
            except Exception:  # refused: misconfiguration, said now rather than retried forever
                self._healthy.clear()
                await self._nodes.drop_connections()
                raise
            self._started = True

    async def __aenter__(self) -> Writer:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.graceful_close()

    def _accepting(self) -> bool:
        return not self._closed

    def _on_connection_up(self, conn: Connection) -> None:
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
        if timeout is not None:
            _check_timeout(timeout)
        data = _encode_pub(topic, body, max_msg_size=self._max_msg_size)
        # the hot path, _publish inlined (one coroutine frame less to resume per publish)
        if self._started and not self._closed and self._outstanding < self._max_pending:
            healthy = self._healthy
            if len(healthy) == 1 and healthy[0].state is _CONNECTED:
                conn: Connection | None = healthy[0]
            else:
                conn = self._pick()
            if conn is not None:
                self._outstanding += 1
                try:
                    await conn.request(data, self._publish_timeout if timeout is None else timeout)
                except BaseException:
                    self.failed += 1
                    raise
                finally:
                    self._outstanding -= 1
                    if self._slot_waiters or self._idle_waiters:
                        self._after_release()
                self.published += 1
                return
        await self._publish_slow(data, 1, timeout)

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
        items = commands.batch_bodies(bodies)
        data = commands.mpub(
            topic, items, max_msg_size=self._max_msg_size, max_body_size=self._max_body_size
        )
        await self._publish(data, len(items), timeout)

    async def dpub(
        self, topic: str, delay_ms: int, body: Body, *, timeout: float | None = None
    ) -> None:
        """Publish one message that nsqd delivers after ``delay_ms`` milliseconds.

        A delay outside 0 to nsqd's default ``--max-req-timeout`` (1 hour) raises
        InvalidArgumentError before sending; ``timeout`` and the other errors are :meth:`pub`'s.
        """
        await self._publish(
            commands.dpub(topic, delay_ms, body, max_msg_size=self._max_msg_size), 1, timeout
        )

    async def _publish(self, data: bytes, count: int, timeout: float | None) -> None:
        if timeout is not None:
            _check_timeout(timeout)
        # fast path: connected, a free slot, a healthy connection (one check each, no clock read)
        if self._started and not self._closed and self._outstanding < self._max_pending:
            conn = self._pick()
            if conn is not None:
                self._outstanding += 1
                try:
                    await conn.request(data, self._publish_timeout if timeout is None else timeout)
                except BaseException:
                    self.failed += 1
                    raise
                finally:
                    self._release_slot()
                self.published += count
                return
        await self._publish_slow(data, count, timeout)

    async def _publish_slow(self, data: bytes, count: int, timeout: float | None) -> None:
        if self._closed:
            raise ClosedError("this Writer was closed; create a new one")
        if not self._started:
            await self._start()
        loop = self._loop
        assert loop is not None
        limit = self._publish_timeout if timeout is None else timeout
        deadline = loop.time() + limit
        conn = self._pick() if self._outstanding < self._max_pending else None
        while conn is None:  # rare: wait for a free slot, then for a connection, then re-check
            try:
                if self._outstanding >= self._max_pending:
                    await self._wait_slot(deadline)
                conn = self._pick()
                if conn is None:
                    if self._http_fallback:
                        break  # no TCP connection: publish over HTTP below
                    await self._wait_healthy(deadline)
                    conn = self._pick() if self._outstanding < self._max_pending else None
            except BaseException:
                self.failed += 1
                raise
        self._outstanding += 1
        try:
            if conn is None:
                await self._http_task(data, count, deadline - loop.time())
            else:
                await conn.request(data, deadline - loop.time())
        except BaseException:
            self.failed += 1
            raise
        finally:
            self._release_slot()
        self.published += count

    def publish_nowait(
        self, data: bytes, count: int = 1, timeout: float | None = None
    ) -> asyncio.Future[bytes] | None:
        """Queue an encoded PUB/MPUB/DPUB (``nsqclient.protocol.commands``) without a task;
        returns the acknowledgement future, or None if it must wait (no connection or no free
        slot: see :meth:`wait_ready`). For callers that keep many publishes in flight from a
        loop callback, where a coroutine per publish would cost more than the publish."""
        if timeout is not None:
            _check_timeout(timeout)
        if self._closed or not self._started or self._outstanding >= self._max_pending:
            return None
        limit = self._publish_timeout if timeout is None else timeout
        conn = self._pick()
        if conn is None:
            if not self._http_fallback:
                return None
            fut: asyncio.Future[bytes] = self._http_task(data, count, limit)
        else:
            fut = conn.request(data, limit)
        self._outstanding += 1
        fut.add_done_callback(partial(self._nowait_done, count=count))
        return fut

    def publish_to(
        self, waiter: ReplyWaiter, data: bytes, count: int = 1, timeout: float | None = None
    ) -> bool:
        """Like :meth:`publish_nowait`, completing ``waiter`` directly (no future, no callback
        hop); False if it must wait. The waiter **must** call :meth:`publish_done` once it is
        completed, which keeps the Writer's accounting (the sync facade's tickets do)."""
        if self._closed or not self._started or self._outstanding >= self._max_pending:
            return False
        limit = self._publish_timeout if timeout is None else timeout
        conn = self._pick()
        if conn is None:
            if not self._http_fallback:
                return False
            task = self._http_task(data, count, limit)
            task.add_done_callback(partial(_complete_waiter, waiter))
        else:
            conn.request_to(waiter, data, limit)
        self._outstanding += 1
        return True

    def publish_done(self, count: int, ok: bool) -> None:
        """Account for a publish sent with :meth:`publish_to` that is now complete."""
        if ok:
            self.published += count
        else:
            self.failed += 1
        self._release_slot()

    def _nowait_done(self, fut: asyncio.Future[bytes], *, count: int) -> None:
        self.publish_done(count, not fut.cancelled() and fut.exception() is None)

    def _release_slot(self) -> None:
        """One outstanding publish is over: pass its slot on, and wake ``graceful_close`` when
        none is left."""
        self._outstanding -= 1
        if self._slot_waiters or self._idle_waiters:
            self._after_release()

    def _after_release(self) -> None:
        if self._slot_waiters:
            self._wake_slot()
        if self._idle_waiters and not self._outstanding:
            self._wake_idle()

    # ------------------------------------------------------------------ HTTP fallback

    def _http_task(self, data: bytes, count: int, timeout: float) -> asyncio.Task[bytes]:
        """Publish over HTTP in a task ``close()`` can cancel (its caller then gets ClosedError)."""
        loop = self._loop
        assert loop is not None
        self._nodes.dial_now(loop.time() + timeout)  # no TCP connection: get one back soon
        task = loop.create_task(self._publish_http(data, count, timeout), name="nsq-writer-http")
        self._http_tasks.add(task)
        task.add_done_callback(self._http_tasks.discard)
        return task

    async def _publish_http(self, data: bytes, count: int, timeout: float) -> bytes:
        loop = self._loop
        assert loop is not None
        if not self._http_clients:
            from ..http import NsqdHTTPClient

            verify: Any = self._ssl_context if self._ssl_context is not None else True
            self._http_clients = [
                NsqdHTTPClient(
                    url,
                    timeout=max(self._publish_timeout, 0.001),
                    verify=verify if url.startswith("https://") else True,
                    max_msg_size=self._max_msg_size,
                    max_body_size=self._max_body_size,
                )
                for url in self._http_fallback
            ]
        from ..errors import HTTPConnectError

        deadline = loop.time() + timeout
        clients = self._http_clients
        last: BaseException | None = None
        try:
            for _ in range(len(clients)):  # each address at most once
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._http_rr = (self._http_rr + 1) % len(clients)
                client = clients[self._http_rr]
                try:
                    async with asyncio.timeout(remaining):
                        await client.publish_command(data)
                    self.published_over_http += count
                except HTTPConnectError as exc:
                    if exc.sent:  # it broke after sending: trying another would duplicate
                        raise
                    last = exc  # never reached nsqd: the next one may
                    log.info("HTTP fallback to %s failed: %s", client.base_url, exc)
                    continue
                except TimeoutError:
                    raise NSQTimeoutError(
                        "no HTTP answer from nsqd before the publish timeout; the message may or "
                        "may not have been published"
                    ) from None
                return b"OK"
        except asyncio.CancelledError:
            if self._closed:
                raise ClosedError(
                    "the Writer was closed while this publish was in flight over HTTP; it may "
                    "or may not have been published",
                    sent=True,
                ) from None
            raise
        raise NoConnectionsError(
            "no nsqd connection over TCP, and the HTTP fallback "
            f"({', '.join(self._http_fallback)}) could not be reached"
            + (f": {last}" if last is not None else " before the publish timeout")
        ) from last

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until a publish could be sent at once: connected, with a free pending slot.

        Raises NoConnectionsError or NSQTimeoutError if that does not happen within ``timeout``.
        """
        if self._closed:
            raise ClosedError("this Writer was closed; create a new one")
        if not self._started:
            await self._start()
        loop = self._loop
        assert loop is not None
        deadline = loop.time() + (self._publish_timeout if timeout is None else timeout)
        fallback = bool(self._http_fallback)
        while self._outstanding >= self._max_pending or (self._pick() is None and not fallback):
            if self._outstanding >= self._max_pending:
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
                last = self._nodes.last_error
                raise NoConnectionsError(
                    "no nsqd connection became available before the publish timeout "
                    f"(addresses: {', '.join(format_address(*a) for a in self._nodes.addresses)}"
                    + (f"; last error: {last}" if last is not None else "")
                    + ")"
                ) from last

    async def _wait_slot(self, deadline: float) -> None:
        loop = self._loop
        assert loop is not None
        while self._outstanding >= self._max_pending:
            fut: asyncio.Future[None] = loop.create_future()
            self._slot_waiters.append(fut)
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await fut
            except BaseException as exc:
                if fut.done() and not fut.cancelled():
                    # woken and timed out or cancelled at once: pass the free slot on
                    self._wake_slot()
                if isinstance(exc, TimeoutError):
                    raise NotSentTimeoutError(
                        f"{self._outstanding} publishes outstanding (max_pending_publishes); "
                        "nsqd did not catch up before the publish timeout, so this one was never "
                        "sent (safe to retry)"
                    ) from None
                raise
            finally:
                if fut in self._slot_waiters:
                    self._slot_waiters.remove(fut)
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
        """Publishes sent and not yet acknowledged."""
        return self._outstanding

    # ------------------------------------------------------------------ closing

    async def graceful_close(self, timeout: float | None = None) -> None:
        """Refuse new publishes, wait for outstanding acks, then close.

        ``timeout`` (seconds, default ``close_timeout``) bounds the wait; publishes still
        unacknowledged then fail with ConnectionClosedError. Idempotent.
        """
        if self._closed and not self._conns:
            return
        self._closed = True
        self._refuse_waiters()
        loop = self._loop
        if loop is not None and self._outstanding:
            fut: asyncio.Future[None] = loop.create_future()
            self._idle_waiters.append(fut)
            wait = self.config.sec.close_timeout if timeout is None else timeout
            try:
                async with asyncio.timeout(wait):
                    await fut
            except TimeoutError:
                log.warning("writer closing with %d publishes unacknowledged", self._outstanding)
        await self._shutdown()

    def close(self) -> Awaitable[None]:
        """Close at once; unacknowledged publishes fail with ConnectionClosedError.

        Usable as ``writer.close()`` or ``await writer.close()``.
        """
        self._closed = True
        self._refuse_waiters()
        self._nodes.close_each()
        for task in list(self._http_tasks):
            task.cancel()
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

    async def _shutdown(self) -> None:
        self._closed = True
        await self._nodes.stop_discovery()
        await self._nodes.close_connections()
        http_tasks = list(self._http_tasks)
        for http_task in http_tasks:  # graceful_close waited for them (bounded); close() cancelled
            http_task.cancel()
        if http_tasks:
            await asyncio.gather(*http_tasks, return_exceptions=True)
        clients, self._http_clients = self._http_clients, []
        for client in clients:
            await client.aclose()
        if self._healthy_event is not None:
            self._healthy_event.set()  # wake publishes waiting for a connection: they raise

    @property
    def is_started(self) -> bool:
        """True once :meth:`connect` (or the first publish) has started the Writer."""
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
        return {
            "published": self.published,
            "published_over_http": self.published_over_http,
            "failed": self.failed,
            "resent": self.resent,
            "outstanding": self._outstanding,
            "max_pending_publishes": self._max_pending,
            "connection_losses": self._nodes.outages.losses,
            "reconnects": self._nodes.outages.reconnects,
            "nsqd_down": self._nodes.outages.down,
            "connections": [
                {"address": c.address, "state": c.state.value, "pending": c.pending_requests}
                for c in self._conns.values()
            ],
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._started else "new")
        return f"<Writer {state} conns={len(self._healthy)} outstanding={self._outstanding}>"
