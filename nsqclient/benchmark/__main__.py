"""``nsqclient-benchmark`` / ``python -m nsqclient.benchmark``: ``run`` (default), ``compare``
or ``soak``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "compare":
        from .compare import main as compare_main

        return compare_main(args[1:])
    if args and args[0] == "soak":
        from .soak import main as soak_main

        return soak_main(args[1:])
    if args and args[0] == "run":
        args = args[1:]
    from .run_cli import main as run_main

    return run_main(args)


if __name__ == "__main__":
    sys.exit(main())
