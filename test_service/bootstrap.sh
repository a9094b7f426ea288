#!/usr/bin/env bash
# Make this checkout ready for tests and demos: a Python >= 3.11 virtualenv in .venv with the
# package installed editable (with the dev extras), and the NSQ binaries in test_service/.bin.
#
# Safe to rerun: pip runs only when pyproject.toml changed since the last install (a stamp in
# .venv records its hash), and build_nsq.sh exits at once when the binaries are current.
# PYTHON=/path/to/python3.x picks the interpreter used to create the virtualenv;
# NSQ_VENV=.venv-3.13 (relative to the checkout, or absolute) makes another one (run_tests.sh
# uses that for its second Python). A virtualenv made with another Python than PYTHON (another
# version, or the same version with or without the GIL) is remade.
# NSQ_EXTRAS=test installs the test extras only (default dev: also ruff, mypy, the docs and the
# charts); run_tests.sh's second Python only runs tests (11.9 s against 21.6 s with a warm pip
# cache, 2026-12-07).
# NSQ_REQUIREMENTS=test_service/requirements-ft.txt installs the package (editable, no extras) with
# that requirements file instead (run_tests.sh's free-threaded step: what its tests need, in
# versions that install on CPython 3.13t).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${NSQ_VENV:-.venv}"
[[ "$venv" == /* ]] || venv="$root/$venv"
stamp="$venv/.nsqclient-bootstrap"

die() {
    echo "bootstrap.sh: ERROR: $*" >&2
    exit 1
}

python_ok() { # python_ok EXE -> succeeds if EXE runs and is Python >= 3.11
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

same_python() { # same_python VENV_PYTHON EXE -> succeeds if both are the same X.Y.Z (and ABI: "t")
    local v='import sys; print(sys.version.split()[0] + sys.abiflags)'
    [[ "$("$1" -c "$v" 2>/dev/null)" == "$("$2" -c "$v" 2>/dev/null)" ]]
}

if [[ -x "$venv/bin/python" && -n "${PYTHON:-}" ]] && ! same_python "$venv/bin/python" "$PYTHON"; then
    echo "bootstrap.sh: $venv was made with another Python than $PYTHON; recreating it" >&2
    rm -rf "$venv"
fi
if [[ ! -x "$venv/bin/python" ]] || ! python_ok "$venv/bin/python"; then
    python=""
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [[ -n "$candidate" ]] || continue
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            python="$(command -v "$candidate")"
            break
        fi
    done
    [[ -n "$python" ]] || die "nsqclient needs Python >= 3.11 and none was found
(tried \$PYTHON, python3.13, python3.12, python3.11, python3). Install one, or set PYTHON=/path/to/python3.11."
    if [[ -e "$venv" ]]; then
        echo "bootstrap.sh: $venv is unusable (missing or older than Python 3.11); recreating it" >&2
        rm -rf "$venv"
    fi
    echo "bootstrap.sh: creating $venv with $("$python" --version)" >&2
    "$python" -m venv "$venv" || die "could not create a virtualenv with $python (on Debian: apt-get install python3-venv)"
fi

extras="${NSQ_EXTRAS:-dev}"
install=(-e ".[$extras]")
inputs=("$root/pyproject.toml")
what="$extras"
if [[ -n "${NSQ_REQUIREMENTS:-}" ]]; then
    requirements="$NSQ_REQUIREMENTS"
    [[ "$requirements" == /* ]] || requirements="$root/$requirements"
    [[ -f "$requirements" ]] || die "NSQ_REQUIREMENTS=$NSQ_REQUIREMENTS: no such file"
    install=(-e . -r "$requirements")
    inputs+=("$requirements")
    what="-r $NSQ_REQUIREMENTS"
fi
want="$(cat "${inputs[@]}" | sha256sum | cut -d' ' -f1) $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0] + sys.abiflags)') $what"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "bootstrap.sh: Python packages are up to date" >&2
else
    echo "bootstrap.sh: installing nsqclient (editable) with ${install[*]:1} ..." >&2
    (cd "$root" && "$venv/bin/python" -m pip install --disable-pip-version-check -q "${install[@]}") ||
        die "pip install ${install[*]} failed"
    echo "$want" >"$stamp"
fi

bash "$root/test_service/build_nsq.sh" >/dev/null
echo "bootstrap.sh: ready ($venv, NSQ binaries via test_service/build_nsq.sh)" >&2
