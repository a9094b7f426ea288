"""Leaving by Ctrl-C, by ``break`` and by interpreter exit hands every unfinished message back to
nsqd at once (REQ, no delay): a new reader gets them well before nsqd's msg_timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import DEADLINE, channel_stats, collect, topic_stats, unique

SCRIPT = Path(__file__).parent / "scripts" / "hold_messages.py"
EXIT_SCRIPT = Path(__file__).parent / "scripts" / "exit_open.py"
# the test reader asks nsqd for a long msg_timeout: "at once" must not be nsqd's timeout
LONG_MSG_TIMEOUT_MS = 600_000


def _publish(nsqd: NsqdProcess, topic: str, count: int) -> list[bytes]:
    bodies = [f"m{i}".encode() for i in range(count)]
    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer:
        writer.mpub(topic, bodies)
    return bodies


def _start_child(mode: str, nsqd: NsqdProcess, topic: str, fin: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), mode, nsqd.tcp_address, topic, "c", str(fin)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_ready(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()  # the child prints READY or dies (EOF): no hang
    if not line.startswith("READY"):
        child.kill()
        _out, err = child.communicate(timeout=DEADLINE)
        pytest.fail(f"child did not get ready: {line!r}\n{err}")


def _assert_all_back_at_once(nsqd: NsqdProcess, topic: str, expected: int) -> None:
    """Nothing stranded in flight; a new reader receives every unfinished message at once."""
    stats = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="the child's connection to go away",
    )
    assert stats["in_flight_count"] == 0, stats
    assert stats["timeout_count"] == 0, stats
    assert stats["deferred_count"] == 0, stats
    with SyncReader(
        topic,
        "c",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=100,
        msg_timeout=LONG_MSG_TIMEOUT_MS,
    ) as reader:
        got = collect(reader, expected, timeout=DEADLINE)  # DEADLINE << msg_timeout
        assert len({m.id for m in got}) == expected
        assert reader.get(timeout=0.3) is None


def test_ctrl_c_requeues_everything_unfinished(nsqd: NsqdProcess) -> None:
    topic = unique()
    _publish(nsqd, topic, 30)
    child = _start_child("interrupt", nsqd, topic, fin=5)
    _interrupt(child, nsqd, topic)
    _assert_all_back_at_once(nsqd, topic, 25)


def test_ctrl_c_during_run_lets_handlers_finish_and_requeues_the_rest(nsqd: NsqdProcess) -> None:
    topic = unique()
    _publish(nsqd, topic, 30)
    child = _start_child("interrupt-run", nsqd, topic, fin=0)
    _interrupt(child, nsqd, topic)
    stats = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="the child's connection to go away",
    )
    finished = 30 - stats["depth"]  # the handlers that were running finished their message
    assert finished >= 1
    _assert_all_back_at_once(nsqd, topic, 30 - finished)


def _interrupt(child: subprocess.Popen[str], nsqd: NsqdProcess, topic: str) -> None:
    try:
        _wait_ready(child)
        # RDY 10: up to 10 delivered to the child, 1+ held, the rest queued in its bridge
        wait_until(
            lambda: (s := channel_stats(nsqd, topic, "c")) and s["in_flight_count"] >= 1,
            what="messages in flight at the child",
        )
        child.send_signal(signal.SIGINT)
        child.wait(timeout=10)  # a generous bound: it must exit at all, promptly
    finally:
        if child.poll() is None:
            child.kill()
        _out, err = child.communicate(timeout=DEADLINE)
    assert "KeyboardInterrupt" in err
    assert child.returncode != 0


@pytest.mark.one_backend
@pytest.mark.parametrize("mode", ["exit", "exit-run"])
def test_interpreter_exit_with_open_objects_does_not_hang_or_strand(
    nsqd: NsqdProcess, mode: str
) -> None:
    topic = unique()
    _publish(nsqd, topic, 20)
    child = _start_child(mode, nsqd, topic, fin=3 if mode == "exit" else 0)
    try:
        _wait_ready(child)
        child.wait(timeout=DEADLINE)
    finally:
        if child.poll() is None:
            child.kill()
        _out, err = child.communicate(timeout=DEADLINE)
    assert child.returncode == 0, err
    assert "Traceback" not in err, err
    _assert_all_back_at_once(nsqd, topic, 17 if mode == "exit" else 20)


def test_break_requeues_what_was_queued_and_in_hand(nsqd: NsqdProcess) -> None:
    topic = unique()
    _publish(nsqd, topic, 50)
    with SyncReader(
        topic,
        "c",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=20,
        msg_timeout=LONG_MSG_TIMEOUT_MS,
    ) as reader:
        seen = 0
        for msg in reader:
            seen += 1
            if seen <= 3:
                msg.fin()
                continue
            wait_until(
                lambda: reader.stats()["in_flight"] >= 2,
                what="more messages queued behind the one in hand",
            )
            break  # one in hand, others delivered and queued in the bridge
    stats = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="nsqd to drop the closed connection",
    )
    assert stats["in_flight_count"] == 0
    assert stats["requeue_count"] >= 2
    _assert_all_back_at_once(nsqd, topic, 47)


def test_graceful_close_from_another_thread_while_iterating(nsqd: NsqdProcess) -> None:
    """A closer that is not the iterating thread lets that thread finish what it holds."""
    import threading

    topic = unique()
    _publish(nsqd, topic, 10)
    reader = SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=5)
    holding = threading.Event()
    finished: list[bytes] = []

    def consume() -> None:
        for msg in reader:
            closer.start()
            holding.set()
            # answer after the close began: graceful_close waits for it instead of requeueing
            wait_until(lambda: reader.is_closed, what="close to begin")
            msg.fin()
            finished.append(msg.body)

    closer = threading.Thread(target=reader.graceful_close, kwargs={"timeout": DEADLINE})
    consumer = threading.Thread(target=consume)
    consumer.start()
    assert holding.wait(DEADLINE)
    closer.join(DEADLINE + 15)
    consumer.join(DEADLINE)
    assert not closer.is_alive() and not consumer.is_alive()
    assert len(finished) == 1
    stats = channel_stats(nsqd, topic, "c")
    assert stats is not None and stats["in_flight_count"] == 0
    assert stats["depth"] == 9  # one FIN'd by the holder, the rest requeued


def test_exit_with_open_objects_is_quiet_and_acknowledges_every_publish(
    nsqd: NsqdProcess,
) -> None:
    """Queued publishes (``pub_nowait``) and an open reader at interpreter exit: every publish
    is stored, and nothing at all is printed on stderr (``-W default`` shows ResourceWarnings
    and every other warning once)."""
    topic = unique()
    count = 500
    done = subprocess.run(
        [sys.executable, "-W", "default", str(EXIT_SCRIPT), nsqd.tcp_address, topic, str(count)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "END\n"
    assert done.stderr == ""
    stats = topic_stats(nsqd, topic)
    assert stats is not None and stats["message_count"] == count
    wait_until(  # the reader was subscribed, and closed with the process
        lambda: (c := channel_stats(nsqd, topic + "-in", "c")) and c["client_count"] == 0,
        what="the reader's channel without clients",
    )
