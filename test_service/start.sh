#!/usr/bin/env bash
# Start a local NSQ cluster on 127.0.0.1: one nsqlookupd and three nsqd registered with it.
#
#   bash test_service/start.sh        # builds the binaries first if needed (build_nsq.sh)
#   set -a; . test_service/.run/cluster.env; set +a
#   bash test_service/stop.sh
#
# Idempotent: daemons already running from this run folder are left alone (a second run just
# prints the cluster). Everything (pids, logs, data) lives in the run folder.
#
# Environment (all optional):
#   NSQ_RUN_DIR            run folder (default test_service/.run)
#   NSQ_BASE_PORT          default 4150: nsqd i (1..3) uses BASE+100*(i-1) for TCP, +1 HTTP,
#                          +2 HTTPS (unused without TLS); lookupd uses BASE+10 TCP, BASE+11 HTTP
#   NSQLOOKUPD_TCP_PORT, NSQLOOKUPD_HTTP_PORT, NSQD<i>_TCP_PORT, NSQD<i>_HTTP_PORT,
#   NSQD<i>_HTTPS_PORT     override single ports
#   NSQ_NSQD_COUNT         number of nsqd (default 3)
#   NSQ_MEM_QUEUE_SIZE     nsqd --mem-queue-size (default 1000000)
#   NSQD_EXTRA_ARGS        more nsqd flags, space-separated (e.g. --output-buffer-timeout=25ms)
#   NSQ_START_TIMEOUT      seconds to wait for the cluster (default 30)
#   NSQ_BIN_DIR            use prebuilt nsqd/nsqlookupd from this folder
set -euo pipefail

# shellcheck source=cluster_lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster_lib.sh"

base="${NSQ_BASE_PORT:-4150}"
count="${NSQ_NSQD_COUNT:-3}"
mem_queue="${NSQ_MEM_QUEUE_SIZE:-1000000}"
timeout_s="${NSQ_START_TIMEOUT:-30}"
[[ "$base" =~ ^[0-9]+$ && "$count" =~ ^[1-9][0-9]*$ ]] || die "NSQ_BASE_PORT / NSQ_NSQD_COUNT must be numbers"

lookupd_tcp="${NSQLOOKUPD_TCP_PORT:-$((base + 10))}"
lookupd_http="${NSQLOOKUPD_HTTP_PORT:-$((base + 11))}"
nsqd_tcp=()
nsqd_http=()
nsqd_https=()
for ((i = 1; i <= count; i++)); do
    var="NSQD${i}_TCP_PORT"
    nsqd_tcp+=("${!var:-$((base + 100 * (i - 1)))}")
    var="NSQD${i}_HTTP_PORT"
    nsqd_http+=("${!var:-$((base + 100 * (i - 1) + 1))}")
    var="NSQD${i}_HTTPS_PORT"
    nsqd_https+=("${!var:-$((base + 100 * (i - 1) + 2))}")
done

bin_dir="$(bash "$ts_here/build_nsq.sh" | tail -n 1)"
[[ -x "$bin_dir/nsqd" && -x "$bin_dir/nsqlookupd" ]] || die "no NSQ binaries in '$bin_dir'"

mkdir -p "$run_dir"
run_dir="$(cd "$run_dir" && pwd)"
if [[ ! -f "$run_dir/$run_marker" ]]; then
    [[ -z "$(ls -A "$run_dir")" ]] || die "$run_dir exists, is not empty and was not made by start.sh"
    echo "nsqclient local NSQ cluster; remove with test_service/stop.sh" >"$run_dir/$run_marker"
fi
exec 8>"$run_dir/.lock"
flock 8 # one start.sh/stop.sh at a time per run folder

deadline=$((SECONDS + timeout_s))
started=()

