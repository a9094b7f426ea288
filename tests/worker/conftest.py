"""Running ``nsqclient worker`` as a real subprocess against real nsqd (or the embedded server).

:class:`WorkerRun` starts ``python -m nsqclient worker worker_tasks:NAME ...`` in this folder,
in a session of its own (so a test can signal its whole process group, as Kubernetes and
``docker stop`` do, and teardown can kill every process of it), and reads its stdout (the
handlers' ``start``/``done`` lines, see ``worker_tasks.py``) and stderr (the log) on threads.
Every wait is a condition with a deadline: a line, an HTTP answer, nsqd's ``/stats``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support import DEADLINE, wait_until

HERE = Path(__file__).resolve().parent
ADDRESS_VARS = ("NSQD_TCP_ADDRESSES", "NSQD_HTTP_ADDRESSES", "NSQLOOKUPD_HTTP_ADDRESSES")
_HEALTH = re.compile(r"health on (http://\S+)")


class WorkerRun:
    """One ``nsqclient worker`` process and what it printed so far."""

    def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
        self.args = list(args)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nsqclient", "worker", *args],
            cwd=HERE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _pump(stream: Any, into: list[str]) -> None:
        into.extend(
            line.decode(errors="replace").rstrip("\n") for line in iter(stream.readline, b"")
        )

    @property
    def log(self) -> str:
        return "\n".join(self.err)

    def events(self, kind: str) -> list[tuple[int, str]]:
        """``(pid, body)`` of every ``start`` or ``done`` line so far."""
        found = []
        for line in list(self.out):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[0] == kind:
                found.append((int(parts[1]), parts[2]))
        return found

    def done_bodies(self) -> list[str]:
        return [body for _, body in self.events("done")]

    def wait_log(self, pattern: str, count: int = 1, timeout: float = DEADLINE) -> list[str]:
        """The log lines matching ``pattern`` once there are ``count`` of them."""
        regex = re.compile(pattern)

        def matching() -> list[str]:
            if self.proc.poll() is not None and len(self._matches(regex)) < count:
                for thread in self._threads:
                    thread.join(5)
                pytest.fail(f"the worker exited ({self.proc.returncode}):\n{self.log}")
            return self._matches(regex)

        return wait_until(matching, timeout, f"{count} log lines like {pattern!r}",
                          until=lambda lines: len(lines) >= count)  # fmt: skip

    def _matches(self, regex: re.Pattern[str]) -> list[str]:
        return [line for line in list(self.err) if regex.search(line)]

    def wait_done(self, count: int, timeout: float = DEADLINE) -> list[str]:
        return wait_until(self.done_bodies, timeout, f"{count} handled messages",
                          until=lambda bodies: len(bodies) >= count)  # fmt: skip

    @property
    def health_url(self) -> str:
        line = self.wait_log(r"health on http://")[0]
        match = _HEALTH.search(line)
        assert match is not None, line
        return match.group(1)

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """``GET path`` on the health server: (status, JSON body)."""
        try:
            with urllib.request.urlopen(self.health_url + path, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def wait_health(
        self, path: str, until: Callable[[tuple[int, dict[str, Any]]], object], what: str
    ) -> tuple[int, dict[str, Any]]:
        return wait_until(lambda: self.get(path), DEADLINE, what, until=until)

    def signal(self, signum: int, *, group: bool = False) -> None:
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)

    def wait(self, timeout: float = DEADLINE) -> int:
        """The exit status, once it exited (within ``timeout``) and its output was read."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit within {timeout}s:\n{self.log}")
        for thread in self._threads:
            thread.join(5)
        return code

    def close(self) -> None:
        """Kill whatever of it is left (its children too), then close the pipes."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        for thread in self._threads:
            thread.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ADDRESS_VARS}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE.parents[1]), env.get("PYTHONPATH", "")) if p
    )
    env.update(extra)
    return env


@pytest.fixture
def worker() -> Iterator[Callable[..., WorkerRun]]:
    """``worker(args, **env)`` starts ``nsqclient worker ARGS``; all are killed at teardown."""
    runs: list[WorkerRun] = []

    def start(args: Sequence[str], **env: str) -> WorkerRun:
        run = WorkerRun(args, worker_env(**env))
        runs.append(run)
        return run

    try:
        yield start
    finally:
        for run in runs:
            run.close()


def channel_stats(nsqd: Any, topic: str, channel: str) -> dict[str, Any] | None:
    for t in nsqd.stats(topic=topic).get("topics") or []:
        for c in t.get("channels") or []:
            if t["topic_name"] == topic and c["channel_name"] == channel:
                return dict(c)
    return None
