#!/usr/bin/env bash
# The fleet benchmark (issue 21): nsqclient and go-nsq 1.1's Consumer side by side across many
# nsqd found through nsqlookupd (python -m benchmarks.fleet; BENCHMARKS.md).
#
#   bash test_service/benchmark_fleet.sh                                  # every scenario, the issue's sizes
#   bash test_service/benchmark_fleet.sh --scenario low-mif --nsqd 32 --max-in-flight 8 --messages 10
#   bash test_service/benchmark_fleet.sh --clients nsqclient,nsqclient+rdy_strategy=even,go-nsq
#
# Builds go-nsq's side (benchmarks/compare/gobench, whose `fleet` command is fleet.go) through the
# Go module proxy into test_service/.gobench/, as benchmark_compare_go.sh does, and the NSQ
# binaries (build_nsq.sh). GO_MAX_PROCS (default 1) is the Go program's GOMAXPROCS. Extra
# arguments go to `python -m benchmarks.fleet`; results land in
# benchmark-results/fleet-<time>.{json,png} (the plot when matplotlib is installed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
bin_dir="$here/.gobench"
export GO_MAX_PROCS="${GO_MAX_PROCS:-1}"

go_bin="$(command -v go || true)"
[[ -z "$go_bin" && -x /usr/local/go/bin/go ]] && go_bin=/usr/local/go/bin/go
if [[ -n "$go_bin" ]]; then
    mkdir -p "$bin_dir"
    [[ -f "$bin_dir/.gitignore" ]] || echo "*" >"$bin_dir/.gitignore"
    echo "benchmark_fleet.sh: building gobench with $("$go_bin" version)" >&2
    (cd "$repo/benchmarks/compare/gobench" && GOFLAGS="-mod=readonly -buildvcs=false" "$go_bin" build -o "$bin_dir/gobench" .)
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
