#!/usr/bin/env bash
# The whole check, as CI runs it: bootstrap, then ruff, mypy and pytest (extra arguments go to
# pytest, e.g. `bash test_service/run_tests.sh -k tls -x`). Every step runs even if an earlier one
# failed, so one run shows all problems; the exit status is non-zero if any step failed.
#
# Two Pythons. The suite runs on .venv's Python (the oldest supported, 3.11, where bootstrap.sh
# finds it) and again on the newest CPython this machine has (3.13 here), in .venv-<X.Y>, so that
# code which hangs or breaks on an asyncio detail of one version is caught (e.g. asyncio.wait_for
# runs its coroutine in a task of its own on 3.11 and not on 3.12+). The second Python is
# $SECOND_PYTHON if set, else the newest python3.N that runs, from PATH or from pyenv's versions.
# With CI=true a missing second Python FAILS the run; elsewhere it is a warning.
#
# What runs on the second Python, and why. Measured on this 2-core machine (shared, so slower
# than a CI runner): pytest takes 8.1 min for the whole suite on one Python (one CI run about
# 9 min with bootstrap, ruff and mypy). Per directory, in seconds: tests/aio 132 (79 of them on
# real nsqd, 46 on the embedded server), tests/embedded 140, tests/sync 86 (50 real, 35
# embedded), tests/integration 62 (43 real, 19 embedded), tests/testing 41, tests/benchmark 11,
# tests/protocol 7, tests/test_service 6, tests/flow 2. The whole suite twice would make about
# 19 min, with no margin on a busy machine; so the second Python runs the whole suite on ONE
# backend (--nsq-backend=real): everything but the embedded-server repeats of tests/aio,
# tests/sync and tests/integration (about 105 s), i.e. about 6.5 min, and the CI run stays near
# 16-17 min. Since then the fault, CLI and docs tests added about 3 min to each Python, so the
# second Python also leaves out tests/embedded (the embedded server's own tests, about 140 s):
# the Python-dependent code that matters is the client's, and that runs in full against real
# nsqd (the embedded server still runs on the second Python wherever a test uses it, e.g. the
# docs examples). With extra arguments, both Pythons run exactly those arguments.
#
# pytest's exit status 5 ("no tests collected") counts as a pass only when extra arguments were
# given (a -k or path that selects nothing on one run is the caller's choice); without arguments
# the suite must collect tests.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash test_service/bootstrap.sh

bin="$root/.venv/bin"
failed=()

step() { # step NAME COMMAND...
    local name="$1"
    shift
    echo "==> $name: $*"
    local status=0
    "$@" || status=$?
    if ((status == 0)); then
        echo "==> $name: ok"
    elif ((status == 5 && ${#pytest_args[@]} > 0)) && [[ "$name" == pytest* ]]; then
        echo "==> $name: ok (pytest collected no tests for the given arguments)"
    else
        echo "==> $name: FAILED (exit $status)"
        failed+=("$name")
    fi
}

version_of() { # version_of EXE -> prints X.Y.Z, or fails if EXE does not run (Python >= 3.11)
    "$1" -c 'import sys; assert sys.version_info >= (3, 11); print(sys.version.split()[0])' \
        2>/dev/null
}

newest_python() { # prints the newest CPython >= 3.11 found (path), or nothing
    local candidates=() exe best="" best_version="" version
    if [[ -n "${SECOND_PYTHON:-}" ]]; then
        echo "$SECOND_PYTHON"
        return
    fi
    for exe in python3.{11..19}; do
        command -v "$exe" >/dev/null 2>&1 && candidates+=("$(command -v "$exe")")
    done
    if command -v pyenv >/dev/null 2>&1; then
        local pyenv_root
        pyenv_root="$(pyenv root 2>/dev/null || true)"
        for exe in "$pyenv_root"/versions/3.*/bin/python3.*; do
            [[ "$exe" =~ python3\.[0-9]+$ && -x "$exe" ]] && candidates+=("$exe")
        done
    fi
    for exe in "${candidates[@]}"; do
        version="$(version_of "$exe")" || continue # e.g. a pyenv shim for a version not selected
        if [[ -z "$best" || "$(printf '%s\n%s\n' "$best_version" "$version" | sort -V | tail -1)" != "$best_version" ]]; then
            best="$exe"
            best_version="$version"
        fi
    done
    [[ -n "$best" ]] && echo "$best"
    return 0
}

pytest_args=("$@")

step ruff "$bin/ruff" check nsqclient tests test_service benchmarks
step mypy "$bin/mypy"
docs_site="$(mktemp -d)"
step docs env NO_MKDOCS_2_WARNING=1 "$bin/mkdocs" build --strict --site-dir "$docs_site"
rm -rf "$docs_site"
step pytest "$bin/python" -m pytest "$@"

# -- the second Python -----------------------------------------------------------------------------
primary="$(version_of "$bin/python")"
second="$(newest_python)"
second_version=""
[[ -n "$second" ]] && second_version="$(version_of "$second" || true)"
if [[ -z "$second_version" || "${second_version%.*}" == "${primary%.*}" ]]; then
    message="no second Python newer than ${primary%.*} was found (set SECOND_PYTHON=/path/to/python3.13, or install one with pyenv)"
    if [[ "${CI:-}" == "true" ]]; then
        echo "==> pytest-second: FAILED: $message"
        failed+=("pytest-second")
    else
        echo "==> pytest-second: WARNING: skipped: $message" >&2
    fi
else
    minor="${second_version%.*}"
    if PYTHON="$second" NSQ_VENV=".venv-$minor" bash test_service/bootstrap.sh; then
        if ((${#pytest_args[@]})); then
            step "pytest-$minor" "$root/.venv-$minor/bin/python" -m pytest "$@"
        else
            step "pytest-$minor" "$root/.venv-$minor/bin/python" -m pytest --nsq-backend=real \
                --ignore=tests/embedded
        fi
    else
        echo "==> pytest-$minor: FAILED (could not bootstrap .venv-$minor with $second)"
        failed+=("pytest-$minor")
    fi
fi

if ((${#failed[@]})); then
    echo "run_tests.sh: FAILED: ${failed[*]}"
    exit 1
fi
echo "run_tests.sh: all checks passed"
