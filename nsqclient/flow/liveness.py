"""When a connection is dead, and when it next needs looking at: the liveness decision, no I/O.

A connection used to poll its own state four times a second; with hundreds of idle nsqd
connections that polling was most of the consumer's idle CPU. Instead the connection records
timestamps on its hot paths (the last complete frame, the oldest request's send, a write pause)
and asks these functions, only when a timer it armed fires, what is overdue and when something
can next become due. An idle connection with heartbeats then wakes about once per heartbeat
interval, not per tick. Times are loop-clock seconds; ``inf`` means "never".
"""

from __future__ import annotations

import enum
from typing import NamedTuple

INF = float("inf")


class Overdue(enum.Enum):
    """Why a connection is declared dead."""

    #: no complete frame for ``dead_after`` (two heartbeat intervals, or ``read_timeout`` while
    #: a reply is awaited when heartbeats are off)
    SILENT = "silent"
    #: the oldest pending request is past its deadline and nothing was answered for
    #: ``stuck_after`` (replies come in order: nothing behind it can be answered either)
    STUCK = "stuck"
    #: writes stayed paused, with nsqd reading nothing, for ``write_timeout``
    WRITE = "write"


class Watch(NamedTuple):
    """What the connection knows, recorded cheaply on its hot paths."""

    #: when the last complete frame was decoded (with heartbeats off: or the last idle check)
    last_read: float
    #: two heartbeat intervals, or ``read_timeout`` with heartbeats off
    dead_after: float
    #: heartbeats disabled: silence only counts while a reply is awaited or a frame is partial
    heartbeats_off: bool
    #: requests awaiting a reply
    pending: int
    #: bytes of an unfinished frame in the decoder
    buffered: int
    #: the oldest pending request's deadline (``inf``: none, or it has no deadline)
    oldest_deadline: float
    #: since when the oldest pending request has waited: its send, or the previous reply
    waiting_since: float
    #: ``publish_timeout``
    stuck_after: float
    #: the earliest deadline among pending requests (may be early, never late)
    next_deadline: float
    #: when writes were paused (or last seen progressing), None while writing freely
    write_paused_at: float | None
    #: ``write_timeout``
    write_timeout: float
    #: the transport's write buffer size when writes were paused (or last seen shrinking)
    paused_size: int = 0
    #: the transport's write buffer size now
    buffer_size: int = 0


class Verdict(NamedTuple):
    """What to do at a wake-up: declare the connection dead, expire requests, or re-arm."""

    #: why the connection is dead (then nothing else applies), None if it is alive
    dead: Overdue | None
    #: some pending request's deadline may have passed: fail those, recompute the earliest
    expire: bool
    #: the watch as it stands after the passage of time (write these fields back)
    watch: Watch


def settle(now: float, w: Watch) -> Watch:
    """What the passage of time alone changes in ``w`` at ``now``, before deciding.

    With nothing pending, a recorded deadline is stale (it would stop an earlier one from being
    armed); with heartbeats off and nothing owed, silence is expected, so it restarts the silence
    bound. A paused write buffer that shrank means nsqd reads, only slower than we write: the
    write timeout restarts from now.
    """
    if not w.pending:
        w = w._replace(next_deadline=INF)
        if w.heartbeats_off and not w.buffered:
            w = w._replace(last_read=now)
    if w.write_paused_at is not None and w.buffer_size < w.paused_size:
        w = w._replace(paused_size=w.buffer_size, write_paused_at=now)
    return w


def check(now: float, w: Watch) -> Verdict:
    """The liveness timer's decision at ``now``: :func:`settle`, then :func:`overdue`, then
    :func:`requests_expired`. After expiring, the caller arms :func:`next_wake` with the
    recomputed ``next_deadline``."""
    w = settle(now, w)
    why = overdue(now, w)
    return Verdict(why, why is None and requests_expired(now, w), w)


def watching_silence(w: Watch) -> bool:
    """Whether silence counts now: always with heartbeats, else only while something is owed."""
    return not w.heartbeats_off or w.pending > 0 or w.buffered > 0


def silent_since(w: Watch) -> float:
    """Since when the connection has been silent, for the ``dead_after`` bound.

    With heartbeats off, a reply awaited counts from when the wait began (the idle checks that
    refresh ``last_read`` may be long ago)."""
    if w.heartbeats_off and w.pending:
        return max(w.last_read, w.waiting_since)
    return w.last_read


def overdue(now: float, w: Watch) -> Overdue | None:
    """What, if anything, makes the connection dead at ``now`` (checked in this order)."""
    if watching_silence(w) and now - silent_since(w) > w.dead_after:
        return Overdue.SILENT
    if w.pending and w.oldest_deadline <= now and now - w.waiting_since >= w.stuck_after:
        return Overdue.STUCK
    if w.write_paused_at is not None and now - w.write_paused_at > w.write_timeout:
        return Overdue.WRITE
    return None


def requests_expired(now: float, w: Watch) -> bool:
    """Whether some pending request's deadline may have passed (then scan and fail them)."""
    return w.pending > 0 and w.next_deadline <= now


def next_wake(now: float, w: Watch) -> float:
    """The earliest time at which :func:`overdue` or :func:`requests_expired` can change.

    Call after acting on ``now`` (requests expired, ``next_deadline`` recomputed). Nothing
    recorded later can make anything due earlier except a new request's deadline or a write
    pause, which the connection arms for itself; frames only push the silence bound later, so
    the read path never touches the timer. With heartbeats off and nothing owed, the silence
    bound is re-checked every quarter of ``dead_after``: a partial frame arriving meanwhile is
    then caught within about the same bound as when it is watched from the start.
    """
    wake = silent_since(w) + w.dead_after if watching_silence(w) else now + w.dead_after / 4
    if w.pending:
        if w.oldest_deadline < INF:
            stuck = max(w.oldest_deadline, w.waiting_since + w.stuck_after)
            wake = min(wake, stuck)
        wake = min(wake, w.next_deadline)
    if w.write_paused_at is not None:
        wake = min(wake, w.write_paused_at + w.write_timeout)
    return wake


def describe(why: Overdue, now: float, w: Watch) -> str:
    """The error text for a connection declared dead for ``why``."""
    if why is Overdue.SILENT:
        reason = (
            "while a reply was awaited (read_timeout)"
            if w.heartbeats_off
            else "(two heartbeat intervals)"
        )
        partial = f", {w.buffered} bytes of an unfinished frame buffered" if w.buffered else ""
        return (
            f"no complete frame from nsqd for {now - silent_since(w):.1f}s {reason}{partial}"
            "; treating the connection as dead"
        )
    if why is Overdue.STUCK:
        return (
            f"nsqd answered nothing for {now - w.waiting_since:.1f}s while commands were "
            "pending (publish_timeout); treating the connection as dead"
        )
    return "write timed out: nsqd read nothing for write_timeout"
