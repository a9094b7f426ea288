"""Helpers for the sync facade tests: deadlines, nsqd /stats, collecting messages.

Every wait is a condition with a deadline (``tests.support.wait_until``), never a bare sleep in
test logic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nsqclient.message import Message
from nsqclient.sync import SyncReader, portal
from nsqclient.testing.daemons import NsqdProcess
from tests.support import frozen as frozen
from tests.support import unique as unique

DEADLINE = 20.0  # seconds any condition may take before the test fails
POLL = 0.02


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nsqclient-loop"]


@pytest.fixture(autouse=True)
def no_leftover_loop_thread() -> Iterator[None]:
    """After each test: no sync object left open and no ``nsqclient-loop`` thread running (a
    conftest imports it to apply it to its directory: tests/sync, tests/observability)."""
    yield
    deadline = time.monotonic() + DEADLINE
    while loop_threads() and time.monotonic() < deadline:
        time.sleep(POLL)
    leftover = loop_threads()
    still_open = list(portal._open.values())
    if leftover or still_open:
        portal._close_open_objects_at_exit()  # clean up for the next test, then fail this one
        pytest.fail(
            f"test left {len(still_open)} sync objects open ({still_open!r}) and loop threads "
            f"{[t.name for t in leftover]}"
        )
    assert threading.active_count() < 64


def topic_stats(nsqd: NsqdProcess, topic: str) -> dict[str, Any] | None:
    for t in nsqd.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            return dict(t)
    return None


def channel_stats(nsqd: NsqdProcess, topic: str, channel: str) -> dict[str, Any] | None:
    t = topic_stats(nsqd, topic)
    for c in (t or {}).get("channels") or []:
        if c["channel_name"] == channel:
            return dict(c)
    return None


def message_count(nsqd: NsqdProcess, topic: str) -> int:
    t = topic_stats(nsqd, topic)
    return 0 if t is None else int(t["message_count"])


def collect(
    reader: SyncReader,
    expected: int,
    timeout: float = DEADLINE,
    *,
    fin: bool = True,
) -> list[Message]:
    """Take ``expected`` messages from ``reader`` (FIN'ing them) within ``timeout`` seconds."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"received {len(got)} of {expected} messages before the deadline")
        msg = reader.get(timeout=remaining)
        if msg is None:
            continue
        if fin:
            msg.fin()
        got.append(msg)
    return got


def drain_bodies(
    nsqd: NsqdProcess, topic: str, expected: int, channel: str = "check", **options: Any
) -> list[bytes]:
    """Consume a topic's messages with a fresh SyncReader until ``expected`` arrived; then check
    that nothing more is there."""
    options.setdefault("max_in_flight", 200)
    with SyncReader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], **options) as reader:
        bodies = [m.body for m in collect(reader, expected)]
        extra = reader.get(timeout=0.3)  # a bounded look for duplicates (not a timing check)
        assert extra is None, f"unexpected extra message {extra!r}"
    return bodies
