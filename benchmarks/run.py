"""``python -m benchmarks.run``: ``nsqclient bench`` with what only the repository has.

Every flag of ``nsqclient bench``, plus ``--consumer-processes N`` (the ``e2e-procs`` and
``drain-procs`` scenarios, :mod:`benchmarks.multiproc`) and ``--chart PATH`` (a PNG,
:mod:`benchmarks.chart`); the JSON report records this checkout's git revision, and the cluster
defaults to ``test_service/.run/cluster.env`` when ``test_service/start.sh`` wrote one.
``bash test_service/benchmark.sh`` runs this against a fresh local cluster.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from nsqclient.benchmark import run_cli
from nsqclient.benchmark.results import ScenarioResult

from . import REPO_ROOT, source_revision

__all__ = ["CLUSTER_ENV", "PROG", "main"]

PROG = "python -m benchmarks.run"
#: what ``test_service/start.sh`` writes: the local cluster's addresses
CLUSTER_ENV = REPO_ROOT / "test_service" / ".run" / "cluster.env"


def main(argv: Sequence[str] | None = None) -> int:
    parser = run_cli.build_parser(PROG)
    parser.add_argument(
        "--consumer-processes",
        type=run_cli.positive_int,
        default=0,
        help="add e2e-procs and drain-procs: N processes, one Reader each, share the channel",
    )
    parser.add_argument("--chart", type=Path, help="write a PNG chart here (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.cluster_env is None and CLUSTER_ENV.is_file():
        args.cluster_env = CLUSTER_ENV
    from .chart import matplotlib_available, write_chart

    if args.chart is not None and not matplotlib_available():
        parser.error("--chart needs matplotlib: pip install matplotlib")
    processes = args.consumer_processes or (2 if args.list else 0)
    extra = {}
    if processes:
        from .multiproc import extra_scenarios

        extra = extra_scenarios(processes)

    def draw(results: list[ScenarioResult]) -> None:
        if args.chart is not None:
            write_chart(args.chart, results, f"nsqclient bench, profile {args.profile}")

    machine = {"nsqclient_source": source_revision()}
    settings = {"consumer_processes": args.consumer_processes}
    return run_cli.run(
        args, parser, PROG, extra=extra, machine=machine, settings=settings, after=draw
    )


if __name__ == "__main__":
    sys.exit(main())
