"""The ``nsqclient`` command (also ``python -m nsqclient``): NSQ's everyday tools on our own
Reader, Writer and HTTP helpers.

``tail``, ``pub``, ``stat``, ``topics``, ``channels``, ``topic ACTION``, ``channel ACTION``,
``worker`` (supervised consumer processes, :mod:`nsqclient.worker`: it sets up its own logging
and has exit codes of its own, see :mod:`.worker`), and ``bench`` (the benchmark,
:mod:`nsqclient.benchmark`) and ``nsqd`` (the embedded test server, :mod:`nsqclient.testing`),
whose own parsers take their arguments unchanged. One module per
command; :mod:`._common` holds the shared flags and exit codes. This is an application entry
point, so unlike the library it installs a log handler (stderr, WARNING; ``--verbose``: INFO).

Exit codes: 0 success; 1 an NSQ or I/O error, said in one line (``--debug`` adds the
traceback); 2 bad usage; 130 after Ctrl-C and 143 after SIGTERM. Every command's errors reach
the user through :func:`._common.report` (:func:`_run` for those a command raises), so
``--debug`` shows a traceback on every error path.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from . import _common

__all__ = ["main"]

EXAMPLES = """\
examples:
  nsqclient pub --topic events --body hello
  nsqclient tail --topic events -n 1
  nsqclient stat --count 1
  nsqclient worker tasks:handle --topic events --channel billing

Each command's --help shows more. Addresses default to $NSQD_TCP_ADDRESSES,
$NSQD_HTTP_ADDRESSES and $NSQLOOKUPD_HTTP_ADDRESSES, else nsqd on 127.0.0.1.
"""

_PASSTHROUGH = ("bench", "nsqd")  # their own parsers take every argument after the name


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from . import admin, pub, stat, tail, worker

    parser = argparse.ArgumentParser(
        prog="nsqclient",
        description="NSQ's everyday command-line tools, on nsqclient.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nsqclient {__version__}")
    _diagnostics(parser, default=False)
    # accepted after the command name too; SUPPRESS keeps a value given before it
    parent = argparse.ArgumentParser(add_help=False)
    _diagnostics(parent, default=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    tail.add_parser(sub, parent)
    pub.add_parser(sub, parent)
    stat.add_parser(sub, parent)
    admin.add_parsers(sub, parent)
    worker.add_parser(sub, parent)
    sub.add_parser(
        "bench",
        help="run the benchmark (`nsqclient bench --help`)",
        add_help=False,
    )
    sub.add_parser(
        "nsqd",
        help="run the embedded test nsqd (`nsqclient nsqd --help`)",
        add_help=False,
    )
    return parser


def _diagnostics(parser: argparse.ArgumentParser, default: object) -> None:
    group = parser.add_argument_group("diagnostics")
    group.add_argument(
        "--verbose", action="store_true", default=default, help="log connections (INFO)"
    )
    group.add_argument(
        "--debug", action="store_true", default=default, help="log everything; tracebacks"
    )


def _setup_logging(debug: bool, verbose: bool) -> None:
    level = logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("nsqclient")
    root.addHandler(handler)
    root.setLevel(level)


def _run_embedded_nsqd(argv: list[str], debug: bool) -> int:
    from ..testing import __main__ as embedded

    return embedded.main(argv, prog="nsqclient nsqd", debug=debug)


_DIAGNOSTICS = ("--debug", "--verbose")


def _passthrough_split(argv: list[str]) -> tuple[set[str], str, list[str]] | None:
    """``(diagnostics flags, command, its arguments)`` when ``argv`` runs ``bench`` or ``nsqd``
    (``--debug``/``--verbose`` may come before the name; ``bench`` also takes them after it)."""
    i = 0
    while i < len(argv) and argv[i] in _DIAGNOSTICS:
        i += 1
    if i >= len(argv) or argv[i] not in _PASSTHROUGH:
        return None
    flags, command, rest = set(argv[:i]), argv[i], argv[i + 1 :]
    if command == "bench":  # the benchmark has no flags of these names
        flags.update(a for a in rest if a in _DIAGNOSTICS)
        rest = [a for a in rest if a not in _DIAGNOSTICS]
    return flags, command, rest


def _passthrough(command: str, argv: list[str], debug: bool) -> int:
    if command == "bench":
        from ..benchmark.__main__ import main as bench_main

        return bench_main(argv, prog="nsqclient bench")
    return _run_embedded_nsqd(argv, debug)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; returns the exit code (see the module docstring)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    split = _passthrough_split(args_list)
    if split is not None:
        flags, command, rest = split
        debug = "--debug" in flags
        if flags:
            _setup_logging(debug, "--verbose" in flags)
        return _run(command, debug, lambda: _passthrough(command, rest, debug))
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return _common.EXIT_USAGE
    if not getattr(args, "own_logging", False):
        _setup_logging(args.debug, args.verbose)
    return _run(args.command, args.debug, lambda: int(args.run(args)))


def _run(command: str, debug: bool, run: Callable[[], int]) -> int:
    """Run one command: the single place its errors become a line (after the traceback under
    ``--debug``, see :func:`._common.report`) and an exit code."""
    from ..errors import ConfigError, NSQError

    try:
        code = run()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output left (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _common.EXIT_OK
    except (_common.UsageError, ConfigError) as exc:
        _common.report(debug, f"nsqclient {command}: error: {exc}", exc)
        return _common.EXIT_USAGE
    except (NSQError, OSError) as exc:
        _common.report(debug, _common.error_line(command, exc), exc)
        return _common.EXIT_ERROR
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader of our output left (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code
