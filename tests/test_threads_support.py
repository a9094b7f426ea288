"""tests/threads_support.py: the switches CI's thread steps set (issue 49), each in a pytest run of
its own (a subprocess, on xdist workers as CI runs them). On a free-threaded CPython (the
free-threaded CI step runs this file) an import that turns the GIL on fails the run, naming the
module; on a build with a GIL the switch is refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFTEST = """
from tests import threads_support

def pytest_configure(config):
    threads_support.configure(config)
"""

#: a pytest run of its own, on two xdist workers: 2-3 s quiet, over 60 s in the free-threaded
#: step with two CPU hogs beside it (three free-threaded interpreters starting up among six busy
#: workers): a deadline for a hang, not a measure of speed
pytestmark = pytest.mark.timeout(240)


def _run(pytester: pytest.Pytester, env: dict[str, str], tests: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=tests)
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("PYTHONPATH", str(ROOT))
        mp.delenv("PYTHON_GIL", raising=False)
        for name, value in env.items():
            mp.setenv(name, value)
        return pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    finally:
        mp.undo()


def test_the_switch_interval_reaches_every_worker(pytester: pytest.Pytester) -> None:
    tests = """
import sys

def test_one():
    assert sys.getswitchinterval() == 1e-6

def test_two():
    assert sys.getswitchinterval() == 1e-6
"""
    result = _run(pytester, {"NSQCLIENT_TEST_SWITCH_INTERVAL": "1e-6"}, tests)
    result.assert_outcomes(passed=2)


def test_the_gil_coming_on_fails_the_run_naming_the_module(pytester: pytest.Pytester) -> None:
    tests = """
import warnings

def test_plain():
    pass

def test_imports_cramjam():
    with warnings.catch_warnings():  # (CPython's own warning would name it too: hidden here)
        warnings.simplefilter("ignore")
        import snappy  # python-snappy's backend, cramjam, declares no free-threading support

def test_after():
    pass
"""
    result = _run(pytester, {"NSQCLIENT_TEST_NO_GIL": "1"}, tests)
    output = result.stdout.str() + result.stderr.str()
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if is_gil_enabled is None or is_gil_enabled():  # a build with a GIL: refused at start
        assert result.ret == pytest.ExitCode.USAGE_ERROR, output
        assert "is not a free-threaded CPython" in output, output
        return
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    result.assert_outcomes(passed=2, failed=1)
    assert "the GIL was turned on during test_inner.py::test_imports_cramjam (call)" in output
    assert "cramjam (python-snappy's backend" in output, output
