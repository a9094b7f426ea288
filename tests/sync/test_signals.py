"""SIGTERM (what docker stop, systemd and Kubernetes send) stops a blocking consumer the way
Ctrl-C does: running handlers finish, everything else goes back to nsqd at once, the process
exits by itself within a few seconds and the previous SIGTERM handler is restored.

Each test runs a child process that handles messages slowly, sends it SIGTERM while messages are
in flight, then checks nsqd's own accounting: nothing in flight, nothing timed out, every message
either handled (printed by the child, then FIN'd) or back in the queue, exactly."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nsqclient.errors import ConfigError
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess

from .support import DEADLINE, channel_stats, drain_bodies, unique, wait_for

pytestmark = pytest.mark.timeout(90)

SCRIPTS = Path(__file__).parent / "scripts"
COUNT = 200
EXIT_BOUND = 10.0  # seconds from SIGTERM to exit: "promptly", with margin for a loaded machine


def sigterm_child(argv: list[str], nsqd: NsqdProcess, topic: str, channel: str) -> list[str]:
    """Start ``argv``, wait until it handled a few messages and more are in flight at nsqd, send
    SIGTERM, and return what it printed (it must exit 0 within EXIT_BOUND)."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        first: list[str] = []
        for _ in range(3):  # the child prints each body it handled, or dies (EOF): no hang
            line = child.stdout.readline()
            first.append(line.strip())
            if not line:
                child.wait(timeout=DEADLINE)
                pytest.fail(f"child ended early: {child.stderr.read() if child.stderr else ''}")
        wait_for(
            lambda: (s := channel_stats(nsqd, topic, channel)) and s["in_flight_count"] >= 1,
            what="messages in flight at the child",
        )
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=EXIT_BOUND)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=DEADLINE)
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
    stats = wait_for(
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


@pytest.mark.parametrize("mode", ["run", "for", "django"])
def test_sigterm_stops_gracefully(nsqd: NsqdProcess, mode: str) -> None:
    topic, channel = unique(), unique("c")
    bodies = publish(nsqd, topic, channel)
    argv = [sys.executable, str(SCRIPTS / "sigterm_child.py"), mode, nsqd.tcp_address, topic]
    printed = sigterm_child([*argv, channel], nsqd, topic, channel)
    assert_exact_accounting(nsqd, topic, channel, bodies, printed)


def test_stop_on_signals_outside_the_main_thread_says_what_to_do(nsqd: NsqdProcess) -> None:
    errors: list[BaseException] = []
    with SyncReader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:

        def install() -> None:
            try:
                reader.stop_on_signals()
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=install)
        worker.start()
        worker.join(DEADLINE)
    assert len(errors) == 1 and isinstance(errors[0], ConfigError)
    assert "main thread" in str(errors[0])


def test_stop_on_signals_restores_the_previous_handler_at_close(nsqd: NsqdProcess) -> None:
    seen: list[int] = []

    def mine(signum: int, _frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with SyncReader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
            reader.stop_on_signals()
            assert signal.getsignal(signal.SIGTERM) is not mine
            signal.raise_signal(signal.SIGTERM)  # handled by the reader: it stops
            assert reader.get(timeout=DEADLINE) is None
        assert signal.getsignal(signal.SIGTERM) is mine
        assert seen == []
    finally:
        signal.signal(signal.SIGTERM, previous)
