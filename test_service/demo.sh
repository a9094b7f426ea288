#!/usr/bin/env bash
# Show nsqclient working against a real NSQ cluster, on a fresh machine, in one command:
# bootstrap (virtualenv, packages, NSQ binaries), start a private cluster on free ports,
# run examples/demo.py with the cluster's addresses in its environment, stop the cluster.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash test_service/bootstrap.sh
python="$root/.venv/bin/python"

# A run folder and ports of its own, so the demo never collides with a cluster you already run.
NSQ_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/nsqclient-demo.XXXXXX")"
export NSQ_RUN_DIR
cleanup() {
    bash "$root/test_service/stop.sh" >/dev/null || echo "demo.sh: stopping the cluster failed" >&2
    rm -rf "$NSQ_RUN_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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
set -a
# shellcheck disable=SC1091
. "$NSQ_RUN_DIR/cluster.env"
set +a
echo
"$python" examples/demo.py
