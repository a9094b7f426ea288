"""``nsqclient-benchmark`` / ``python -m nsqclient.benchmark``: ``run`` (the default) or
``soak``.

``compare`` (the comparison with other clients) is repository tooling, not installed: it only
says where to find it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["COMPARE_MOVED", "main"]

COMPARE_MOVED = (
    "nsqclient-benchmark compare: the comparison with other NSQ clients is not part of the "
    "installed package. Run it from a source checkout of nsqclient, in the checkout's top "
    "folder: `python -m benchmarks.compare --help` (BENCHMARKS.md there says how to set up the "
    "peer clients)."
)


def main(argv: Sequence[str] | None = None, prog: str = "nsqclient-benchmark") -> int:
    """``prog``: the name usage lines show (``nsqclient bench`` when run through nsqclient)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "compare":
        print(COMPARE_MOVED.replace("nsqclient-benchmark", prog, 1), file=sys.stderr)
        return 2
    if args and args[0] == "soak":
        from .soak import main as soak_main

        return soak_main(args[1:], f"{prog} soak")
    if args and args[0] == "run":
        args = args[1:]
    from .run_cli import main as run_main

    return run_main(args, prog)


if __name__ == "__main__":
    sys.exit(main())
