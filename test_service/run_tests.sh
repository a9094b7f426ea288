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
# Parallel workers. pytest runs on pytest-xdist workers (-n $NSQ_TEST_WORKERS, default 6, with
# --dist worksteal so that the few long tests do not leave workers idle at the end): most tests
# wait on heartbeats, timeouts and daemons rather than on CPU, so 6 workers pay on 2 cores (4 until
# 2026-12-04: the 3.11 suite, 3,280 tests, 1,264 worker seconds, took 358 s on 4 and 257 s on 6
# in one session, the machine otherwise quiet; CI was at 603-638 s, over its 10 minutes). Each
# worker takes daemon ports from a slice of its own (the nsqclient plugin sets
# $NSQCLIENT_PORT_RANGE per worker), so real nsqd and the embedded server never collide, and a
# port a test keeps closed is never another worker's daemon. NSQ_TEST_WORKERS=0 runs serially.
# Measured on this 2-core machine (issue 23): the whole suite on 3.11 took 15.5 min serially
# and 2,130 s of test time in all; per directory, in worker seconds: tests/aio 653 (real 300,
# embedded 287), tests/embedded 263, tests/testing 220 (the two demo runs 148), tests/cli 183,
# tests/sync 162, tests/protocol 148 (hypothesis), tests/flow 91, tests/integration 86,
# tests/compare 76, tests/benchmark 73, tests/docs 55, the two mypy-running tests 61.
#
# What runs on the second Python, and why. The first Python (.venv, 3.11) runs everything, on
# both backends (but for the tests marked one_backend: long tests of the client's own behaviour,
# faults, deadlines, timeouts, memory, on real nsqd only; see ONE_BACKEND in tests/conftest.py).
# The second one exists to catch code that hangs or breaks on an asyncio detail of one version,
# i.e. the client's I/O code: tests/aio, tests/sync, tests/http_clients, tests/cli and
# tests/observability, against real nsqd only (--nsq-backend=real: the embedded repeats test the
# embedded server, not the client), without the tests marked slow (-m "not slow": seconds spent
# on nsqd's timers, 30 s outages and heartbeats, whose client code the shorter tests reach too).
# Left out, because they would test nothing new there: the pure layers (tests/protocol's
# hypothesis runs, tests/flow: no I/O, no asyncio; tests/integration, the protocol layer over a
# blocking socket), the embedded server's own tests (tests/embedded), the test kit
# (tests/testing), the tooling (tests/benchmark, tests/compare, tests/release, the mypy runs), the
# docs (tests/docs) and tests/test_service (the real-daemon scripts). Its venv has the test
# extras only (NSQ_EXTRAS=test: no ruff, mypy, docs or charts to install).
#
# CI time, issue 51 (a free-threaded step and a worker feature's tests are to come, within the
# same 10 minutes). On this 2-core machine, shared with other jobs (load average 2.4-4.8 during
# each run), fresh clones, the two pytest steps exactly as below, back to back in one session:
#   before (af291e0): 3.11 297 s (3,310 tests, 1,424 worker seconds), 3.13 140 s (1,082 tests):
#   437 s together; after: 3.11 199 s (3,057 tests, 977 worker seconds), 3.13 60 s (913 tests):
#   259 s together. Worker seconds on 3.11 per directory, before -> after: tests/aio 442 -> 269,
#   tests/sync 275 -> 166, tests/embedded 208 -> 187, tests/integration 91 -> 91,
#   tests/http_clients 76 -> 43, tests/cli 71 -> 30, tests/testing 66 -> 43, tests/benchmark
#   55 -> 38, tests/docs 31 -> 31, tests/observability 26 -> 16.
# The whole `CI=true bash .ci/run` of a fresh clone, earlier that hour with more load (3.5-4 at
# its start): 546 s before (the lead's run of main) -> 401 s; bootstrap 34 s for .venv (pip 27 s
# with a warm pip cache, the Go build 4 s from Go's build cache: both caches live in the user's
# home and are reused by every clone), 11 s for .venv-3.13.
# What is left is mostly waiting on nsqd itself: a channel created since nsqd started joins its
# queue scan (timeouts, deferred messages) only at the scan's 5 s refresh, which nsqd has no flag
# for, so every test of a timeout or a DPUB on a fresh nsqd waits about 5 s; and two 30 s
# outages (the recovery after one, the Writer's memory through one: issue-mandated). The soak
# test runs 12 s with three cuts (30 s with five before: 32 s of a worker). The three tests
# issue 51 saw fail under load wait on their conditions now: 3 of 3 runs green with two CPU
# hogs beside them (before: the Reader's memory test failed 1 run in 3).
# With extra arguments, both Pythons run exactly those arguments (plus the workers).
#
# pytest's exit status 5 ("no tests collected") counts as a pass only when extra arguments were
# given (a -k or path that selects nothing on one run is the caller's choice); without arguments
# the suite must collect tests.
set -euo pipefail
# Bytecode is cached (in __pycache__, git-ignored) even where the environment says not to: each
# of the 6 workers collects the whole suite and many tests start Python processes, and without
# the cache every one of them compiled the package and the tests again (collection: 5.4 s of CPU
# a process without, 2.3 s with).
unset PYTHONDONTWRITEBYTECODE

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
workers="${NSQ_TEST_WORKERS:-6}"
parallel=()
((workers > 0)) && parallel=(-n "$workers" --dist worksteal)
step pytest "$bin/python" -m pytest "${parallel[@]}" "$@"

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
    if PYTHON="$second" NSQ_VENV=".venv-$minor" NSQ_EXTRAS=test bash test_service/bootstrap.sh; then
        if ((${#pytest_args[@]})); then
            step "pytest-$minor" "$root/.venv-$minor/bin/python" -m pytest "${parallel[@]}" "$@"
        else
            step "pytest-$minor" "$root/.venv-$minor/bin/python" -m pytest "${parallel[@]}" \
                --nsq-backend=real -m "not slow" tests/aio tests/sync tests/http_clients \
                tests/cli tests/observability
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
