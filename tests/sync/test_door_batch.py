"""How a coalescing door groups what threads queued (nsqclient.sync.door_batch.group): pure
logic, no I/O. Each write must decode as the command nsqd would get."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqclient.aio.window import Window
from nsqclient.protocol import commands
from nsqclient.sync.door_batch import DoorBatch, group
from nsqclient.sync.ticket import Ticket

pytestmark = pytest.mark.timeout(60)

HALF = 0.05


class _Door:
    batches = messages = 0


def _ticket(data: bytes, deadline: float = 100.0) -> Ticket:
    return Ticket(data, 1, deadline, Window(10), waker=object())  # type: ignore[arg-type]


def _parse(write: DoorBatch) -> tuple[str, bytes, list[bytes]]:
    """(verb, topic, bodies) of one write's bytes, checking the sizes they carry."""
    data = write.data
    line, rest = data.split(b"\n", 1)
    verb, topic = line.split(b" ")[:2]
    size = int.from_bytes(rest[:4], "big")
    assert len(rest) == 4 + size
    if verb in (b"PUB", b"DPUB"):
        return verb.decode(), topic, [rest[4:]]
    assert verb == b"MPUB"
    n, at, bodies = int.from_bytes(rest[4:8], "big"), 8, []
    for _ in range(n):
        length = int.from_bytes(rest[at : at + 4], "big")
        bodies.append(rest[at + 4 : at + 4 + length])
        at += 4 + length
    assert at == len(rest)
    return "MPUB", topic, bodies


def test_pubs_of_a_topic_join_other_topics_and_commands_keep_their_place() -> None:
    door: Any = _Door()
    tickets = [
        _ticket(commands.pub("a", b"a1")),
        _ticket(commands.pub("b", b"b1")),
        _ticket(commands.dpub("a", 1000, b"d")),
        _ticket(commands.pub("a", b"a2")),
        _ticket(commands.mpub("a", [b"m1", b"m2"])),
        _ticket(commands.pub("a", b"a3")),
    ]
    writes = group(door, tickets, HALF, 1 << 20)
    parsed = [_parse(w) for w in writes]
    assert parsed[0] == ("MPUB", b"a", [b"a1", b"a2", b"a3"])
    assert parsed[1] == ("PUB", b"b", [b"b1"])  # alone: the PUB as it was
    assert [w.tickets for w in writes[2:]] == [[tickets[2]], [tickets[4]]]
    assert writes[2].data == tickets[2].data and writes[3].data == tickets[4].data
    assert (door.batches, door.messages) == (1, 3)
    assert [len(w.tickets) for w in writes] == [3, 1, 1, 1] and writes[0].count == 3


def test_a_far_deadline_or_a_full_batch_starts_another() -> None:
    door: Any = _Door()
    body = b"x" * 1000
    near = [_ticket(commands.pub("t", body), 100.0) for _ in range(3)]
    far = _ticket(commands.pub("t", body), 100.0 + 3 * HALF)
    writes = group(door, [*near, far], HALF, 1 << 20)
    assert [w.tickets for w in writes] == [near, [far]]
    assert writes[0].deadline == 100.0
    # nsqd's max_body_size (here 2,100 bytes of MPUB body) splits the batch
    writes = group(door, near, HALF, 2100)
    assert [len(w.tickets) for w in writes] == [2, 1]
    assert all(len(w.data) - len(b"MPUB t\n") - 4 <= 2100 for w in writes)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]), st.binary(min_size=1, max_size=300), st.booleans()
        ),
        min_size=1,
        max_size=40,
    )
)
def test_every_message_leaves_once_each_topics_pubs_in_order(
    items: list[tuple[str, bytes, bool]],
) -> None:
    door: Any = _Door()
    tickets = [
        _ticket(commands.dpub(t, 5, b) if delayed else commands.pub(t, b))
        for t, b, delayed in items
    ]
    writes = group(door, tickets, HALF, 4096)
    assert sorted(id(t) for w in writes for t in w.tickets) == sorted(map(id, tickets))
    sent: dict[tuple[str, bytes], list[bytes]] = {}
    for w in writes:
        verb, topic, bodies = _parse(w)
        if len(w.tickets) > 1:
            assert verb == "MPUB" and len(w.data) <= 4096 + 64
        sent.setdefault(("DPUB" if verb == "DPUB" else "PUB", topic), []).extend(bodies)
    wanted: dict[tuple[str, bytes], list[bytes]] = {}
    for t, b, delayed in items:  # each topic's PUBs in the order they were queued
        wanted.setdefault(("DPUB" if delayed else "PUB", t.encode()), []).append(b)
    assert sent == wanted
