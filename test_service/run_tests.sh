#!/usr/bin/env bash
# The whole check, as CI runs it: bootstrap, then ruff, mypy and pytest (extra arguments go to
# pytest, e.g. `bash test_service/run_tests.sh -k tls -x`). Every step runs even if an earlier one
# failed, so one run shows all problems; the exit status is non-zero if any step failed.
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
    if "$@"; then
        echo "==> $name: ok"
    else
        echo "==> $name: FAILED (exit $?)"
        failed+=("$name")
    fi
}

step ruff "$bin/ruff" check nsqclient tests test_service benchmarks
step mypy "$bin/mypy"
step pytest "$bin/python" -m pytest "$@"

if ((${#failed[@]})); then
    echo "run_tests.sh: FAILED: ${failed[*]}"
    exit 1
fi
echo "run_tests.sh: all checks passed"
