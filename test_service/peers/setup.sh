#!/usr/bin/env bash
# Create one virtualenv per peer NSQ client for the comparison (`python -m benchmarks.compare`,
# drivers in benchmarks/compare/drivers/), idempotently.
#
#   bash test_service/peers/setup.sh                 # every peer
#   bash test_service/peers/setup.sh asyncnsq pynsq  # some of them
#
# Venvs live in test_service/.peers/<name>/ (NSQ_PEERS_DIR overrides), a folder that ignores
# itself in git. A venv is rebuilt only when its pinned requirement line below changes (the line
# is stored in <venv>/.nsqbench-stamp). Needs network access to PyPI only.
#
# Peers (pinned so that results are reproducible):
#   asyncnsq  2.0.1  asyncio; declares Python >= 3.12, installed with --ignore-requires-python
#   pynsq     0.9.1  tornado IOLoop (the official NSQ Python client)
#   gnsq      1.0.2  gevent
#   ansq      0.3.0  asyncio (aiohttp, attrs)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peers_dir="${NSQ_PEERS_DIR:-$here/../.peers}"
python="${PYTHON:-python3}"

declare -A requirements=(
    [asyncnsq]="asyncnsq==2.0.1 httpx python-snappy"
    [pynsq]="pynsq==0.9.1 tornado==6.4.2"
    [gnsq]="gnsq==1.0.2 gevent blinker six urllib3"
    [ansq]="ansq==0.3.0 aiohttp attrs"
)
declare -A pip_flags=(
    [asyncnsq]="--ignore-requires-python"
    [pynsq]=""
    [gnsq]=""
    [ansq]=""
)

die() {
    echo "peers/setup.sh: ERROR: $*" >&2
    exit 1
}

names=("$@")
((${#names[@]})) || names=(asyncnsq pynsq gnsq ansq)

mkdir -p "$peers_dir"
peers_dir="$(cd "$peers_dir" && pwd)"
[[ -f "$peers_dir/.gitignore" ]] || echo "*" >"$peers_dir/.gitignore"

status=0
for name in "${names[@]}"; do
    [[ -n "${requirements[$name]+x}" ]] || die "unknown peer '$name' (known: ${!requirements[*]})"
    venv="$peers_dir/$name"
    stamp="$venv/.nsqbench-stamp"
    want="${requirements[$name]} ${pip_flags[$name]}"
    if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        echo "peers/setup.sh: $name is up to date ($venv)" >&2
        continue
    fi
    echo "peers/setup.sh: creating $venv ($want)" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # shellcheck disable=SC2086  # the flag and requirement lists are word lists
    if "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        ${pip_flags[$name]} ${requirements[$name]}; then
        echo "$want" >"$stamp"
        echo "peers/setup.sh: $name ready" >&2
    else
        echo "peers/setup.sh: $name FAILED to install; compare will mark it n/a" >&2
        rm -rf "$venv"
        status=1
    fi
done
echo "$peers_dir"
exit "$status"
