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
# Then two steps for the thread paths (issue 49; details at the steps below): the blocking
# publish wing's tests on a free-threaded CPython 3.13 with the GIL off (test_service/python_ft.sh
# builds it once into ~/.cache), and its many-thread stress tests on .venv's Python with
# sys.setswitchinterval(1e-6). They are skipped when extra arguments are given.
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

# -- the thread paths without the GIL, and with a tiny switch interval (issue 49) ------------------
# The blocking publish wing (nsqclient/sync: ticket, door, door_batch, reading, publish, future,
# wakes, writer; nsqclient/aio: sharing, replies, window, connection; nsqclient/flow/turns) must
# hold without the GIL: its tests run on a free-threaded CPython 3.13 (test_service/python_ft.sh
# finds it or builds it once into ~/.cache, about 5 minutes; a cache hit costs nothing) in
# .venv-ft (bootstrap.sh with test_service/requirements-ft.txt: about 9 s from pip's wheel cache),
# against real nsqd. NSQCLIENT_TEST_NO_GIL=1 makes every test process (each xdist worker too)
# check that the GIL is off from session start to end (tests/threads_support.py): an import that
# turns it on (cramjam, python-snappy's backend) fails the run, naming the test and the module;
# so the tests that negotiate snappy carry @pytest.mark.snappy and are deselected here. With
# CI=true a missing or unbuildable 3.13t FAILS the run; elsewhere it is a warning.
# Then the wing's many-thread stress tests run once on .venv's Python (which has a GIL) with
# sys.setswitchinterval(1e-6) (NSQCLIENT_TEST_SWITCH_INTERVAL): threads switch about every
# microsecond instead of every 5 ms, so a check-then-set that relies on not being interrupted
# breaks there rather than once a month.
# Both are skipped when extra arguments are given (they choose their own tests).
# Measured on this 2-core machine with 6 workers, shared (load average 2.7-4.9), warm caches,
# .venv-ft made afresh each time, 3 rounds: python_ft.sh 0.1 s (first build: 4.5 min), .venv-ft
# 9 s (cramjam's first build: 1 min 40 s, then from pip's wheel cache), pytest-3.13t 42-52 s
# (263 tests), pytest-switch 14-18 s (16 tests): 70-75 s for both steps.
wing_tests=(
    tests/sync/test_ticket.py tests/sync/test_publish_queue.py tests/sync/test_interleavings.py tests/sync/test_wing_contracts.py tests/sync/test_door_batch.py
    tests/sync/test_wakes.py tests/sync/test_sharing.py tests/sync/test_publish_future.py
    tests/sync/test_nowait_result.py tests/sync/test_publish_deadlines.py
    tests/sync/test_thread_writes.py tests/sync/test_writer.py tests/sync/test_writer_contract.py
    tests/sync/test_faults_sync.py tests/sync/test_close_deadlines.py tests/sync/test_stats.py
    tests/sync/test_recovery.py tests/sync/test_portal.py tests/flow/test_flow_turns.py
    tests/aio/test_connection.py tests/aio/test_writer.py tests/aio/test_writer_zero_loss.py
    tests/aio/test_writer_refusals.py tests/aio/test_publish_contract.py
    tests/aio/test_publish_paths.py tests/test_threads_support.py
    tests/sync/test_thread_kinds.py tests/aio/test_tlswire.py
)
stress_tests=(
    tests/sync/test_thread_writes.py::test_sixteen_threads_publish_through_cuts_a_stall_and_refusals
    tests/sync/test_thread_writes.py::test_a_close_from_another_thread_while_sixteen_publish
    tests/sync/test_thread_writes.py::test_a_refused_publish_among_sixteen_threads_loses_nothing
    tests/sync/test_thread_writes.py::test_coroutines_and_threads_publish_on_one_connection_at_once
    tests/sync/test_nowait_result.py::test_sixteen_threads_waiting_on_futures_lose_nothing
    tests/sync/test_nowait_result.py::test_a_refused_future_among_sixteen_threads_keeps_its_error
    tests/sync/test_nowait_result.py::test_a_close_from_another_thread_while_threads_wait_on_futures
    tests/sync/test_writer.py::test_32_threads_every_message_acknowledged_once
    tests/sync/test_faults_sync.py::test_sync_writer_publishes_through_network_faults
    tests/sync/test_publish_deadlines.py::test_sixteen_threads_each_within_their_timeout
    tests/sync/test_thread_kinds.py::test_sixteen_threads_and_a_coroutine_on_one_connection
)
if ((${#pytest_args[@]})); then
    echo "==> pytest-3.13t, pytest-switch: skipped (extra arguments given)"
else
    ft_python=""
    if ft_python="$(bash test_service/python_ft.sh)" &&
        PYTHON="$ft_python" NSQ_VENV=.venv-ft NSQ_REQUIREMENTS=test_service/requirements-ft.txt \
            bash test_service/bootstrap.sh; then
        step pytest-3.13t env -u PYTHON_GIL NSQCLIENT_TEST_NO_GIL=1 "$root/.venv-ft/bin/python" \
            -m pytest "${parallel[@]}" --nsq-backend=real -m "not snappy" "${wing_tests[@]}"
    else
        message="no free-threaded CPython 3.13 (python3.13t) could be found or built, or its .venv-ft could not be made (see above; FT_PYTHON=/path/to/python3.13t names one)"
        if [[ "${CI:-}" == "true" ]]; then
            echo "==> pytest-3.13t: FAILED: $message"
            failed+=("pytest-3.13t")
        else
            echo "==> pytest-3.13t: WARNING: skipped: $message" >&2
        fi
    fi
    step pytest-switch env NSQCLIENT_TEST_SWITCH_INTERVAL=1e-6 "$bin/python" -m pytest \
        "${parallel[@]}" --nsq-backend=real "${stress_tests[@]}"
fi

if ((${#failed[@]})); then
    echo "run_tests.sh: FAILED: ${failed[*]}"
    exit 1
fi
echo "run_tests.sh: all checks passed"
