"""The consumers under test, each in its own process: nsqclient's (:mod:`.client`) and go-nsq's
(``gobench fleet``, built by ``bash test_service/benchmark_fleet.sh``). Both take the same flags
and print one JSON result line with ``"fleetbench": 1``.

A client name is ``nsqclient``, ``go-nsq``, or ``nsqclient+KEY=VALUE[+KEY=VALUE...]``: nsqclient
with Reader options (``nsqclient+rdy_strategy=even``), so two policies run side by side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ..compare.harness import DEFAULT_GOBENCH, REPO_ROOT, parse_driver_output
from ..compare.harness import ClientSpec as _CompareClientSpec

__all__ = [
    "DEFAULT_GOBENCH",
    "REPO_ROOT",
    "ClientRun",
    "ClientSpec",
    "parse_result_line",
    "resolve_client",
]


@dataclasses.dataclass
class ClientSpec(_CompareClientSpec):
    """The comparison's client spec, plus the Reader options of an ``nsqclient+KEY=VALUE``."""

    options: list[str] = dataclasses.field(default_factory=list)


def resolve_client(
    name: str, *, gobench: Path = DEFAULT_GOBENCH, go_max_procs: int | None = 1
) -> ClientSpec:
    base, *options = name.split("+")
    if base == "nsqclient":
        command = [sys.executable, "-m", "benchmarks.fleet.client"]
        return ClientSpec(name, command, options=options)
    if base == "go-nsq" and not options:
        if not gobench.exists():
            return ClientSpec(
                name, None, f"not built (bash test_service/benchmark_fleet.sh builds {gobench})"
            )
        env = {"GO_MAX_PROCS": str(go_max_procs)} if go_max_procs else {}
        return ClientSpec(name, [str(gobench), "fleet"], env=env)
    return ClientSpec(name, None, "unknown client (nsqclient[+KEY=VALUE...] or go-nsq)")


def parse_result_line(stdout: str) -> dict[str, Any]:
    """The last JSON object with ``"fleetbench"`` a client printed."""
    return parse_driver_output(stdout, "fleetbench", "client")


class ClientRun:
    """One consumer process. ``stop()`` asks it to finish (``--stop-on-stdin``); ``result()``
    waits for its line (killing it after ``timeout``)."""

    def __init__(self, spec: ClientSpec, args: Sequence[str], *, stop_on_stdin: bool) -> None:
        assert spec.command is not None
        argv = [*spec.command, *args, *(f"--option={o}" for o in spec.options)]
        if stop_on_stdin:
            argv.append("--stop-on-stdin")
        self._stderr: IO[str] = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stop_on_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO_ROOT,  # python -m benchmarks.fleet.client imports the checkout's benchmarks/
            env={**os.environ, **spec.env},
            text=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> bool:
        """True when the client exited within ``timeout`` seconds by itself."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):  # BrokenPipeError: it exited already
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            self.proc.stdin = None  # so communicate() does not flush it

    def result(self, timeout: float) -> dict[str, Any]:
        try:
            stdout, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            stdout, _ = self.proc.communicate()
            return self._error("the client did not finish in time (killed)")
        try:
            data = parse_result_line(stdout or "")
        except ValueError:
            return self._error(f"exit status {self.proc.returncode}, no result line")
        if data.get("status") != "ok":
            data.setdefault("stderr", self._stderr_tail())
        self._stderr.close()
        return data

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return "\n".join(self._stderr.read().strip().splitlines()[-15:])

    def _error(self, reason: str) -> dict[str, Any]:
        data = {"fleetbench": 1, "status": "error", "reason": reason, "stderr": self._stderr_tail()}
        self._stderr.close()
        return data
