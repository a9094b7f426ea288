"""``nsqclient worker MODULE:FUNCTION``: run a handler in supervised child processes, as
``celery worker`` or ``dramatiq`` do (see :mod:`nsqclient.worker`).

The flags are the Reader's, named as the other commands name them (addresses with their
environment fallbacks, ``--tls-*``, ``--opt NAME=VALUE``), plus the worker's own. Unlike
``tail``, nothing is checked for reachability first: a service may start before its nsqd, and
its Readers connect when it comes. Logging goes to stderr at ``--log-level`` (default INFO;
``--debug`` is DEBUG), every line naming its process (``[worker 2 pid 4711]``).

Exit codes: 0 after a graceful stop (SIGTERM, SIGINT); 1 an error, or a stop that had to kill
a child; 2 bad usage, including a target that cannot be imported; 3 children kept dying during
start-up; 130 after a second SIGINT (stopped at once).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from . import _common

__all__ = ["EXIT_START_FAILURES", "add_parser"]

EXIT_START_FAILURES = 3

EXAMPLES = """\
examples:
  nsqclient worker tasks:handle --topic events --channel billing
      one process per CPU, each handling one message at a time (tasks.py, function handle)
  nsqclient worker tasks:fetch --topic urls --channel crawl --processes 2 --threads 32
      a handler that waits on I/O: 32 threads in each of 2 processes
  nsqclient worker tasks:handle --topic events --channel billing \\
      --lookupd-http-address lookupd:4161 --health-address :8080 --max-messages-per-child 10000

SIGTERM or Ctrl-C stops gracefully (running handlers finish, the rest goes back to nsqd at
once); a second Ctrl-C stops at once. SIGHUP replaces every child; SIGTTIN/SIGTTOU add or
remove one. Exit codes: 0 stopped gracefully, 1 error, 2 bad usage or target, 3 children kept
failing at start-up, 130 stopped at once.
"""

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "worker",
        parents=[parent],
        help="run a handler in supervised processes (like celery worker, dramatiq)",
        description="Consume a topic/channel with MODULE:FUNCTION in supervised child "
        "processes: each has its own Reader, the supervisor keeps --processes of them running, "
        "replaces the ones that die, and stops them all gracefully on SIGTERM.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "target",
        metavar="MODULE:FUNCTION",
        help="the handler: a function taking one message (plain or async def), imported with "
        "the current directory on sys.path",
    )
    p.add_argument("--topic", required=True, type=_common.topic_name, help="topic to consume")
    p.add_argument("--channel", required=True, type=_common.channel_name, help="channel")
    g = p.add_argument_group("processes")
    g.add_argument(
        "--processes",
        type=_common.positive_int,
        metavar="N",
        help="child processes (default: the number of CPUs)",
    )
    g.add_argument(
        "--threads",
        type=_common.positive_int,
        metavar="M",
        help="a plain function's handler threads per process (default 1)",
    )
    g.add_argument(
        "--concurrency",
        type=_common.positive_int,
        metavar="K",
        help="an async def handler's coroutines at once per process (default 10)",
    )
    g.add_argument(
        "--max-in-flight",
        type=_common.positive_int,
        metavar="X",
        help="messages in flight per process (default: the handlers at once, plus a quarter)",
    )
    g.add_argument(
        "--max-messages-per-child",
        type=_common.positive_int,
        metavar="X",
        help="replace a child after X messages (celery's max-tasks-per-child)",
    )
    g.add_argument(
        "--max-memory-per-child",
        type=_common.positive_int,
        metavar="MIB",
        help="replace a child whose resident memory passes MIB MiB",
    )
    g.add_argument(
        "--health-address",
        metavar="HOST:PORT",
        help="serve GET /healthz, /readyz and /stats there (:8080 for every interface)",
    )
    g.add_argument(
        "--init",
        metavar="MODULE:FUNCTION",
        help="called with the child's index first in every child (open per-process resources)",
    )
    g.add_argument(
        "--log-level",
        type=str.upper,
        choices=_LEVELS,
        help="INFO by default (--debug: DEBUG)",
    )
    _common.add_address_flags(p, ["nsqd_tcp", "lookupd_http"])
    _common.add_connection_flags(p)
    p.set_defaults(run=run, own_logging=True)


def run(args: argparse.Namespace) -> int:
    from .. import worker
    from ..errors import WorkerError
    from ..worker import logs

    level = args.log_level or ("DEBUG" if args.debug else "INFO")
    logs.setup(getattr(logging, level), force=True)
    addrs = _common.resolve_addresses(args, ["nsqd_tcp", "lookupd_http"], default="nsqd_tcp")
    options: dict[str, Any] = {}
    if args.max_in_flight is not None:
        options["max_in_flight"] = args.max_in_flight
    config = _common.config_from_args(args)
    try:
        return worker.run(
            args.target,
            args.topic,
            args.channel,
            processes=args.processes,
            threads=args.threads,
            concurrency=args.concurrency,
            max_messages_per_child=args.max_messages_per_child,
            max_memory_per_child=args.max_memory_per_child,
            health_address=args.health_address,
            init=args.init,
            nsqd_tcp_addresses=addrs["nsqd_tcp"] or None,
            lookupd_http_addresses=addrs["lookupd_http"] or None,
            config=config,
            **options,
        )
    except WorkerError as exc:
        _common.report(args.debug, _common.error_line("worker", exc), exc)
        return EXIT_START_FAILURES
