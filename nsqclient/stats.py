"""The typed shape of ``stats()``: what a Reader, a Writer and their connections report.

``stats()`` returns plain dicts (existing code indexes them by key, JSON-encodes them, compares
them with ``==``); these :class:`~typing.TypedDict` classes give those dicts a checked type and
one place where every key and its unit is written down. They describe, they do not convert:
reading a stats dict costs what building it costs, a handful of attribute reads per connection
and nothing per message.

Stability: the keys below are part of the public API. Releases only ever *add* keys (and
document them here and on the docs' Stats page); a key is never renamed, removed or given a
different unit or type. Code that reads stats should therefore index the keys it knows and
ignore the others (do not assert the exact key set in production code).

Units: every counter is a plain count (``int``) since the object was created (or since a
connection was made, for the per-connection ones); ``connection_id`` is an id, not a count;
``state`` values are the lower-case names of :class:`~nsqclient.aio.ReaderState` /
:class:`~nsqclient.aio.connection.ConnectionState`. A key that holds a size or a duration says
its unit in its name (``_bytes``; ``_seconds``, ``_ms``): ``buffered_bytes`` so far.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = [
    "ConnectionStats",
    "ReaderStats",
    "SyncReaderStats",
    "SyncWriterStats",
    "WriterConnectionStats",
    "WriterStats",
]


class ConnectionStats(TypedDict):
    """One nsqd connection: :meth:`nsqclient.aio.connection.Connection.stats`, and each entry of
    a Reader's ``connections``. On a Reader's connection ``pending`` is mostly 0 (only SUB and
    CLS await a reply there); a Writer reports the shorter :class:`WriterConnectionStats`."""

    address: str
    """``"host:port"`` of the nsqd (``[v6]:port`` for IPv6)."""
    connection_id: int
    """Id: a number unique to this connection in the process (a reconnect gets a new one; two
    connections to one address, e.g. through one proxy, have different ones): what
    :attr:`Message.connection_id <nsqclient.message.Message.connection_id>` names."""
    state: str
    """``"init"``, ``"connecting"``, ``"connected"``, ``"subscribed"``, ``"closing"`` or
    ``"closed"`` (a :class:`~nsqclient.aio.connection.ConnectionState` value)."""
    buffered_bytes: int
    """Bytes: received and not yet decoded, right now: the start of a frame whose rest has not
    arrived (0 between frames). Bounded by ``frame_size_limit``; a value that stays above 0
    while no frame completes is a stream out of step, which the connection drops after two
    heartbeat intervals."""
    rdy: int
    """Count: the last RDY sent on this connection (how many messages nsqd may push unasked)."""
    in_flight: int
    """Count: messages delivered on this connection and not yet FIN'd or REQ'd, right now."""
    received: int
    """Count: messages delivered on this connection since it was made."""
    finished: int
    """Count: FINs sent on this connection."""
    requeued: int
    """Count: REQs sent on this connection."""
    pending: int
    """Count: commands sent and still awaiting nsqd's reply, right now (PUB, MPUB, DPUB, SUB,
    CLS)."""
    heartbeats_received: int
    """Count: heartbeats nsqd sent on this connection (each one answered with NOP)."""


class ReaderStats(TypedDict):
    """:meth:`nsqclient.aio.Reader.stats`. Message counters are counts since the Reader was
    created, across all its connections (those that closed included)."""

    topic: str | None
    """The topic consumed (None until ``subscribe()`` for a Reader created without one)."""
    channel: str | None
    """The channel consumed (None until ``subscribe()``, like ``topic``)."""
    state: str
    """``"new"``, ``"running"``, ``"closing"`` or ``"closed"`` (a ReaderState value)."""
    received: int
    """Count: messages delivered by nsqd."""
    finished: int
    """Count: messages FIN'd (given-up messages included)."""
    requeued: int
    """Count: messages REQ'd (by a handler's failure, ``msg.requeue()``, a close that requeued)."""
    given_up: int
    """Count: messages FIN'd without handling because they were past ``max_attempts``."""
    in_flight: int
    """Count: delivered and not yet answered, right now."""
    lost_on_disconnect: int
    """Count: messages in flight on a connection when it dropped (nsqd redelivers them)."""
    response_errors: int
    """Count: FIN/REQ/TOUCH refused by nsqd (E_FIN_FAILED...: the message had timed out there)."""
    timed_out: int
    """Count: FIN/REQ refused because nsqd had timed the message out (and requeued it itself)."""
    queued: int
    """Count: delivered and not yet handed to a handler or an iteration, right now."""
    connecting: int
    """Count: connections being set up right now."""
    max_in_flight: int
    """Count: the ``max_in_flight`` budget shared by all connections."""
    total_rdy: int
    """Count: the sum of the RDY granted over all connections, right now."""
    backoff_level: int
    """Count: the consecutive-failure backoff level (0: not backing off)."""
    in_backoff: bool
    """Whether the Reader is backing off now (RDY 0 everywhere, or RDY 1 while testing)."""
    connection_losses: int
    """Count: connections lost without being closed on purpose."""
    reconnects: int
    """Count: outages that ended with a new connection."""
    nsqd_down: list[str]
    """The nsqd addresses (``"host:port"``) that are unreachable right now."""
    connections: list[ConnectionStats]
    """One entry per open nsqd connection."""


