"""``python -m benchmarks.compare``: see :mod:`benchmarks.compare.harness`."""

from __future__ import annotations

import sys

from .harness import main

if __name__ == "__main__":
    sys.exit(main())
