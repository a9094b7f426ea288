"""An asyncio program that ends (``asyncio.run`` returns) with a Writer or Reader still open
exits quietly: no task destroyed pending, nothing ignored in a finaliser, no traceback; the one
thing said is a ResourceWarning naming the client left open (shown by ``-X dev``), as Python
says of an unclosed socket. With nsqd up, down (a reconnect pending) and with the connection
lost while ``asyncio.run`` cancels its tasks (which used to leave a reconnect task behind)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.support import wait_until

from .conftest import DEADLINE, unique

SCRIPT = Path(__file__).parent / "scripts" / "exit_open.py"


def _run_child(kind: str, address: str, topic: str, mode: str, loop: str = "asyncio") -> str:
    """Run the child under ``-X dev`` (ResourceWarnings and asyncio's debug checks shown);
    return its stderr once it has exited by itself."""
    done = subprocess.run(
        [sys.executable, "-X", "dev", str(SCRIPT), kind, address, topic, mode, loop],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "END", (done.stdout, done.stderr)
    return done.stderr


def _assert_quiet(err: str, kind: str) -> None:
    for noise in ("Task was destroyed", "Exception ignored", "Traceback", "unclosed transport"):
        assert noise not in err, err
    name = "Writer" if kind == "writer" else "Reader"
    assert f"ResourceWarning: unclosed {name}" in err, err  # names the object left open


@pytest.mark.parametrize("kind", ["writer", "reader"])
@pytest.mark.parametrize("mode", ["up", "cut"])
def test_exit_with_an_open_client_is_quiet(nsqd: NsqdProcess, kind: str, mode: str) -> None:
    topic = unique()
    err = _run_child(kind, nsqd.tcp_address, topic, mode)
    _assert_quiet(err, kind)
    if kind == "writer":  # what was acknowledged before the exit is stored
        wait_until(lambda: _message_count(nsqd, topic) == 1, what="the acknowledged message")
    else:  # the Reader's connection was closed, not left to the process's end
        wait_until(lambda: _message_count(nsqd, topic) == 0 and _clients(nsqd, topic) == 0)


def _message_count(nsqd: NsqdProcess, topic: str) -> int:
    for entry in nsqd.stats(topic=topic).get("topics") or []:
        if entry["topic_name"] == topic:
            return int(entry["message_count"])
    return 0


def _clients(nsqd: NsqdProcess, topic: str) -> int:
    for entry in nsqd.stats(topic=topic).get("topics") or []:
        if entry["topic_name"] == topic:
            return sum(len(c.get("clients") or []) for c in entry["channels"])
    return 0


@pytest.mark.parametrize("kind", ["writer", "reader"])
def test_exit_with_nsqd_down_and_a_reconnect_pending_is_quiet(kind: str) -> None:
    err = _run_child(kind, f"127.0.0.1:{free_port()}", unique(), "down")
    _assert_quiet(err, kind)
    assert "retrying in the background" in err  # the reconnect was indeed pending


@pytest.mark.parametrize("kind", ["writer", "reader"])
def test_exit_under_uvloop_with_the_connection_lost_meanwhile_is_quiet(
    nsqd: NsqdProcess, kind: str
) -> None:
    err = _run_child(kind, nsqd.tcp_address, unique(), "cut", loop="uvloop")
    _assert_quiet(err, kind)
