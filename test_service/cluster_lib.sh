# Shared by start.sh, stop.sh and the benchmark scripts (sourced, not run). Bash,
# `set -euo pipefail` in the callers.
#
# A run folder holds one subfolder per daemon (nsqlookupd, nsqd1, nsqd2, ...) with:
#   pid      the daemon's pid (written by the launcher just before exec)
#   cmdline  its exact argv, NUL-separated, as /proc/<pid>/cmdline shows it
#   *.log    its stdout and stderr
# A pid counts as "ours" only while /proc/<pid>/cmdline still equals that record, so a reused
# pid is never signalled.

ts_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run_dir="${NSQ_RUN_DIR:-$ts_here/.run}"
run_marker=".nsqclient-cluster"

die() {
    echo "$(basename "$0"): ERROR: $*" >&2
    exit 1
}

# node_pid DIR -> prints the pid if the daemon recorded in DIR is alive and ours; else fails.
node_pid() {
    local dir="$1" pid
    [[ -f "$dir/pid" && -f "$dir/cmdline" ]] || return 1
    pid="$(cat "$dir/pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    # Through a pipe: `cmp -s FILE FILE` trusts st_size, which is 0 for every /proc file.
    cat "/proc/$pid/cmdline" 2>/dev/null | cmp -s - "$dir/cmdline" || return 1
    echo "$pid"
}

# http_get URL -> body on stdout; fails on connection errors and HTTP errors. Never uses a proxy.
http_get() {
    if command -v curl >/dev/null 2>&1; then
        curl --noproxy '*' -fsS --max-time 2 "$1" 2>/dev/null
    else
        python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
sys.stdout.write(opener.open(sys.argv[1], timeout=2).read().decode())
PY
    fi
}

# find_go -> prints the go binary (PATH, else /usr/local/go/bin/go); fails when Go is not installed.
find_go() {
    local go_bin
    go_bin="$(command -v go || true)"
    [[ -z "$go_bin" && -x /usr/local/go/bin/go ]] && go_bin=/usr/local/go/bin/go
    [[ -n "$go_bin" ]] || return 1
    echo "$go_bin"
}

# build_gobench GO DIR -> builds go-nsq's side of the comparisons (benchmarks/compare/gobench)
# with GO through the Go module proxy into DIR/gobench; DIR ignores itself in git.
build_gobench() {
    local go_bin="$1" dir="$2"
    mkdir -p "$dir"
    [[ -f "$dir/.gitignore" ]] || echo "*" >"$dir/.gitignore"
    echo "$(basename "$0"): building gobench with $("$go_bin" version)" >&2
    (cd "$ts_here/../benchmarks/compare/gobench" &&
        GOFLAGS="-mod=readonly -buildvcs=false" "$go_bin" build -o "$dir/gobench" .)
}
