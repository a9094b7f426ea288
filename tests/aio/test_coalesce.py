"""nsqclient.aio.coalesce without nsqd: which PUBs share an MPUB, what goes on the wire, and how
one batch's outcome reaches each of its callers (the integration tests are test_coalescing.py)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from nsqclient.aio.coalesce import Coalescer, copy_error, join_pub, split_pub
from nsqclient.errors import (
    BadMessageError,
    ConnectionClosedError,
    HTTPError,
    ServerAuthError,
)
from nsqclient.protocol import commands

pytestmark = pytest.mark.timeout(10)


class Wire:
    """A fake dispatch that records what would be sent (or refuses: ``up`` False)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, bytes, int, float]] = []
        self.resent: list[list[Any]] = []
        self.flushes = 0
        self.holds = 0
        self.up = True

    def dispatch(self, waiter: Any, data: bytes, count: int, timeout: float) -> bool:
        if not self.up:
            return False
        self.sent.append((waiter, data, count, timeout))
        return True

    def make(self, loop: asyncio.AbstractEventLoop, **kw: Any) -> Coalescer:
        options: dict[str, Any] = {
            "linger": 0.0,
            "tolerance": 0.1,
            "max_body_size": 5 * 1024 * 1024,
            "max_msg_size": 1024 * 1024,
        }
        options.update(kw)
        return Coalescer(
            loop,
            dispatch=self.dispatch,
            resend=self.resent.append,
            hold_writes=self._hold,
            write_held=self._written,
            **options,
        )

    def _hold(self) -> list[Any]:
        self.holds += 1
        return []

    def _written(self, held: list[Any]) -> None:
        self.flushes += 1


def queue(co: Coalescer, waiter: Any, data: bytes, timeout: float) -> None:
    """Queue an encoded PUB, as the Writer does for the sync facade's tickets."""
    prefix, body = split_pub(data)
    co.add(prefix, waiter, body, timeout)


def mpub_bodies(data: bytes) -> list[bytes]:
    """The bodies of an encoded MPUB (checking its sizes)."""
    head, rest = data.split(b"\n", 1)
    assert head.startswith(b"MPUB ")
    (size,) = struct.unpack(">I", rest[:4])
    body = rest[4:]
    assert len(body) == size
    (count,) = struct.unpack(">I", body[:4])
    pos, out = 4, []
    for _ in range(count):
        (n,) = struct.unpack(">I", body[pos : pos + 4])
        out.append(body[pos + 4 : pos + 4 + n])
        pos += 4 + n
    assert pos == len(body)
    return out


async def test_one_iterations_pubs_leave_as_one_mpub_a_lone_one_as_its_pub() -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    co = wire.make(loop)
    futs = [loop.create_future() for _ in range(3)]
    for i, fut in enumerate(futs):
        queue(co, fut, commands.pub("t", b"body%d" % i), 5.0)
    lone = loop.create_future()
    lone_data = commands.pub("u", b"alone")
    queue(co, lone, lone_data, 5.0)
    assert wire.sent == []  # nothing before the iteration ends
    await asyncio.sleep(0)
    [(batch, data, count, _), (waiter, single, one, _)] = wire.sent
    assert count == 3 and mpub_bodies(data) == [b"body0", b"body1", b"body2"]
    assert data.startswith(b"MPUB t\n")
    assert (waiter, single, one) == (lone, lone_data, 1)
    assert wire.flushes == 1 and (co.batches, co.messages) == (1, 3)
    batch.set_result(b"OK")
    assert [f.result() for f in futs] == [b"OK"] * 3


async def test_a_batch_stops_at_max_body_size() -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    pub = commands.pub("t", b"x" * 100)
    per_message = len(pub) - len(b"PUB t\n")  # the size field and the body
    co = wire.make(loop, max_body_size=4 + 3 * per_message)
    for _ in range(7):
        queue(co, loop.create_future(), pub, 5.0)
    co.flush()
    assert [count for _w, _d, count, _t in wire.sent] == [3, 3, 1]
    assert all(len(d) - len(b"MPUB t\n") - 4 <= 4 + 3 * per_message for _w, d, _c, _t in wire.sent)


async def test_a_publish_whose_deadline_is_far_off_starts_a_batch_of_its_own() -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    co = wire.make(loop, tolerance=0.05)
    data = commands.pub("t", b"b")
    queue(co, loop.create_future(), data, 5.0)
    queue(co, loop.create_future(), data, 5.01)  # within the tolerance: joins
    queue(co, loop.create_future(), data, 9.0)  # later than tolerated: the first goes
    queue(co, loop.create_future(), data, 1.0)  # earlier than the batch's: it goes too
    co.flush()
    assert [count for _w, _d, count, _t in wire.sent] == [2, 1, 1]


async def test_linger_waits_then_sends_and_flush_sends_at_once() -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    co = wire.make(loop, linger=60.0)
    data = commands.pub("t", b"b")
    for _ in range(2):
        queue(co, loop.create_future(), data, 5.0)
        await asyncio.sleep(0)
    assert wire.sent == []  # lingering
    co.flush()  # what the Writer does when it closes
    assert [count for _w, _d, count, _t in wire.sent] == [2]


