"""How CI runs the thread paths' tests in harsher interpreters (issue 49), set by environment.

``NSQCLIENT_TEST_NO_GIL=1`` (run_tests.sh's free-threaded step): every test process, the xdist
controller and each worker, must run with the GIL off from session start to session end, or the
run fails. On a free-threaded CPython (3.13t) an extension module that does not declare
free-threading support turns the GIL back on for the whole process when it is imported (cramjam,
python-snappy's backend, is one), and every test after it would prove nothing about the code
without the GIL. So the guard checks after each test phase: the phase in which the GIL came on
fails, naming the extension modules imported since the last check (CPython's own RuntimeWarning
names the module too). A worker that ends with the GIL on reports it to the controller, which
fails the session. Forcing the GIL off (``PYTHON_GIL=0``, ``-X gil=0``) is refused: it would hide
such an import rather than find it.

``NSQCLIENT_TEST_SWITCH_INTERVAL=1e-6`` (run_tests.sh's switch-interval step): every test process
calls ``sys.setswitchinterval`` with it, so that a build with the GIL hands it between threads
about every microsecond instead of every 5 ms, and a race between two bytecodes of a
check-then-set shows up in a stress run rather than once a month.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["NO_GIL_ENV", "SWITCH_INTERVAL_ENV", "GilGuard", "configure"]

NO_GIL_ENV = "NSQCLIENT_TEST_NO_GIL"
SWITCH_INTERVAL_ENV = "NSQCLIENT_TEST_SWITCH_INTERVAL"
_WORKER_KEY = "nsqclient_gil_enabled_by"
#: extension modules known to turn the GIL on, with what loads them
_KNOWN = {"cramjam": "python-snappy's backend: only a snappy connection should import it"}


def configure(config: pytest.Config) -> None:
    """Apply the two settings above to this process (called from ``pytest_configure``)."""
    interval = os.environ.get(SWITCH_INTERVAL_ENV, "")
    if interval:
        try:
            seconds = float(interval)
            sys.setswitchinterval(seconds)
        except ValueError as exc:
            raise pytest.UsageError(f"${SWITCH_INTERVAL_ENV}={interval!r}: {exc}") from None
        if abs(sys.getswitchinterval() - seconds) > 1e-6:
            raise pytest.UsageError(
                f"${SWITCH_INTERVAL_ENV}={interval}: the interpreter kept "
                f"{sys.getswitchinterval()} s"
            )
    if os.environ.get(NO_GIL_ENV, "") not in ("", "0"):
        config.pluginmanager.register(GilGuard(config), "nsqclient-gil-guard")


def gil_enabled() -> bool:
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else bool(is_enabled())


def _extension_modules(names: set[str]) -> list[str]:
    """The compiled modules among ``names`` (top-level package names, sorted)."""
    found = set()
    for name in names:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) or ""
        if path.endswith((".so", ".pyd")):
            found.add(name.partition(".")[0])
    return sorted(found)


class GilGuard:
    """Fails the run when the GIL is, or comes, on in a test process (see the module doc)."""

    def __init__(self, config: pytest.Config) -> None:
        self.worker = hasattr(config, "workerinput")
        self.culprit = ""  # what turned the GIL on, once it is on
        self.modules = set(sys.modules)  # modules loaded when the GIL was last seen off
        self.failed_workers: list[str] = []

    def _why(self, when: str) -> str:
        new = _extension_modules(set(sys.modules) - self.modules)
        named = ", ".join(f"{m} ({_KNOWN[m]})" if m in _KNOWN else m for m in new)
        loaded = f"; extension modules imported since it was last off: {named}" if new else ""
        return (
            f"the GIL was turned on {when}{loaded}. ${NO_GIL_ENV} asks for the thread paths to be "
            "tested without it; keep that import out of this run (a snappy test: mark it "
            "@pytest.mark.snappy, which the free-threaded step deselects)"
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not hasattr(sys, "_is_gil_enabled"):
            raise pytest.UsageError(
                f"${NO_GIL_ENV} is set but {sys.executable} ({sys.version.split()[0]}) is not "
                "a free-threaded CPython (3.13t): run it with test_service/python_ft.sh's"
            )
        forced = os.environ.get("PYTHON_GIL", "") or str(sys._xoptions.get("gil", ""))
        if forced:
            raise pytest.UsageError(
                f"${NO_GIL_ENV} is set with the GIL forced (PYTHON_GIL / -X gil = {forced}): "
                "unset it, so that an import which turns the GIL on is found, not hidden"
            )
        if gil_enabled():
            raise pytest.UsageError(self._why("before the session started (at start-up)"))
        self.modules = set(sys.modules)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        if self.culprit:
            return
        if not gil_enabled():
            self.modules = set(sys.modules)
            return
        report = outcome.get_result()
        self.culprit = f"{item.nodeid} ({call.when})"
        message = self._why(f"during {self.culprit}")
        report.outcome = "failed"
        report.longrepr = f"{report.longrepr}\n\n{message}" if report.longrepr else message

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.culprit and gil_enabled():
            self.culprit = "after the last test"
        if self.worker:
            workeroutput: dict[str, Any] = session.config.workeroutput  # type: ignore[attr-defined]
            workeroutput[_WORKER_KEY] = self.culprit
        elif self.culprits():
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def culprits(self) -> list[str]:
        return [c for c in [self.culprit, *self.failed_workers] if c]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.worker and self.culprits():
            terminalreporter.section("the GIL was on", sep="=", red=True, bold=True)
            for culprit in self.culprits():
                terminalreporter.line(f"turned on {culprit}", red=True)
            terminalreporter.line(
                f"${NO_GIL_ENV}: this run does not prove the code without the GIL", red=True
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist (controller): a worker finished; collect what it saw."""
        culprit = getattr(node, "workeroutput", {}).get(_WORKER_KEY, None)
        if culprit is None:
            culprit = f"unknown: worker {getattr(node, 'gateway', node)} sent no GIL report"
        if culprit:
            self.failed_workers.append(culprit)
