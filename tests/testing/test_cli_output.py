"""What the embedded server's command line tells a user (issue 51): a persistence flag makes it
say at start-up that it keeps messages in memory only (``nsqclient nsqd --data-path D`` started
without a word, and a restart lost what it stored), and ``--help | head`` ends without a
BrokenPipe traceback, for ``python -m nsqclient.testing`` and the ``nsqclient`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_cli import COMMAND, DEADLINE, Server

pytestmark = pytest.mark.timeout(60)

MODULE = [sys.executable, "-m", "nsqclient.testing"]
LISTEN = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.kill()


@pytest.mark.parametrize(
    ("command", "flags", "said"),
    [
        pytest.param(COMMAND, ["--data-path"], "note: -data-path ignored", id="nsqclient-nsqd"),
        pytest.param(
            [*MODULE, "nsqd"],
            ["--sync-every=10", "-data-path"],
            "WARNING: -sync-every, -data-path ignored",
            id="nsqd-drop-in",
        ),
    ],
)
def test_a_persistence_flag_says_the_server_keeps_messages_in_memory_only(
    servers: list[Server], tmp_path: Path, command: list[str], flags: list[str], said: str
) -> None:
    server = Server(*LISTEN, *flags, str(tmp_path), command=command)
    servers.append(server)
    notes = [line for line in server.lines if said in line]
    assert len(notes) == 1, server.lines
    assert "in memory only" in notes[0] and "lost when it stops" in notes[0]
    code, rest = server.terminate()
    assert code == 0, rest


def test_no_persistence_flag_no_notice(servers: list[Server]) -> None:
    server = Server(*LISTEN, "--statsd-prefix=x")  # ignored too, but loses nothing
    servers.append(server)
    assert not [line for line in server.lines if "memory only" in line], server.lines
    assert server.terminate()[0] == 0


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([*MODULE, "--help"], id="module-help"),
        pytest.param([*MODULE, "nsqd", "--help"], id="module-nsqd-help"),
        pytest.param([*MODULE, "--version"], id="module-version"),
        pytest.param([*COMMAND, "--help"], id="nsqclient-nsqd-help"),
        pytest.param([COMMAND[0], "--help"], id="nsqclient-help"),
    ],
)
def test_output_into_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    """``| head`` gone before the output is written: the write fails with EPIPE, as when
    ``head`` has read its lines and exited (a pipe whose reader is closed before the command
    starts makes that certain, not a race)."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=DEADLINE
        )
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (0, "")
