#!/usr/bin/env bash
# Serve the documentation site on http://127.0.0.1:8000 (rebuilt on every change of docs/,
# mkdocs.yml or the docstrings). Sets up .venv first, like the other scripts; arguments go to
# `mkdocs serve`, e.g. `bash test_service/docs.sh -a 127.0.0.1:8001`.
# To build the static site instead: .venv/bin/mkdocs build --strict --site-dir /tmp/nsqclient-site
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash test_service/bootstrap.sh
export NO_MKDOCS_2_WARNING=1
if (($#)); then
    exec "$root/.venv/bin/mkdocs" serve "$@"
fi
exec "$root/.venv/bin/mkdocs" serve -a 127.0.0.1:8000