fail() {
    echo "start.sh: ERROR: $*" >&2
    local log
    for log in "$run_dir"/*/*.log; do
        [[ -f "$log" ]] || continue
        echo "--- last lines of $log ---" >&2
        tail -n 15 "$log" >&2
    done
    if ((${#started[@]})); then
        echo "start.sh: stopping the whole cluster in $run_dir" >&2
        flock -u 8
        NSQ_RUN_DIR="$run_dir" bash "$ts_here/stop.sh" >&2 || true
    fi
    exit 1
}

# launch NAME BINARY ARGS... : start one daemon unless it already runs from this run folder.
launch() {
    local name="$1"
    shift
    local dir="$run_dir/$name" pid
    mkdir -p "$dir"
    if pid="$(node_pid "$dir")"; then
        printf '%s\0' "$@" | cmp -s - "$dir/cmdline" ||
            die "$name already runs (pid $pid) with other settings; run test_service/stop.sh first"
        echo "start.sh: $name already running (pid $pid)" >&2
        return 0
    fi
    rm -f "$dir/pid"
    printf '%s\0' "$@" >"$dir/cmdline"
    # setsid: own session, so terminal signals and the caller's exit do not reach the daemon.
    # The inner bash writes its own pid, then exec keeps that pid for the daemon. 8>&-: the
    # daemon must not inherit (and so hold) the run folder's lock.
    setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$dir/pid" "$@" \
        >>"$dir/$name.log" 2>&1 </dev/null 8>&- &
    started+=("$name")
    until pid="$(node_pid "$dir")"; do
        if [[ -f "$dir/pid" ]] && ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            fail "$name exited at once"
        fi
        ((SECONDS < deadline)) || fail "$name did not start within ${timeout_s}s"
        sleep 0.05
    done
    echo "start.sh: started $name (pid $pid)" >&2
}

# wait_ping NAME HTTP_PORT
wait_ping() {
    local name="$1" port="$2"
    until http_get "http://127.0.0.1:$port/ping" >/dev/null; do
        node_pid "$run_dir/$name" >/dev/null || fail "$name exited while starting"
        ((SECONDS < deadline)) || fail "$name did not answer http://127.0.0.1:$port/ping within ${timeout_s}s"
        sleep 0.1
    done
}

launch nsqlookupd "$bin_dir/nsqlookupd" \
    "--tcp-address=127.0.0.1:$lookupd_tcp" \
    "--http-address=127.0.0.1:$lookupd_http" \
    "--broadcast-address=127.0.0.1"
wait_ping nsqlookupd "$lookupd_http"

for ((i = 1; i <= count; i++)); do
    mkdir -p "$run_dir/nsqd$i/data"
    launch "nsqd$i" "$bin_dir/nsqd" \
        "--tcp-address=127.0.0.1:${nsqd_tcp[i - 1]}" \
        "--http-address=127.0.0.1:${nsqd_http[i - 1]}" \
        "--https-address=127.0.0.1:${nsqd_https[i - 1]}" \
        "--broadcast-address=127.0.0.1" \
        "--lookupd-tcp-address=127.0.0.1:$lookupd_tcp" \
        "--data-path=$run_dir/nsqd$i/data" \
        "--mem-queue-size=$mem_queue" \
        "--node-id=$i" \
        ${NSQD_EXTRA_ARGS:-}
done
for ((i = 1; i <= count; i++)); do
    wait_ping "nsqd$i" "${nsqd_http[i - 1]}"
done

# Every nsqd must be registered with lookupd before clients are pointed at it.
until {
    nodes="$(http_get "http://127.0.0.1:$lookupd_http/nodes" || true)"
    missing=0
    for port in "${nsqd_tcp[@]}"; do
        grep -q "\"tcp_port\":$port[,}]" <<<"$nodes" || missing=1
    done
    ((missing == 0))
}; do
    ((SECONDS < deadline)) || fail "nsqlookupd does not list all nsqd within ${timeout_s}s: $nodes"
    sleep 0.1
done

join() {
    local IFS=,
    echo "$*"
}
tcp_list=()
http_list=()
for ((i = 0; i < count; i++)); do
    tcp_list+=("127.0.0.1:${nsqd_tcp[i]}")
    http_list+=("127.0.0.1:${nsqd_http[i]}")
done
cat >"$run_dir/cluster.env.tmp" <<EOF
NSQD_TCP_ADDRESSES=$(join "${tcp_list[@]}")
NSQD_HTTP_ADDRESSES=$(join "${http_list[@]}")
NSQLOOKUPD_TCP_ADDRESSES=127.0.0.1:$lookupd_tcp
NSQLOOKUPD_HTTP_ADDRESSES=127.0.0.1:$lookupd_http
NSQ_RUN_DIR=$run_dir
EOF
mv "$run_dir/cluster.env.tmp" "$run_dir/cluster.env"

echo "NSQ cluster is up (run folder: $run_dir)"
echo "  nsqlookupd  tcp 127.0.0.1:$lookupd_tcp  http 127.0.0.1:$lookupd_http"
for ((i = 0; i < count; i++)); do
    echo "  nsqd$((i + 1))       tcp ${tcp_list[i]}  http ${http_list[i]}"
done
echo "Environment: $run_dir/cluster.env  (set -a; . $run_dir/cluster.env; set +a)"
if [[ "$run_dir" == "$ts_here/.run" ]]; then
    echo "Stop with:   bash $ts_here/stop.sh"
else
    echo "Stop with:   NSQ_RUN_DIR=$run_dir bash $ts_here/stop.sh"
fi