async def test_no_connection_hands_the_batch_to_the_backlog() -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    wire.up = False
    co = wire.make(loop)
    data = commands.pub("t", b"b")
    queue(co, loop.create_future(), data, 5.0)
    queue(co, loop.create_future(), data, 5.0)
    co.flush()
    [[(_waiter, deadline, mpub)]] = wire.resent  # kept in the backlog for a connection
    assert mpub.startswith(b"MPUB ") and deadline > loop.time()


async def test_a_refused_batch_sends_each_message_again_the_oversized_last() -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    co = wire.make(loop, max_msg_size=100)
    futs = [loop.create_future() for _ in range(3)]
    datas = [commands.pub("t", b"a"), commands.pub("t", b"x" * 500), commands.pub("t", b"c")]
    for fut, data in zip(futs, datas, strict=True):
        queue(co, fut, data, 5.0)
    co.flush()
    [(batch, _d, _c, _t)] = wire.sent
    batch.set_exception(BadMessageError("E_BAD_MESSAGE MPUB message too big 500 > 100"))
    [items] = wire.resent
    assert [(w, d) for w, _dl, d in items] == [
        (futs[0], datas[0]),
        (futs[2], datas[2]),
        (futs[1], datas[1]),
    ]
    assert not any(f.done() for f in futs) and co.split == 1


@pytest.mark.parametrize(
    "error",
    [
        HTTPError("MSG_TOO_BIG", url="http://n/mpub", status_code=413),
        HTTPError("BAD_MESSAGE", url="http://n/mpub", status_code=400),
    ],
)
async def test_an_http_refusal_of_the_batch_is_split_too(error: HTTPError) -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    co = wire.make(loop)
    for _ in range(2):
        queue(co, loop.create_future(), commands.pub("t", b"b"), 5.0)
    co.flush()
    wire.sent[0][0].set_exception(error)
    assert len(wire.resent) == 1 and co.split == 1


@pytest.mark.parametrize(
    "error",
    [
        ConnectionClosedError("connection closed before nsqd replied", address="n:1"),
        ServerAuthError("E_UNAUTHORIZED AUTH failed", code="E_UNAUTHORIZED"),
        HTTPError("EXITING", url="http://n/mpub", status_code=503),
    ],
)
async def test_any_other_error_reaches_each_caller_as_its_own_copy(error: Exception) -> None:
    loop = asyncio.get_running_loop()
    wire = Wire()
    co = wire.make(loop)
    futs = [loop.create_future() for _ in range(3)]
    cancelled = futs[1]
    for fut in futs:
        queue(co, fut, commands.pub("t", b"b"), 5.0)
    co.flush()
    cancelled.cancel()  # its caller gave up: the others still hear
    error.__cause__ = OSError("reset")
    wire.sent[0][0].set_exception(error)
    got = [futs[0].exception(), futs[2].exception()]
    assert got[0] is error and got[1] is not error
    for exc in got:
        assert type(exc) is type(error) and str(exc) == str(error)
        assert exc.__dict__ == error.__dict__ and exc.__cause__ is error.__cause__
    assert wire.resent == [] and co.split == 0


def test_copy_error_keeps_class_arguments_and_attributes() -> None:
    exc = BadMessageError("E_BAD_MESSAGE PUB message too big 2 > 1", address="a:1")
    copy = copy_error(exc)
    assert copy is not exc and type(copy) is BadMessageError
    assert (copy.args, copy.code, copy.text, copy.address, copy.sent) == (
        exc.args,
        exc.code,
        exc.text,
        exc.address,
        exc.sent,
    )


async def test_a_full_batch_goes_at_once_and_is_written_straight_away() -> None:
    """At 64 KiB a batch leaves mid-iteration, so nsqd stores it while the next one fills."""
    loop = asyncio.get_running_loop()
    wire = Wire()
    co = wire.make(loop)
    data = commands.pub("t", b"k" * 1020)  # 1,024 bytes each in the MPUB body
    for _ in range(100):
        queue(co, loop.create_future(), data, 5.0)
    [(_w, _d, count, _t)] = wire.sent  # before the iteration ended
    assert count == 64 and wire.flushes == 1  # 4 + 64 * 1,028 >= 64 KiB > 4 + 63 * 1,028
    co.flush()
    assert [c for _w, _d, c, _t in wire.sent] == [64, 36]


async def test_a_publish_goes_alone_only_while_nothing_of_its_topic_is_on_its_way() -> None:
    loop = asyncio.get_running_loop()
    co = Wire().make(loop)
    first, second, third = (loop.create_future() for _ in range(3))
    assert co.alone(b"PUB t\n", first)  # nothing on its way: the PUB as it is
    assert not co.alone(b"PUB t\n", second)  # the first is unanswered: batch the rest
    assert co.alone(b"PUB u\n", second)  # another topic
    first.set_result(b"OK")
    assert co.alone(b"PUB t\n", third)
    co.add(b"PUB v\n", loop.create_future(), b"body", 5.0)
    assert not co.alone(b"PUB v\n", loop.create_future())  # an open batch takes it
    assert join_pub(b"PUB t\n", b"abc") == commands.pub("t", b"abc")
    assert split_pub(commands.pub("t", b"abc")) == (b"PUB t\n", memoryview(b"abc"))
    co.flush()
