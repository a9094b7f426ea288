"""Helpers for the ``nsqclient`` command-line tests: the CLI runs as a real subprocess
(``python -m nsqclient ...``) against the ``nsqd`` fixture's daemon, on both backends.

Every wait is a condition with a deadline: a line read from the subprocess's stdout, nsqd's
``/stats`` reaching a value, or the process exiting; never a bare sleep. The subprocess's
environment has none of the ``NSQD_*`` address variables, so only the flags a test passes count.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import pytest

from tests.support import unique as unique

DEADLINE = 15.0
ADDRESS_VARS = ("NSQD_TCP_ADDRESSES", "NSQD_HTTP_ADDRESSES", "NSQLOOKUPD_HTTP_ADDRESSES")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ADDRESS_VARS and k != "NSQ_AUTH_SECRET"}
    env.update(extra)
    return env


def cli(
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = DEADLINE,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m nsqclient ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "nsqclient", *args],
        input=input,
        capture_output=True,
        env=clean_env() if env is None else env,
        timeout=timeout,
        check=False,
    )


class Running:
    """A CLI subprocess whose stdout lines are read by a thread, so tests can wait for them."""

    def __init__(self, args: Sequence[str], *, stdin: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nsqclient", *args],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr = b""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._out = threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True)
        self._out.start()
        self._err = threading.Thread(target=self._read_err, args=(self.proc.stderr,), daemon=True)
        self._err.start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def _read_err(self, stream: IO[bytes]) -> None:
        self.stderr = stream.read()

    def line(self, timeout: float = DEADLINE) -> bytes:
        """The next stdout line (without its newline); fails at the deadline or at EOF."""
        try:
            item = self._lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no output line within {timeout}s")
        if item is None:
            self.proc.wait(timeout)
            self._err.join(timeout)
            pytest.fail(f"the CLI ended early: rc={self.proc.returncode} {self.stderr!r}")
        return item.rstrip(b"\n")

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = DEADLINE) -> int:
        code = self.proc.wait(timeout)
        self._err.join(timeout)
        return code

    def close(self) -> None:
        """Kill it if still running, and close its pipes once the readers saw EOF."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self._out.join(5)
        self._err.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@pytest.fixture
def running() -> Iterator[Callable[..., Running]]:
    """``running(args, stdin=False)`` starts a CLI subprocess; all are killed at teardown."""
    started: list[Running] = []

    def start(args: Sequence[str], *, stdin: bool = False) -> Running:
        proc = Running(args, stdin=stdin)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.close()


def topic_stats(nsqd: Any, topic: str) -> dict[str, Any] | None:
    for t in nsqd.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            return dict(t)
    return None


def channel_stats(nsqd: Any, topic: str, channel: str) -> dict[str, Any] | None:
    t = topic_stats(nsqd, topic)
    for c in (t or {}).get("channels") or []:
        if c["channel_name"] == channel:
            return dict(c)
    return None


def channels_of(nsqd: Any, topic: str) -> list[str]:
    t = topic_stats(nsqd, topic)
    return [c["channel_name"] for c in (t or {}).get("channels") or []]


SIGNALS = [
    pytest.param(signal.SIGINT, 130, id="SIGINT"),
    pytest.param(signal.SIGTERM, 143, id="SIGTERM"),
]
