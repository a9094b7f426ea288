#!/usr/bin/env bash
# Stop the local NSQ cluster started by start.sh and remove its run folder.
#
# Signals only the daemons recorded in the run folder (NSQ_RUN_DIR, default test_service/.run),
# and only while their pid still runs the recorded command line: SIGTERM, wait up to
# NSQ_STOP_TIMEOUT seconds (default 10), then SIGKILL. Harmless when nothing runs.
set -euo pipefail

# shellcheck source=cluster_lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster_lib.sh"

timeout_s="${NSQ_STOP_TIMEOUT:-10}"

if [[ ! -d "$run_dir" ]]; then
    echo "stop.sh: no cluster in $run_dir (nothing to do)"
    exit 0
fi
run_dir="$(cd "$run_dir" && pwd)"
if [[ -z "$(ls -A "$run_dir")" ]]; then
    echo "stop.sh: no cluster in $run_dir (empty folder; nothing to do)"
    exit 0
fi
[[ -f "$run_dir/$run_marker" ]] ||
    die "$run_dir was not made by start.sh (no $run_marker); not touching it"
exec 8>"$run_dir/.lock"
flock 8

stopping=() # daemon folders we signalled
for dir in "$run_dir"/*/; do
    dir="${dir%/}"
    if pid="$(node_pid "$dir")"; then
        echo "stop.sh: stopping $(basename "$dir") (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        stopping+=("$dir")
    fi
done

# still_running -> prints, one per line, the folders in $stopping whose daemon is still alive
still_running() {
    local dir
    for dir in "${stopping[@]}"; do
        if node_pid "$dir" >/dev/null; then echo "$dir"; fi
    done
}

deadline=$((SECONDS + timeout_s))
while [[ -n "$(still_running)" ]] && ((SECONDS < deadline)); do
    sleep 0.1
done
mapfile -t alive < <(still_running)
for dir in "${alive[@]}"; do
    if pid="$(node_pid "$dir")"; then
        echo "stop.sh: $(basename "$dir") did not stop in ${timeout_s}s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
done
deadline=$((SECONDS + 5))
while [[ -n "$(still_running)" ]]; do
    ((SECONDS < deadline)) || die "could not stop: $(still_running | tr '\n' ' ')"
    sleep 0.1
done

rm -rf "$run_dir"
echo "stop.sh: cluster stopped; removed $run_dir"
