"""Launching ``nsqd`` / ``nsqlookupd`` as another project's script does, for both backends.

``real``: the binaries the suite builds (test_service/.bin, through ``find_nsq_binary``);
``embedded``: the PATH shims of ``python -m nsqclient.testing shims DIR``. The same argv goes to
both; a daemon is ready when its HTTP ``/ping`` answers. stderr goes to a file (nsqd logs a lot,
a pipe nobody reads would block it) that :meth:`Launched.stderr` reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from nsqclient.testing._process import find_nsq_binary

DEADLINE = 15.0
REPO = Path(__file__).resolve().parents[2]


class Launched:
    """One daemon process; ``started`` is the monotonic time just before it was spawned."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv = argv
        self.log = log
        self._file = log.open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=self._file, env=env, cwd=log.parent
        )

    def wait_http(self, address: str) -> None:
        """Until ``GET http://address/ping`` answers (AssertionError if the daemon exits)."""
        deadline = time.monotonic() + DEADLINE
        while True:
            assert self.proc.poll() is None, f"{self.argv[0]} exited: {self.stderr()}"
            try:
                if httpx.get(f"http://{address}/ping", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"{self.argv[0]} not ready: {self.stderr()}"
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, then the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=DEADLINE)
        self._file.close()
        return code

    def stderr(self) -> str:
        if not self._file.closed:
            self._file.flush()
        return self.log.read_text("utf-8", "replace")


class Launcher:
    """``launcher(name, *args)`` runs ``name`` of the test's backend; all are killed at the end."""

    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend = backend
        self.tmp = tmp_path
        self.env = {k: v for k, v in os.environ.items() if k != "NSQ_BIN_DIR"}
        self.bin: dict[str, str] = {}
        if backend == "real":
            for name in ("nsqd", "nsqlookupd"):
                self.bin[name] = str(find_nsq_binary(name))
        else:
            folder = tmp_path / "shims"
            subprocess.run(
                [sys.executable, "-m", "nsqclient.testing", "shims", str(folder)],
                capture_output=True,
                timeout=DEADLINE,
                check=True,
            )
            self.env["PYTHONPATH"] = str(REPO)
            for name in ("nsqd", "nsqlookupd"):
                self.bin[name] = str(folder / name)
        self.started: list[Launched] = []

    def __call__(self, name: str, *args: str) -> Launched:
        log = self.tmp / f"{name}-{len(self.started)}.log"
        daemon = Launched([self.bin[name], *args], self.env, log)
        self.started.append(daemon)
        return daemon

    def run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run to completion (for commands that exit at once: bad flags, bad config)."""
        return subprocess.run(
            [self.bin[name], *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=DEADLINE,
            cwd=self.tmp,
        )

    def close(self) -> None:
        for daemon in reversed(self.started):
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait(timeout=DEADLINE)
            daemon._file.close()
