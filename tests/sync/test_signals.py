"""SIGTERM (what docker stop, systemd and Kubernetes send) stops a blocking consumer the way
Ctrl-C does: running handlers finish, everything else goes back to nsqd at once, the process
exits by itself within a few seconds and the previous SIGTERM handler is restored.

Each test runs a child process that handles messages slowly, sends it SIGTERM while messages are
in flight, then checks nsqd's own accounting: nothing in flight, nothing timed out, every message
either handled (printed by the child, then FIN'd) or back in the queue, exactly."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import pytest

from nsqclient.errors import ConfigError
from nsqclient.sync import SyncReader, run_in_loop
from nsqclient.testing.daemons import NsqdProcess
from tests.sigterm_support import assert_exact_accounting, publish, sigterm_child

from .support import DEADLINE, unique

pytestmark = pytest.mark.timeout(90)

SCRIPTS = Path(__file__).parent / "scripts"


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


def test_closed_from_another_thread_the_next_signal_goes_to_the_previous_handler(
    nsqd: NsqdProcess,
) -> None:
    """Handlers can only be restored in the main thread: closed elsewhere, the reader's handler
    steps aside on the next signal, which then reaches the handler that was there before."""
    seen: list[int] = []

    def mine(signum: int, _frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        reader = SyncReader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address])
        reader.start()
        reader.stop_on_signals()
        closer = threading.Thread(target=reader.graceful_close)
        closer.start()
        closer.join(DEADLINE)
        assert reader.is_closed
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_aio_reader_on_the_facade_loop_thread_cannot_take_signals(nsqd: NsqdProcess) -> None:
    """Signals reach the main thread only: the background loop thread says so."""
    from nsqclient.aio import Reader

    async def install() -> None:
        reader = Reader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address])
        try:
            reader.stop_on_signals()
        finally:
            await reader.close()

    with SyncReader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as keep_loop:
        keep_loop.start()
        with pytest.raises(ConfigError, match="main thread"):
            run_in_loop(install(), DEADLINE)
