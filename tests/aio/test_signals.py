"""SIGTERM stops an asyncio consumer the way Ctrl-C would: ``reader.stop_on_signals()`` (the
example service, and an ``async for`` loop), checked in a child process against nsqd's own
accounting (see tests/sigterm_support.py)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from nsqclient.aio import Reader
from nsqclient.errors import ConfigError
from nsqclient.testing.daemons import NsqdProcess
from tests.sigterm_support import assert_exact_accounting, publish, sigterm_child

from .conftest import DEADLINE, unique

pytestmark = pytest.mark.timeout(90)

SCRIPT = Path(__file__).parent / "scripts" / "sigterm_service.py"


@pytest.mark.parametrize("mode", ["service", "iterate"])
def test_sigterm_stops_gracefully(nsqd: NsqdProcess, mode: str) -> None:
    topic, channel = unique(), unique("c")
    bodies = publish(nsqd, topic, channel)
    argv = [sys.executable, str(SCRIPT), mode, nsqd.tcp_address, topic, channel]
    printed = sigterm_child(argv, nsqd, topic, channel)
    assert_exact_accounting(nsqd, topic, channel, bodies, printed)


async def test_stop_on_signals_closes_and_restores_the_previous_handler(
    nsqd: NsqdProcess,
) -> None:
    seen: list[int] = []

    def mine(signum: int, _frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        reader = Reader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address])
        async with asyncio.timeout(DEADLINE):
            await reader.start()
            reader.stop_on_signals()
            signal.raise_signal(signal.SIGTERM)  # the loop runs the Reader's handler
            await reader.wait_closed()
        assert reader.is_closed
        assert signal.getsignal(signal.SIGTERM) is mine
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


async def test_stop_on_signals_restores_a_loop_handler(nsqd: NsqdProcess) -> None:
    loop = asyncio.get_running_loop()
    seen = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, seen.set)
    try:
        reader = Reader(unique(), "c", nsqd_tcp_addresses=[nsqd.tcp_address])
        async with asyncio.timeout(DEADLINE):
            await reader.start()
            reader.stop_on_signals()
            await reader.graceful_close()
            signal.raise_signal(signal.SIGTERM)  # the application's own loop handler again
            await seen.wait()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def test_stop_on_signals_needs_a_running_loop() -> None:
    reader = Reader(unique(), "c", nsqd_tcp_addresses=["127.0.0.1:4150"])
    with pytest.raises(ConfigError, match="coroutine"):
        reader.stop_on_signals()
