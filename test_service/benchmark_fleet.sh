#!/usr/bin/env bash
# The fleet benchmark (issue 21): nsqclient and go-nsq 1.1's Consumer side by side across many
# nsqd found through nsqlookupd (python -m benchmarks.fleet; BENCHMARKS.md).
#
#   bash test_service/benchmark_fleet.sh                                  # every scenario, the issue's sizes
#   bash test_service/benchmark_fleet.sh --scenario low-mif --nsqd 32 --max-in-flight 8 --messages 10
#   bash test_service/benchmark_fleet.sh --clients nsqclient,nsqclient+rdy_strategy=even,go-nsq
#
# Builds go-nsq's side (benchmarks/compare/gobench, whose `fleet` command is fleet.go) through the
# Go module proxy into test_service/.gobench/ (cluster_lib.sh's build_gobench, shared with
# benchmark_compare_go.sh), and the NSQ binaries (build_nsq.sh). GO_MAX_PROCS (default 1) is the
# Go program's GOMAXPROCS. Extra arguments go to `python -m benchmarks.fleet`; results land in
# benchmark-results/fleet-<time>.{json,png} (the plot when matplotlib is installed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=cluster_lib.sh
source "$here/cluster_lib.sh" # find_go, build_gobench
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
bin_dir="$here/.gobench"
export GO_MAX_PROCS="${GO_MAX_PROCS:-1}"

if go_bin="$(find_go)"; then
    build_gobench "$go_bin" "$bin_dir"
else
    echo "benchmark_fleet.sh: Go is not installed: go-nsq's rows will be n/a" >&2
fi

bash "$here/build_nsq.sh" >/dev/null # real nsqd/nsqlookupd for the fleet

stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$repo/benchmark-results"
mkdir -p "$out"
base="$out/fleet-$stamp"
echo "benchmark_fleet.sh: $(uptime)" >&2
cd "$repo" # python -m benchmarks.fleet imports the checkout's benchmarks/ package
status=0
"$python" -m benchmarks.fleet --gobench "$bin_dir/gobench" --go-max-procs "$GO_MAX_PROCS" \
    --json "$base.json" --plot "$base.png" "$@" | tee "$base.md" || status=$?
echo "benchmark_fleet.sh: results in $base.{md,json,png}" >&2
exit "$status"
