"""The repository's benchmarks (not installed with nsqclient; BENCHMARKS.md describes them all).

* ``run.py``: ``nsqclient bench`` with the repository-only parts: the multi-process scenarios
  (``multiproc.py``), a PNG chart (``chart.py``) and the checkout's git revision in the report
  (``python -m benchmarks.run``, ``bash test_service/benchmark.sh``).
* ``soak.py``: hours of use in minutes through a link that keeps breaking
  (``python -m benchmarks.soak``).
* ``compare/``: nsqclient beside other NSQ clients (``python -m benchmarks.compare``).
* ``fleet/``: consumers across many nsqd found through nsqlookupd, nsqclient beside go-nsq
  (``python -m benchmarks.fleet``, ``bash test_service/benchmark_fleet.sh``).
* ``sync_bench.py``: the blocking facade against the asyncio core on one nsqd.
* ``blocking.py``: the blocking face against a bare socket per thread (its floor), with
  ``--before`` another checkout's in the same run.
* ``decoder_bench.py``, ``flow_bench.py``: micro-benchmarks of the frame decoder and of the RDY
  controller's per-message path.

The benchmark of nsqclient itself against a cluster ships with the package (``nsqclient bench``,
:mod:`nsqclient.benchmark`); the repository's paths live here, never in the installed package:
importing this package points ``$NSQ_BIN_DIR`` (unless set) at the checkout's
``test_service/.bin``, where ``bash test_service/build_nsq.sh`` puts nsqd and nsqlookupd.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["CHECKOUT_BIN_DIR", "REPO_ROOT", "source_revision"]

REPO_ROOT = Path(__file__).resolve().parent.parent  # benchmarks/ -> the checkout
CHECKOUT_BIN_DIR = REPO_ROOT / "test_service" / ".bin"

if (CHECKOUT_BIN_DIR / "nsqd").is_file() and not os.environ.get("NSQ_BIN_DIR"):
    os.environ["NSQ_BIN_DIR"] = str(CHECKOUT_BIN_DIR)


def source_revision(package: Path | None = None, root: Path = REPO_ROOT) -> str | None:
    """``<commit>[-dirty]`` of the nsqclient being measured (``package``: the imported one's
    folder) when it is this checkout's, an editable install, else None: a wheel installed
    elsewhere is not the checkout's code, nor is a copy git does not track."""
    if package is None:
        import nsqclient

        package = Path(nsqclient.__file__).resolve().parent
    if not package.resolve().is_relative_to(root.resolve()):
        return None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(package), *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()

    try:
        git("ls-files", "--error-unmatch", "__init__.py")
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}-dirty" if dirty else commit
