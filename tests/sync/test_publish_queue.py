"""The loop's way for thread publishes (``nsqclient.sync.publish.PublishQueue``), alone.

The queue is pure bookkeeping between threads and the loop, so it runs here against a stand-in
for the core Writer (its :class:`~nsqclient.sync.publish.Loopway`); the end-to-end paths through
it (no nsqd up yet, a full window, a lost connection's spill) run against real nsqd in
test_writer.py, test_recovery.py and test_thread_writes.py.

What this file pins down is one race: a door's ``put_back`` (any thread) puts tickets in
*front* of the queue, so the loop must take the head under the queue's lock. It used to look
at the head, ask the Writer for a slot, and pop without the lock: a ticket put back in between
was popped unseen, left QUEUED on no queue, and its future never resolved (the free-threaded
step found it: one stress run in about ten). The hook below puts a ticket back at exactly that
moment, so the test is deterministic and fails on that code.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqclient.aio.window import Window
from nsqclient.sync.publish import Loopway, PublishQueue
from nsqclient.sync.ticket import DONE, SENT, Ticket
from tests.support import wait_for

pytestmark = pytest.mark.timeout(60)


def _window() -> Window:
    w = Window(1_000)
    w.share(threading.Lock(), lambda: None)
    return w


def _ticket(window: Window, body: bytes) -> Ticket:
    return Ticket(body, 1, float("inf"), window, None)


async def _never_ready(timeout: float) -> None:
    raise AssertionError("the stand-in Writer is always ready")


def _way(window: Window, sent: list[Ticket], on_take: Callable[[Ticket], None]) -> Loopway:
    def take(ticket: Ticket) -> bool:
        on_take(ticket)  # (another thread, between the drain's look at the head and its pop)
        return window.take(ticket)

    def send(ticket: Ticket, data: bytes, count: int, timeout: float) -> bool:
        assert ticket.state is SENT, ticket.state
        sent.append(ticket)
        if ticket.settle(None):  # (nsqd's OK)
            ticket.notify()
        return True

    return Loopway(
        ready=lambda: True,
        take=take,
        give=window.give,
        send=send,
        wait_ready=_never_ready,
        unreachable=lambda: None,
    )


async def _drained(queue: PublishQueue) -> None:
    await wait_for(lambda: not queue._scheduled and not len(queue), timeout=10, every=0.001)


async def test_a_ticket_put_back_while_the_loop_takes_the_head_is_sent() -> None:
    """A door spills B while the loop is handing A to the Writer: both are sent, once each."""
    window = _window()
    sent: list[Ticket] = []
    a, b = _ticket(window, b"a"), _ticket(window, b"b")
    spilled = False

    def on_take(ticket: Ticket) -> None:
        nonlocal spilled
        if ticket is a and not spilled:
            spilled = True
            queue.put_back([b])

    queue = PublishQueue(16, _way(window, sent, on_take))
    queue.put(a)
    await _drained(queue)
    assert [t.data for t in sent] == [b"a", b"b"]
    assert a.state is DONE and b.state is DONE
    assert window.published == 2 and window.used == 0


@settings(max_examples=200, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=2)),
        min_size=1,
        max_size=12,
    )
)
def test_every_ticket_put_or_put_back_is_sent_once(plan: list[tuple[int, int]]) -> None:
    """Whatever threads put and put back while the loop drains (``plan``: at each take, how many
    tickets a door spills and how many a thread queues), every ticket is sent exactly once."""

    async def main() -> None:
        window = _window()
        sent: list[Ticket] = []
        made: list[Ticket] = []
        steps = iter(plan)

        def new() -> Ticket:
            ticket = _ticket(window, b"%d" % len(made))
            made.append(ticket)
            return ticket

        def on_take(_ticket: Ticket) -> None:
            spill, put = next(steps, (0, 0))
            if spill:
                queue.put_back([new() for _ in range(spill)])
            for _ in range(put):
                queue.put(new())

        queue = PublishQueue(10_000, _way(window, sent, on_take))
        queue.put(new())
        await _drained(queue)
        assert sorted(t.data for t in sent) == sorted(t.data for t in made)
        assert len({id(t) for t in sent}) == len(sent)
        assert all(t.state is DONE for t in made)

    asyncio.run(main())
