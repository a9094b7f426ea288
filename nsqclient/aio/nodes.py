"""A client's set of nsqd connections: connecting, reconnecting, lookupd discovery, forgetting.

Reader and Writer each own one :class:`NodeSet`; the rules about which nsqd to be connected to,
and when to try again, live here once:

* the configured ``nsqd_tcp_addresses`` are tried once, together, at start; an answer that retrying
  cannot change (:func:`~nsqclient.flow.worth_retrying`) is raised, anything else is retried in the
  background forever, with capped, jittered backoff (:class:`~nsqclient.flow.ReconnectBackoff`);
* nsqlookupd adds nodes (the producers of the Reader's topic, every node for a Writer): each new one
  is tried at once, then with backoff; one lookupd no longer lists is forgotten (its retries stop);
* a lost connection is retried while its node is configured or listed, and losing a discovered
  one asks lookupd for an early poll;
* a publish that finds no connection asks for a dial (:meth:`NodeSet.dial_now`): each nsqd that is
  down is dialled at once instead of at the end of its backoff, then at most once per
  ``reconnect_delay`` while publishes wait (:class:`~nsqclient.flow.ReconnectSchedule`); one dial
  per nsqd however many publishes wait, since one task per nsqd does every (re)connect;
* :class:`~.outages.Outages` says what happened at a bounded rate, and one INFO line marks each
  connection that comes up (the first time, or as the end of an outage);
* a loop that ends with the client still open (``asyncio.run`` returning before ``close()``)
  closes it: one idle *watch* task per started set is cancelled with every other task, and
  closes the owner (``on_loop_end``) before the loop closes. Without it a connection lost while
  ``asyncio.run`` cancels its tasks would schedule a reconnect task nobody cancels, which the
  closed loop then destroys pending ("Task was destroyed but it is pending!").

What differs stays with the owner: a consumer's connections SUB before they count as up
(``channel`` given to :meth:`NodeSet.start`), and the owner hears of each connection up
(``on_up``) and handles its own side of a loss in its ``_on_connection_lost``, which calls
:meth:`NodeSet.lost` first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial

from ..addresses import Address
from ..errors import ServerError
from ..flow import ReconnectSchedule, worth_retrying
from .connection import Connection, ConnectionOwner, close_all
from .discovery import LookupdPoller
from .options import ClientOptions
from .outages import Outages

__all__ = ["NodeSet"]

#: the running watch tasks: a task is only weakly held by its loop, and a watch waits on a
#: future nothing else holds, so without this one could be collected pending (and warn)
_watches: set[asyncio.Task[None]] = set()


class NodeSet:
    """The nsqd connections of one Reader or Writer (``owner``, which hears from them), keyed by
    address, made with ``options`` (its checked options: see :mod:`.options`).

    ``running()`` says whether the owner still wants connections (False from the moment it begins
    to close). ``prompt_after_error``: after a connection ended with an error frame nsqd is up and
    answering, so try once at once before backing off (a Writer, whose refused publishes wait in
    a backlog; a Reader backs off, so that an error its SUB provokes cannot spin).
    ``on_loop_end``: the owner's immediate close, called (and awaited) when the loop cancels
    the set's watch task while the owner still runs (see the module's docstring).
    """

    def __init__(
        self,
        options: ClientOptions,
        owner: ConnectionOwner,
        *,
        running: Callable[[], bool],
        on_up: Callable[[Connection], None],
        log: logging.Logger,
        prompt_after_error: bool = False,
        on_loop_end: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.options = options
        self._config = options.config
        self._identify = options.identify
        self._ssl_context = options.ssl_context
        self._owner = owner
        self._direct: list[Address] = list(options.nsqd_tcp_addresses)
        self._lookupd_addresses = options.lookupd_http_addresses
        self._running = running
        self._on_up = on_up
        self._log = log
        self._role = "reader" if options.consumer else "writer"
        self._prompt_after_error = prompt_after_error
        self._on_loop_end = on_loop_end
        self._watch: asyncio.Task[None] | None = None
        #: True once the loop ended while the owner was still open (it was closed for it)
        self.left_open = False
        self._topic: str | None = None
        self._channel: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: LookupdPoller | None = None
        self._found: list[Address] = []  # what lookupd listed last
        self._reconnects: dict[Address, asyncio.Task[None]] = {}
        self._wakes: dict[Address, asyncio.Event] = {}  # set: a reconnect task should look again
        self._wanted_until = -math.inf  # loop time until which a publish waits for a connection
        self._attempts: set[asyncio.Task[None]] = set()  # the first connects at start
        #: the connections that are up (owners may read it; only the node set changes it)
        self.conns: dict[Address, Connection] = {}
        self.connecting: set[Address] = set()
        self.outages = Outages(log, self._role)
        self.last_error: BaseException | None = None  # the last failed connect, for error texts

    @property
    def addresses(self) -> list[Address]:
        """The nodes this client wants: configured, then those lookupd lists now."""
        return [*self._direct, *(a for a in self._found if a not in self._direct)]

    # ------------------------------------------------------------------ starting

    async def start(self, topic: str | None = None, channel: str | None = None) -> None:
        """Connect to every configured nsqd once, together; then start lookupd discovery and
        retry in the background whatever did not connect.

        With ``channel`` each connection SUBs to ``topic``/``channel`` before it counts as up;
        ``topic`` alone scopes discovery to its producers. Raises the first answer that
        retrying cannot change (nothing is retried then; the owner closes).
        """
        self._topic = topic
        self._channel = channel
        loop = self._loop = asyncio.get_running_loop()
        # tasks, so that closing meanwhile cancels them (cleanly, in any phase of the setup)
        tasks = [loop.create_task(self._connect(addr)) for addr in self._direct]
        self._attempts.update(tasks)
        for task in tasks:
            task.add_done_callback(self._attempts.discard)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        if not self._running():
            return  # closed while connecting: nothing more to start
        errors = [r for r in results if isinstance(r, BaseException)]
        refused = [e for e in errors if not worth_retrying(e)]
        if refused:  # misconfiguration: say so now rather than retry forever
            raise refused[0]
        if self._lookupd_addresses:
            self._poller = LookupdPoller(
                self._lookupd_addresses,
                config=self._config,
                topic=topic,
                on_producers=self._on_producers,
            )
            self._poller.start()
        for addr, result in zip(self._direct, results, strict=True):
            if isinstance(result, BaseException):
                # not up yet (or unreachable): retried in the background, so a service started
                # before its nsqd comes up by itself
                self.last_error = result
                self.outages.failed(addr, result)
            if addr not in self.conns:
                self._schedule(addr)
        if self._on_loop_end is not None and self._watch is None:
            watch = self._watch = loop.create_task(
                self._watch_loop(), name=f"nsq-{self._role}-watch"
            )
            _watches.add(watch)
            watch.add_done_callback(_watches.discard)

    async def _watch_loop(self) -> None:
        """Idle until cancelled. Cancelled by :meth:`stop_discovery` when the owner closes, or
        with every task of a loop that is ending (``asyncio.run``): then close the owner, so
        that no task of it outlives the loop and its sockets are closed, not left to the GC."""
        assert self._loop is not None
        try:
            await self._loop.create_future()  # never completed
        except asyncio.CancelledError:
            self._watch = None  # the close below must not wait for this task
            if self._running() and self._on_loop_end is not None:
                self.left_open = True
                await self._on_loop_end()  # refuses new tasks at once; awaited: bounded
            raise

    async def _connect(self, addr: Address) -> None:
        if addr in self.conns or addr in self.connecting or not self._running():
            return
        conn = Connection(
            addr[0],
            addr[1],
            config=self._config,
            identify=self._identify,
            owner=self._owner,
            ssl_context=self._ssl_context,
        )
        self.connecting.add(addr)
        try:
            await conn.connect()
            if self._channel is not None:
                assert self._topic is not None
                await conn.subscribe(self._topic, self._channel)
        except BaseException:
            conn.abort()
            raise
        finally:
            self.connecting.discard(addr)
        if not self._running():
            conn.close()
            return
        self.conns[addr] = conn
        # a connection is up: the last failure (its traceback keeps the failed connection and
        # its read buffer alive) is no longer the reason a publish waits
        self.last_error = None
        if not self.outages.connected(addr, conn):  # the end of an outage is logged there
            if self._channel is not None:
                self._log.info(
                    "subscribed to %s/%s on nsqd %s", self._topic, self._channel, conn.address
                )
            else:
                self._log.info("%s connected to nsqd %s", self._role, conn.address)
        self._on_up(conn)

    # ------------------------------------------------------------------ reconnecting

    def _schedule(self, addr: Address, *, immediately: bool = False) -> None:
        loop = self._loop
        if loop is None or addr in self._reconnects or not self._running():
            return
        task = loop.create_task(
            self._reconnect(addr, immediately), name=f"nsq-reconnect-{addr[0]}:{addr[1]}"
        )
        self._reconnects[addr] = task
        task.add_done_callback(partial(self._reconnect_done, addr))

    def _reconnect_done(self, addr: Address, task: asyncio.Task[None]) -> None:
        if self._reconnects.get(addr) is task:  # not a newer one scheduled meanwhile
            del self._reconnects[addr]

    async def _reconnect(self, addr: Address, immediately: bool) -> None:
        # the one task that dials ``addr`` until it is up: when is the schedule's decision
        loop = asyncio.get_running_loop()
        schedule = ReconnectSchedule.from_config(self._config, now=loop.time(), at_once=immediately)
        wake = self._wakes[addr] = asyncio.Event()
        try:
            while self._running():
                now = loop.time()
                delay = schedule.wait(now, wanted=now < self._wanted_until)
                if delay > 0:
                    wake.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await wake.wait()  # dial_now() wakes it to decide again
                    continue
                if addr in self.conns:
                    return
                schedule.dialing(now)
                try:
                    await self._connect(addr)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.last_error = exc
                    self.outages.failed(addr, exc, schedule.failed(loop.time()))
        finally:
            if self._wakes.get(addr) is wake:
                del self._wakes[addr]

    def dial_now(self, until: float) -> None:
        """A publish found no connection and waits for one until ``until`` (loop time): dial
        each nsqd that is down now rather than when its backoff says, and keep dialling it at most
        once per ``reconnect_delay`` until then. Cheap to call from every waiting publish: a dial
        in progress is not repeated, and a node is never dialled twice at once."""
        loop = self._loop
        if loop is None:
            return
        wanted = loop.time() < self._wanted_until
        if until > self._wanted_until:
            self._wanted_until = until
        if not wanted:  # already wanted: the reconnect tasks know
            for wake in self._wakes.values():
                wake.set()

    def _on_producers(self, found: list[Address]) -> None:
        self._found = found
        for addr in found:
            if addr not in self.conns and addr not in self.connecting:
                self._schedule(addr, immediately=True)
        for addr in list(self._reconnects):
            if addr not in found and addr not in self._direct:
                self._reconnects.pop(addr).cancel()  # lookupd no longer lists it: stop retrying
                self.outages.forget(addr)

    def lost(self, conn: Connection, exc: BaseException | None) -> bool:
        """``conn`` has closed: forget it, and retry its node while this client still wants it.
        True if it was one of this set's connections (not one closed before it counted)."""
        addr = (conn.host, conn.port)
        ours = self.conns.get(addr) is conn
        if not ours:
            return False  # closed before it counted: whoever was connecting it retries
        del self.conns[addr]
        if not self._running():
            return True
        self.outages.lost(addr)
        if addr in self._direct or addr in self._found:
            at_once = self._prompt_after_error and isinstance(exc, ServerError)
            self._schedule(addr, immediately=at_once)
        else:  # lookupd dropped it already: nothing to retry, no outage to report
            self.outages.forget(addr)
        if self._poller is not None and addr not in self._direct:
            self._poller.poke()
        return True

    # ------------------------------------------------------------------ closing

    def cancel(self) -> None:
        """Stop every pending connect and reconnect now (closing)."""
        for task in (*self._reconnects.values(), *self._attempts):
            task.cancel()
        watch = self._watch
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()

    async def stop_discovery(self) -> None:
        """Stop lookupd polling and every pending connect, and wait until they have ended."""
        poller, self._poller = self._poller, None
        if poller is not None:
            await poller.close()
        tasks: list[asyncio.Task[None]] = [*self._reconnects.values(), *self._attempts]
        watch, self._watch = self._watch, None
        if watch is not None and watch is not asyncio.current_task():
            tasks.append(watch)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close_each(self) -> None:
        """Start closing every connection (queued writes are flushed first)."""
        for conn in list(self.conns.values()):
            conn.close()

    async def close_connections(self, timeout: float | None = None) -> None:
        """Close every connection and wait for them (bounded: one stuck after ``timeout``,
        default ``write_timeout`` + 1 s, or sooner if ``timeout`` says, is aborted)."""
        limit = self._config.sec.write_timeout + 1.0
        await close_all(self.conns.values(), limit if timeout is None else min(limit, timeout))

    async def drop_connections(self) -> None:
        """Close and forget every connection (a start that was refused); nothing reconnects."""
        conns = list(self.conns.values())
        self.conns.clear()
        await close_all(conns, self._config.sec.write_timeout + 1.0)
