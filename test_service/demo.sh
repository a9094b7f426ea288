#!/usr/bin/env bash
# Show nsqclient working against an NSQ cluster, on a fresh machine, in one command:
# set up the virtualenv, start a private cluster (nsqlookupd + 3 nsqd) on free ports, run
# examples/demo.py with the cluster's addresses in its environment, stop the cluster.
#
#   bash test_service/demo.sh              # real nsqd if it can be built or found, else embedded
#   bash test_service/demo.sh --embedded   # nsqclient's embedded server (needs only Python)
#   bash test_service/demo.sh --real       # real nsqd or fail
#
# The backend can also be chosen with NSQCLIENT_BACKEND=real|embedded|auto (flags win).
# "Real" means nsqd/nsqlookupd from NSQ_BIN_DIR or test_service/.bin, built by
# test_service/build_nsq.sh when Go is available. Without them the cluster is
# `python -m nsqclient.testing --lookupd --nsqd-count 3`, in one process. Safe to rerun: every
# run has its own folder and ports, and stops what it started whatever happens.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="$root/.venv/bin/python"

backend="${NSQCLIENT_BACKEND:-auto}"
for arg in "$@"; do
    case "$arg" in
    --embedded) backend=embedded ;;
    --real) backend=real ;;
    --auto) backend=auto ;;
    -h | --help)
        sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "demo.sh: unknown argument '$arg' (try --help)" >&2
        exit 2
        ;;
    esac
done
case "$backend" in
real | embedded | auto) ;;
*)
    echo "demo.sh: NSQCLIENT_BACKEND must be real, embedded or auto (not '$backend')" >&2
    exit 2
    ;;
esac

python_ready() { # the virtualenv can run the demo (an editable install follows the source)
    [[ -x "$python" ]] && "$python" -c 'import nsqclient.aio, nsqclient.sync, nsqclient.testing.embedded' 2>/dev/null
}

if [[ "$backend" == embedded ]]; then
    # Only the Python side is needed; bootstrap.sh would also build the NSQ binaries (Go).
    if ! python_ready; then
        echo "demo.sh: setting up the virtualenv (the NSQ binaries are not needed)" >&2
        bash test_service/bootstrap.sh || true # its last step, the binaries, may fail without Go
        python_ready || {
            echo "demo.sh: ERROR: could not set up $root/.venv (see test_service/bootstrap.sh)" >&2
            exit 1
        }
    fi
elif bash test_service/bootstrap.sh; then
    backend=real
elif [[ "$backend" == real ]]; then
    echo "demo.sh: ERROR: no real NSQ binaries (see above); try --embedded" >&2
    exit 1
elif python_ready; then
    echo "demo.sh: no NSQ binaries (see above): using nsqclient's embedded server instead" >&2
    backend=embedded
else
    echo "demo.sh: ERROR: could not set up $root/.venv (see test_service/bootstrap.sh)" >&2
    exit 1
fi

# A run folder and ports of its own, so the demo never collides with a cluster you already run.
NSQ_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/nsqclient-demo.XXXXXX")"
export NSQ_RUN_DIR
embedded_pid=""
cleanup() {
    if [[ -n "$embedded_pid" ]]; then
        kill -TERM "$embedded_pid" 2>/dev/null || true
        wait "$embedded_pid" 2>/dev/null || echo "demo.sh: the embedded server exited uncleanly" >&2
    elif [[ -f "$NSQ_RUN_DIR/.nsqclient-cluster" ]]; then
        bash "$root/test_service/stop.sh" >/dev/null || echo "demo.sh: stopping the cluster failed" >&2
    fi
    rm -rf "$NSQ_RUN_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ "$backend" == real ]]; then
    read -r -a ports < <("$python" - <<'PY'
# Eight distinct free ports: lookupd TCP/HTTP, then TCP/HTTP for each of three nsqd.
import socket
socks = []
for _ in range(8):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
    )
    export NSQLOOKUPD_TCP_PORT="${ports[0]}" NSQLOOKUPD_HTTP_PORT="${ports[1]}"
    export NSQD1_TCP_PORT="${ports[2]}" NSQD1_HTTP_PORT="${ports[3]}"
    export NSQD2_TCP_PORT="${ports[4]}" NSQD2_HTTP_PORT="${ports[5]}"
    export NSQD3_TCP_PORT="${ports[6]}" NSQD3_HTTP_PORT="${ports[7]}"
    # HTTPS stays unused without TLS; move it out of the default range anyway.
    export NSQD1_HTTPS_PORT=0 NSQD2_HTTPS_PORT=0 NSQD3_HTTPS_PORT=0
    bash test_service/start.sh
    echo "demo.sh: real nsqd $("$(bash test_service/build_nsq.sh 2>/dev/null | tail -n 1)/nsqd" --version 2>&1 | head -n 1)"
else
    # Free ports (0), one process; --env-file appears once lookupd lists every nsqd.
    "$python" -m nsqclient.testing --lookupd --nsqd-count 3 \
        --tcp-address 127.0.0.1:0 --http-address 127.0.0.1:0 \
        --lookupd-tcp-listen 127.0.0.1:0 --lookupd-http-listen 127.0.0.1:0 \
        --env-file "$NSQ_RUN_DIR/cluster.env" >"$NSQ_RUN_DIR/embedded.log" 2>&1 &
    embedded_pid=$!
    deadline=$((SECONDS + 30))
    until [[ -f "$NSQ_RUN_DIR/cluster.env" ]]; do
        if ! kill -0 "$embedded_pid" 2>/dev/null || ((SECONDS >= deadline)); then
            echo "demo.sh: ERROR: the embedded server did not start:" >&2
            cat "$NSQ_RUN_DIR/embedded.log" >&2
            exit 1
        fi
        sleep 0.05
    done
    echo "demo.sh: nsqclient's embedded nsqd/nsqlookupd (a test server, not a replacement for nsqd):"
    sed 's/^/    /' "$NSQ_RUN_DIR/embedded.log"
fi

set -a
# shellcheck disable=SC1091
. "$NSQ_RUN_DIR/cluster.env"
set +a
echo
"$python" examples/demo.py
