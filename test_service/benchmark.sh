#!/usr/bin/env bash
# One command: start a local 3-node NSQ cluster, run the benchmark against it, stop it.
#
#   bash test_service/benchmark.sh --profile quick
#   bash test_service/benchmark.sh --profile pr --chart benchmark-results/pr.png
#
# Every argument goes to `python -m benchmarks.run` (`nsqclient bench`'s flags plus the
# repository's --consumer-processes and --chart; see its --help). Unless you pass
# --markdown/--json yourself, results land in benchmark-results/run-<profile>-<UTC time>.{md,json}.
# The cluster gets its own run folder and ports, so a development cluster from start.sh keeps
# running: NSQ_BENCH_RUN_DIR (default test_service/.run-benchmark), NSQ_BENCH_BASE_PORT (default
# 6150: nsqd on 6150/6250/6350, lookupd on 6160), NSQ_MEM_QUEUE_SIZE (default 10000000).
# The cluster is stopped on exit whatever happens (trap). The exit status is the benchmark's:
# non-zero when any message was lost, duplicated, timed out or not recovered.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"

export NSQ_RUN_DIR="${NSQ_BENCH_RUN_DIR:-$here/.run-benchmark}"
export NSQ_BASE_PORT="${NSQ_BENCH_BASE_PORT:-6150}"
export NSQ_MEM_QUEUE_SIZE="${NSQ_MEM_QUEUE_SIZE:-10000000}"
# nsqd's shortest flush interval, as in `compare` (BENCHMARKS.md): end times are not rounded up
# to the default 250 ms output-buffer tick
export NSQD_EXTRA_ARGS="${NSQD_EXTRA_ARGS:---output-buffer-timeout=25ms}"

stop_cluster() {
    bash "$here/stop.sh" >&2 || echo "benchmark.sh: stopping the cluster failed" >&2
}
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash "$here/start.sh" >&2
# the run folder ignores itself in git (stop.sh removes it whole; this covers a killed run)
[[ -f "$NSQ_RUN_DIR/.gitignore" ]] || echo "*" >"$NSQ_RUN_DIR/.gitignore"

profile="quick"
want_md=1
want_json=1
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
    --profile) profile="${args[i + 1]:-quick}" ;;
    --profile=*) profile="${args[i]#--profile=}" ;;
    --markdown | --markdown=*) want_md=0 ;;
    --json | --json=*) want_json=0 ;;
    esac
done
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$repo/benchmark-results"
mkdir -p "$out"
extra=()
((want_md)) && extra+=(--markdown "$out/run-$profile-$stamp.md")
((want_json)) && extra+=(--json "$out/run-$profile-$stamp.json")

status=0
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$python" -m benchmarks.run \
    --cluster-env "$NSQ_RUN_DIR/cluster.env" "${extra[@]}" "$@" ||
    status=$?
if ((want_md)); then
    echo "benchmark.sh: results in $out/run-$profile-$stamp.{md,json}" >&2
fi
exit "$status"
