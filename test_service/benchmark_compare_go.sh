#!/usr/bin/env bash
# Build our go-nsq (v1.1.0) benchmark program (benchmarks/compare/gobench) and compare it with
# nsqclient, same scenarios, same harness, same nsqd flags (see BENCHMARKS.md).
#
#   bash test_service/benchmark_compare_go.sh                    # GOMAXPROCS=1
#   GO_MAX_PROCS=2 bash test_service/benchmark_compare_go.sh --repeats 5
#
# GO_MAX_PROCS (default 1) is passed to the Go program, which calls runtime.GOMAXPROCS with it
# and reports the effective value in every result. The binary is built through the Go module proxy
# into test_service/.gobench/ (a folder that ignores itself in git). Extra arguments go to
# `python -m benchmarks.compare`; results land in benchmark-results/compare-go-*.{md,json}.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=cluster_lib.sh
source "$here/cluster_lib.sh" # find_go, build_gobench, die
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
bin_dir="$here/.gobench"
export GO_MAX_PROCS="${GO_MAX_PROCS:-1}"

go_bin="$(find_go)" || die "Go is not installed"
build_gobench "$go_bin" "$bin_dir"

bash "$here/build_nsq.sh" >/dev/null # nsqd for the harness's fresh daemons

effective="$("$bin_dir/gobench" list | "$python" -c 'import json,sys; print(json.load(sys.stdin)["gomaxprocs"])')"
echo "benchmark_compare_go.sh: effective GOMAXPROCS of the Go program: $effective" >&2

stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$repo/benchmark-results"
mkdir -p "$out"
base="$out/compare-go-gomaxprocs$effective-$stamp"
status=0
cd "$repo" # python -m benchmarks.compare imports the checkout's benchmarks/ package
"$python" -m benchmarks.compare \
    --clients nsqclient-aio,go-nsq \
    --scenarios pub,pub-async,mpub,e2e,drain \
    --gobench "$bin_dir/gobench" \
    --markdown "$base.md" --json "$base.json" "$@" || status=$?
echo "benchmark_compare_go.sh: GOMAXPROCS=$effective; results in $base.{md,json}" >&2
exit "$status"
