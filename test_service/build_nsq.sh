#!/usr/bin/env bash
# Build nsqd, nsqlookupd, nsqadmin, nsq_tail, to_nsq, bench_reader and bench_writer (the version
# pinned in test_service/nsqbuild/go.mod) from the Go module proxy into test_service/.bin/, and
# go-nsq's own test binary (go-nsq.test, the go-nsq version nsq pins) with the certificates its
# tests read (go-nsq/test/) for tests/embedded/test_go_nsq_suite.py.
#
# Idempotent: when the binaries exist and the stamp file records the same pinned sources
# (go.mod + go.sum + tools.go), it exits at once without touching Go.
# NSQ_BIN_DIR=/some/dir (containing nsqd and nsqlookupd) skips building entirely.
# Prints the binaries' folder on its last line of stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod_dir="$here/nsqbuild"
bin_dir="$here/.bin"
stamp="$bin_dir/.stamp"
# nsq_tail and to_nsq: the CLI interop tests (tests/cli); bench_reader (nsq's bench/, not apps/):
# benchmarks/drain_vs_bench_reader.py, one nsqd drained by nsq's own Go reader; bench_writer and
# bench_reader: benchmarks/embedded_vs_nsqd.py, the embedded server against real nsqd
apps=(nsqd nsqlookupd nsqadmin nsq_tail to_nsq bench_reader bench_writer)

die() {
    echo "build_nsq.sh: ERROR: $*" >&2
    exit 1
}

if [[ -n "${NSQ_BIN_DIR:-}" ]]; then
    for app in nsqd nsqlookupd; do
        [[ -x "$NSQ_BIN_DIR/$app" ]] || die "NSQ_BIN_DIR=$NSQ_BIN_DIR has no executable '$app'"
    done
    echo "build_nsq.sh: using NSQ binaries from NSQ_BIN_DIR" >&2
    echo "$NSQ_BIN_DIR"
    exit 0
fi

want_stamp() {
    # Version line (for humans) plus a hash of everything that decides what gets built.
    local version
    version="$(awk '$1 == "require" && $2 == "github.com/nsqio/nsq" { print $3 }' "$mod_dir/go.mod")"
    echo "nsq ${version:-unknown}"
    cat "$mod_dir/go.mod" "$mod_dir/go.sum" "$mod_dir/tools.go" | sha256sum | cut -d' ' -f1
}

up_to_date() {
    local app
    [[ -f "$stamp" ]] || return 1
    for app in "${apps[@]}"; do
        [[ -x "$bin_dir/$app" ]] || return 1
    done
    [[ -x "$bin_dir/go-nsq.test" && -f "$bin_dir/go-nsq/test/server.pem" ]] || return 1
    [[ "$(cat "$stamp")" == "$(want_stamp)" ]]
}

if up_to_date; then
    echo "build_nsq.sh: NSQ binaries are up to date" >&2
    echo "$bin_dir"
    exit 0
fi

mkdir -p "$bin_dir"
# Serialise concurrent builds (e.g. start.sh and a test run at once); re-check after the wait.
exec 9>"$bin_dir/.lock"
flock 9
if up_to_date; then
    echo "build_nsq.sh: NSQ binaries are up to date" >&2
    echo "$bin_dir"
    exit 0
fi

go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
    go_bin=/usr/local/go/bin/go
fi
[[ -n "$go_bin" ]] || die "Go is not installed (no 'go' on PATH or in /usr/local/go/bin).
Install Go >= 1.21 (https://go.dev/doc/install or your distribution's golang package),
or point NSQ_BIN_DIR at a folder holding prebuilt nsqd and nsqlookupd v1.3.0 binaries."

echo "build_nsq.sh: building $(want_stamp | head -n1) with $("$go_bin" version) ..." >&2
tmp_out="$(mktemp -d "$bin_dir/.build.XXXXXX")"
trap 'rm -rf "$tmp_out"' EXIT
start_s=$SECONDS
pkgs=()
for app in "${apps[@]}"; do
    if [[ "$app" == bench_* ]]; then
        pkgs+=("github.com/nsqio/nsq/bench/$app")
    else
        pkgs+=("github.com/nsqio/nsq/apps/$app")
    fi
done
# -mod=readonly: build exactly what the checked-in go.sum pins; never rewrite it here.
if ! (cd "$mod_dir" && GOFLAGS="-mod=readonly -buildvcs=false" "$go_bin" build -o "$tmp_out/" "${pkgs[@]}"); then
    die "'go build' of NSQ failed (see the Go output above). If go.sum is out of date, run
'go mod tidy' in $mod_dir and commit the result."
fi
# go-nsq's test suite, compiled once here (not in the test): the binary, run from a folder
# holding go-nsq's test/ certificates, is what `go test` in go-nsq's checkout would run.
if ! (cd "$mod_dir" && GOFLAGS="-mod=readonly -buildvcs=false" "$go_bin" test -c \
    -o "$tmp_out/go-nsq.test" github.com/nsqio/go-nsq); then
    die "'go test -c' of go-nsq failed (see the Go output above)"
fi
gonsq_src="$(cd "$mod_dir" && GOFLAGS=-mod=readonly "$go_bin" list -m -f '{{.Dir}}' github.com/nsqio/go-nsq)"
[[ -f "$gonsq_src/test/server.pem" ]] || die "no test certificates in $gonsq_src/test"
mkdir -p "$tmp_out/go-nsq/test"
cp "$gonsq_src"/test/* "$tmp_out/go-nsq/test/"
chmod -R u+w "$tmp_out/go-nsq"
for app in "${apps[@]}" go-nsq.test; do
    [[ -x "$tmp_out/$app" ]] || die "go build produced no $app binary"
    mv -f "$tmp_out/$app" "$bin_dir/$app"
done
rm -rf "$bin_dir/go-nsq"
mv "$tmp_out/go-nsq" "$bin_dir/go-nsq"
want_stamp >"$stamp"
echo "build_nsq.sh: built ${apps[*]} go-nsq.test in $((SECONDS - start_s)) s" >&2
"$bin_dir/nsqd" --version >&2
echo "$bin_dir"
