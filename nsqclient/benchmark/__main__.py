"""``nsqclient bench`` / ``python -m nsqclient.benchmark``: ``run`` (the default).

``compare`` and ``soak`` are repository tooling, not installed: they only say where to find
them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["MOVED", "main", "moved_message"]

#: subcommand -> what to run instead, from a source checkout of nsqclient
MOVED = {
    "compare": "python -m benchmarks.compare --help",
    "soak": "python -m benchmarks.soak --help",
}


def moved_message(prog: str, command: str) -> str:
    what = "the comparison with other NSQ clients" if command == "compare" else "the soak"
    return (
        f"{prog} {command}: {what} is not part of the installed package. Run it from a source "
        f"checkout of nsqclient, in the checkout's top folder: `{MOVED[command]}` "
        "(BENCHMARKS.md there says how to set it up)."
    )


def main(argv: Sequence[str] | None = None, prog: str = "nsqclient bench") -> int:
    """``prog``: the name usage lines show."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in MOVED:
        print(moved_message(prog, args[0]), file=sys.stderr)
        return 2
    if args and args[0] == "run":
        args = args[1:]
    from .run_cli import main as run_main

    return run_main(args, prog)


if __name__ == "__main__":
    sys.exit(main())
