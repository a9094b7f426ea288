"""The ``nsqclient`` command (also ``python -m nsqclient``): NSQ's everyday tools on our own
Reader, Writer and HTTP helpers.

``tail``, ``pub``, ``stat``, ``topics``, ``channels``, ``topic ACTION``, ``channel ACTION``, and
``bench`` (``nsqclient-benchmark``) and ``nsqd`` (the embedded test server,
``nsqclient-embedded-nsqd``), whose own parsers take their arguments unchanged. One module per
command; :mod:`._common` holds the shared flags and exit codes. This is an application entry
point, so unlike the library it installs a log handler (stderr, WARNING; ``--verbose``: INFO).

Exit codes: 0 success; 1 an NSQ or I/O error, said in one line (``--debug`` adds the
traceback); 2 bad usage; 130 after Ctrl-C and 143 after SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from . import _common

__all__ = ["main"]

EXAMPLES = """\
examples:
  nsqclient pub --topic events --body hello
  nsqclient tail --topic events -n 1
  nsqclient stat --count 1

Each command's --help shows more. Addresses default to $NSQD_TCP_ADDRESSES,
$NSQD_HTTP_ADDRESSES and $NSQLOOKUPD_HTTP_ADDRESSES, else nsqd on 127.0.0.1.
"""

_PASSTHROUGH = ("bench", "nsqd")  # their own parsers take every argument after the name


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from . import admin, pub, stat, tail

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
    sub.add_parser(
        "bench",
        help="run the benchmark (nsqclient-benchmark; `nsqclient bench --help`)",
        add_help=False,
    )
    sub.add_parser(
        "nsqd",
        help="run the embedded test nsqd (nsqclient-embedded-nsqd; `nsqclient nsqd --help`)",
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


def _setup_logging(args: argparse.Namespace) -> None:
    level = (
        logging.DEBUG
        if getattr(args, "debug", False)
        else logging.INFO
        if getattr(args, "verbose", False)
        else logging.WARNING
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("nsqclient")
    root.addHandler(handler)
    root.setLevel(level)


def _run_embedded_nsqd(argv: list[str]) -> int:
    from ..testing import __main__ as embedded

    return embedded.main(argv, prog="nsqclient nsqd")


def _passthrough(command: str, argv: list[str]) -> int:
    if command == "bench":
        from ..benchmark.__main__ import main as bench_main

        return bench_main(argv)
    return _run_embedded_nsqd(argv)


def _error_line(command: str, exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    return f"nsqclient {command}: error: {text}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; returns the exit code (see the module docstring)."""
    from ..errors import ConfigError, NSQError

    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in _PASSTHROUGH:
        try:
            return _passthrough(args_list[0], args_list[1:])
        except KeyboardInterrupt:
            return 130
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return _common.EXIT_USAGE
    _setup_logging(args)
    command: str = args.command
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output left (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _common.EXIT_OK
    except (_common.UsageError, ConfigError) as exc:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(f"nsqclient {command}: error: {exc}\n")
        return _common.EXIT_USAGE
    except (NSQError, OSError) as exc:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(_error_line(command, exc) + "\n")
        return _common.EXIT_ERROR
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader of our output left (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code
