"""SIGTERM tests shared by tests/sync and tests/aio: run a child that handles messages slowly
and prints each body it handled (then FIN'd), stop it with SIGTERM while messages are in flight,
and check nsqd's own accounting."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from nsqclient.sync import SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until
from tests.sync.support import DEADLINE, channel_stats, drain_bodies

COUNT = 200
EXIT_BOUND = 10.0  # seconds from SIGTERM to exit: "promptly", with margin for a loaded machine
REPO = Path(__file__).resolve().parents[1]


def sigterm_child(argv: list[str], nsqd: NsqdProcess, topic: str, channel: str) -> list[str]:
    """Start ``argv``, wait until it handled a few messages and more are in flight at nsqd, send
    SIGTERM, and return what it printed (it must exit 0 within EXIT_BOUND)."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stderr is not None
        try:
            first: list[str] = []
            for _ in range(3):  # the child prints each body it handled, or dies (EOF): no hang
                line = child.stdout.readline()
                if not line:
                    child.wait(timeout=DEADLINE)
                    pytest.fail(f"child ended early: {child.stderr.read()}")
                first.append(line.strip())
            wait_until(
                lambda: (s := channel_stats(nsqd, topic, channel)) and s["in_flight_count"] >= 1,
                what="messages in flight at the child",
            )
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=EXIT_BOUND)  # its output is small: it fits in the pipes meanwhile
            # through the same buffered files: communicate() would skip what readline() buffered
            out, err = child.stdout.read(), child.stderr.read()
        finally:
            if child.poll() is None:
                child.kill()
    assert child.returncode == 0, err
    assert "Traceback" not in err, err
    return [*first, *out.splitlines()]


def assert_exact_accounting(
    nsqd: NsqdProcess, topic: str, channel: str, bodies: list[str], printed: list[str]
) -> None:
    handled = [line for line in printed if line.startswith("b")]
    assert printed[-1] == "RESTORED True"
    assert len(set(handled)) == len(handled)  # nothing handled twice
    assert 0 < len(handled) < COUNT  # stopped half-way, as the test intends
    stats = wait_until(
        lambda: (s := channel_stats(nsqd, topic, channel)) and s["client_count"] == 0 and s,
        what="the child's connection to go away",
    )
    assert (stats["in_flight_count"], stats["timeout_count"], stats["deferred_count"]) == (0, 0, 0)
    assert stats["depth"] == COUNT - len(handled), stats  # every other message is back
    rest = drain_bodies(nsqd, topic, COUNT - len(handled), channel=channel)
    assert sorted([*handled, *(b.decode() for b in rest)]) == sorted(bodies)


def publish(nsqd: NsqdProcess, topic: str, channel: str) -> list[str]:
    bodies = [f"b{i}" for i in range(COUNT)]
    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b.encode() for b in bodies])
    return bodies
