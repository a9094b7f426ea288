#!/usr/bin/env bash
# Find or build a free-threaded CPython 3.13 ("python3.13t", built with --disable-gil) and print its
# path (stdout: the path only; progress and errors go to stderr). run_tests.sh runs the thread paths'
# tests on it with the GIL off (issue 49: the blocking publish wing proven without the GIL).
#
# Where it looks, in order: $FT_PYTHON (an explicit interpreter: used as is, or the script fails),
# python3.13t on PATH, then the cache, $NSQ_FT_PREFIX (default ~/.cache/nsqclient-py313t). The cache
# lives outside the checkout, so CI's fresh clones on one machine build it once and then pay nothing
# (a cache hit is one interpreter start, about 0.05 s). An interpreter counts only if it is 3.13,
# free-threaded (Py_GIL_DISABLED), starts with the GIL off, and has ssl, zlib and venv (the client's
# TLS and deflate need them; a build without libssl-dev would silently lack ssl).
#
# Building (about 5 minutes on 2 cores, niced): CPython's source from Debian trixie's python3.13
# source package (apt verifies it against the signed Sources index; the network here reaches
# package registries only), through a private apt configuration in a temporary folder (this
# machine's apt sources and lists are not touched), configured with --disable-gil, installed into
# a staging folder beside the cache and renamed into place, so an interrupted build never leaves a
# half-installed interpreter that looks ready. A lock (flock on $NSQ_FT_PREFIX.lock) makes a second
# caller wait for the first build instead of starting its own. Build dependencies are Debian's
# usual ones (build-essential, libssl-dev, zlib1g-dev, libffi-dev, ...); they are on this machine.
#
# Packages on 3.13t (for the virtualenv run_tests.sh makes): cramjam newer than 2.10.0 builds with a
# PyO3 that refuses 3.13t, and hypothesis from 6.160 on carries a PyO3 part that refuses it too; see
# test_service/constraints-ft.txt. Importing cramjam (python-snappy's backend) turns the GIL back on
# for the whole process, so the client imports it only for a snappy connection.
set -euo pipefail

prefix="${NSQ_FT_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/nsqclient-py313t}"
cached="$prefix/bin/python3.13t"

log() { echo "python_ft.sh: $*" >&2; }

usable() { # usable EXE -> succeeds if EXE is a free-threaded 3.13 that runs with the GIL off
    "$1" -c '
import sys, sysconfig, ssl, zlib, venv
assert sys.version_info[:2] == (3, 13), sys.version
assert sysconfig.get_config_var("Py_GIL_DISABLED"), "not a free-threaded build"
assert not sys._is_gil_enabled(), "the GIL is on at start"
' >/dev/null 2>&1
}

if [[ -n "${FT_PYTHON:-}" ]]; then
    usable "$FT_PYTHON" || { log "FT_PYTHON=$FT_PYTHON is not a free-threaded CPython 3.13 with ssl and zlib"; exit 1; }
    echo "$FT_PYTHON"
    exit 0
fi
if on_path="$(command -v python3.13t 2>/dev/null)" && usable "$on_path"; then
    echo "$on_path"
    exit 0
fi
if [[ -x "$cached" ]] && usable "$cached"; then
    echo "$cached"
    exit 0
fi

mkdir -p "$(dirname "$prefix")"
exec 9>"$prefix.lock"
if ! flock -n 9; then
    log "another build of $prefix is running; waiting for it"
    flock 9
fi
if [[ -x "$cached" ]] && usable "$cached"; then # built while we waited
    echo "$cached"
    exit 0
fi
if [[ -e "$prefix" ]]; then
    log "$prefix exists but holds no usable python3.13t; rebuilding it"
    rm -rf "$prefix"
fi

work="$(mktemp -d)"
stage="$prefix.stage.$$"
trap 'rm -rf "$work" "$stage"' EXIT
fail() { # fail STEP LOG
    log "ERROR: $1 failed; the end of its log:"
    tail -30 "$2" >&2
    exit 1
}

log "building a free-threaded CPython 3.13 into $prefix (about 5 minutes; once per machine)"
command -v apt-get >/dev/null 2>&1 || { log "ERROR: apt-get not found (the source comes from Debian's python3.13 package); set FT_PYTHON=/path/to/python3.13t"; exit 1; }
apt_opts=(
    -o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/apt/none"
    -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache::Archives=$work/apt/archives"
    -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
)
mkdir -p "$work/apt/none" "$work/apt/lists/partial" "$work/apt/archives/partial" "$work/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >"$work/apt/sources.list"
apt-get "${apt_opts[@]}" update >"$work/apt.log" 2>&1 || fail "apt-get update (Debian trixie sources)" "$work/apt.log"
(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only python3.13/trixie) >>"$work/apt.log" 2>&1 ||
    fail "apt-get source python3.13/trixie" "$work/apt.log"
tar -xf "$work"/src/python3.13_*.orig.tar.xz -C "$work/src"
cd "$work"/src/Python-3.13.*
log "configuring and compiling $(basename "$PWD") with --disable-gil"
nice -n 10 ./configure --disable-gil --prefix="$prefix" --with-ensurepip=install >"$work/configure.log" 2>&1 ||
    fail configure "$work/configure.log"
nice -n 10 make -j"$(nproc)" >"$work/make.log" 2>&1 || fail make "$work/make.log"
nice -n 10 make install DESTDIR="$stage" >"$work/install.log" 2>&1 || fail "make install" "$work/install.log"
usable "$stage$cached" 2>/dev/null || PYTHONHOME="$stage$prefix" usable "$stage$cached" ||
    { log "ERROR: the built interpreter is not usable (free-threaded, GIL off, ssl, zlib, venv)"; "$stage$cached" -c 'import ssl, zlib' >&2 || true; exit 1; }
mv "$stage$prefix" "$prefix"
usable "$cached" || { log "ERROR: $cached does not run after install"; exit 1; }
log "built $("$cached" -VV | head -1)"
echo "$cached"