class SyncReaderStats(ReaderStats):
    """:meth:`nsqclient.sync.SyncReader.stats`: the core Reader's stats, where ``queued`` also
    counts what the facade holds (buffered for a thread, or in ``run()``'s work queue)."""

    local_buffered: int
    """Count: taken from the loop and not yet handed to an iterating thread, right now."""


class WriterConnectionStats(TypedDict):
    """Each entry of a Writer's ``connections``: the keys of :class:`ConnectionStats` that mean
    something on a connection that only publishes."""

    address: str
    """``"host:port"`` of the nsqd (``[v6]:port`` for IPv6)."""
    connection_id: int
    """Id: a number unique to this connection in the process (as in :class:`ConnectionStats`)."""
    state: str
    """``"init"``, ``"connecting"``, ``"connected"``, ``"closing"`` or ``"closed"``."""
    pending: int
    """Count: publishes (PUB, MPUB, DPUB) sent on this connection and awaiting nsqd's reply,
    right now."""
    buffered_bytes: int
    """Bytes: the start of a reply frame whose rest has not arrived, right now (as in
    :class:`ConnectionStats`)."""


class WriterStats(TypedDict):
    """:meth:`nsqclient.aio.Writer.stats`. Counters are counts since the Writer was created."""

    published: int
    """Count: messages acknowledged by nsqd (an MPUB counts its messages)."""
    published_over_http: int
    """Count: of ``published``, how many went by the HTTP fallback."""
    failed: int
    """Count: publish calls that raised."""
    resent: int
    """Count: publishes sent again because nsqd never executed them (queued behind a refused
    one), and after nsqd refused a coalesced MPUB (each of its messages sent again alone)."""
    coalesced_batches: int
    """Count: MPUBs sent by coalescing (``coalesce``), each carrying two or more callers' PUBs;
    the callers' publishes are counted in ``published``/``failed`` as without coalescing."""
    coalesced_messages: int
    """Count: the callers' PUBs that went in those MPUBs."""
    coalesced_split: int
    """Count: coalesced MPUBs nsqd refused (its whole batch was not stored), whose messages were
    then sent again alone so that only the offending one fails."""
    outstanding: int
    """Count: publishes sent and awaiting nsqd's reply, right now."""
    max_pending_publishes: int
    """Count: the bound on ``outstanding`` (the ``max_pending_publishes`` option)."""
    connection_losses: int
    """Count: connections lost without being closed on purpose."""
    reconnects: int
    """Count: outages that ended with a new connection."""
    nsqd_down: list[str]
    """The nsqd addresses (``"host:port"``) that are unreachable right now."""
    connections: list[WriterConnectionStats]
    """One entry per nsqd connection."""


class SyncWriterStats(WriterStats):
    """:meth:`nsqclient.sync.SyncWriter.stats`: the core Writer's stats and the facade's queue."""

    queued: int
    """Count: publishes waiting in the facade's queue to cross to the loop, right now."""
    written_by_threads: int
    """Count: publishes the calling threads wrote to nsqd themselves since start (the fast
    path, on plain TCP connections); the others crossed to the loop to be written."""
    read_by_threads: int
    """Count: of those, the publishes whose reply a publishing thread read itself since start
    (when it was their turn to read); the loop read the others' and woke their threads."""
