"""The command line of ``nsqclient bench [run]``: profiles, overrides, cluster addresses (flags,
then ``$NSQD_TCP_ADDRESSES``-style variables, then a ``cluster.env`` file) and outputs.

:func:`run` takes what a caller adds (the repository's ``python -m benchmarks.run`` adds
scenarios, a chart and its git revision), so nothing here knows a checkout."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..sync.portal import LOOPS, loop_factory
from .latency import is_latency, reader_options
from .profiles import PROFILES, resolve_profile
from .progress import Progress
from .results import (
    ScenarioResult,
    dump_json,
    exit_code,
    json_report,
    markdown_table,
    write_text,
)
from .runner import ExtraScenario, Settings, kind_of, run_benchmark, scenario_names
from .telemetry import MODES
from .telemetry import enable as enable_telemetry

__all__ = [
    "build_parser",
    "main",
    "positive_int",
    "read_env_file",
    "resolve_addresses",
    "run",
    "settings_from_args",
]

ENV_NSQD_TCP = "NSQD_TCP_ADDRESSES"
ENV_NSQD_HTTP = "NSQD_HTTP_ADDRESSES"
ENV_LOOKUPD_HTTP = "NSQLOOKUPD_HTTP_ADDRESSES"


# --------------------------------------------------------------------------- addresses


def _split(value: str | None) -> list[str]:
    if not value:
        return []
    return [part.strip() for part in value.replace(" ", ",").split(",") if part.strip()]


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (a ``cluster.env`` file, as nsqclient's repository scripts write)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip().strip('"').strip("'")
    return values


def resolve_addresses(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> tuple[list[str], list[str], list[str]]:
    """Flags first; then a ``--cluster-env`` file; then the environment."""
    env = dict(os.environ if environ is None else environ)
    sources: list[dict[str, str]] = [env]
    if args.cluster_env is not None:
        sources.insert(0, read_env_file(Path(args.cluster_env)))

    def pick(flag: list[str] | None, key: str) -> list[str]:
        if flag:
            return [a for item in flag for a in _split(item)]
        for source in sources:
            found = _split(source.get(key))
            if found:
                return found
        return []

    return (
        pick(args.nsqd_tcp, ENV_NSQD_TCP),
        pick(args.nsqd_http, ENV_NSQD_HTTP),
        pick(args.lookupd_http, ENV_LOOKUPD_HTTP),
    )


# --------------------------------------------------------------------------- command line


def positive_int(text: str) -> int:
    """An argparse type: an integer > 0 (``1_000`` and ``1,000`` allowed)."""
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _int_list(text: str) -> list[int]:
    return [positive_int(part) for part in _split(text)]


# dest -> (flag, the old flag kept as a hidden alias, what it names)
_CLUSTER_FLAGS = {
    "nsqd_tcp": ("--nsqd-tcp-address", "--nsqd-tcp", "nsqd TCP address"),
    "nsqd_http": ("--nsqd-http-address", "--nsqd-http", "nsqd HTTP address"),
    "lookupd_http": ("--lookupd-http-address", "--lookupd-http", "nsqlookupd HTTP address"),
}
#: without any address: nsqd on localhost, as every other nsqclient command
DEFAULT_NSQD_TCP = "127.0.0.1:4150"
DEFAULT_NSQD_HTTP = "127.0.0.1:4151"
PROG = "nsqclient bench"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Benchmark nsqclient against a running NSQ cluster. (The comparison with other "
            f"clients is not part of the package: see `{prog} compare`.)"
        ),
        epilog=(
            "examples (also as `python -m nsqclient.benchmark ...`):\n"
            f"  {prog} --profile quick                # nsqd on 127.0.0.1:4150/4151\n"
            f"  {prog} --nsqd-tcp-address h:4150 --nsqd-http-address h:4151\n"
            f"  {prog} --scenarios tcp-pub,tcp-mpub --markdown results.md"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    group = parser.add_argument_group("overrides of the profile")
    group.add_argument("--messages", type=positive_int)
    group.add_argument("--payload-size", type=positive_int, help="bytes, at least 16")
    group.add_argument("--concurrency", type=positive_int, help="outstanding PUBs")
    group.add_argument("--batch-size", type=positive_int, help="messages per MPUB")
    group.add_argument("--max-in-flight", type=positive_int)
    group.add_argument("--mpub-concurrency", type=positive_int, help="outstanding MPUBs")
    group.add_argument("--threads", type=positive_int, help="threads of the sync scenarios")
    group.add_argument("--http-messages", type=positive_int)
    group.add_argument("--fanout-messages", type=positive_int)
    group.add_argument("--requeue-messages", type=positive_int)
    group.add_argument("--timeout", type=float, help="seconds per scenario")
    cluster = parser.add_argument_group(
        "cluster (flags, else --cluster-env, else $NSQD_TCP_ADDRESSES etc., else nsqd on "
        "127.0.0.1; repeat a flag or separate by commas)"
    )
    # the names every nsqclient command uses; the old short ones stay as hidden aliases
    for kind, (flag, old_flag, what) in _CLUSTER_FLAGS.items():
        cluster.add_argument(flag, dest=kind, action="append", metavar="HOST:PORT", help=what)
        cluster.add_argument(old_flag, dest=kind, action="append", help=argparse.SUPPRESS)
    cluster.add_argument(
        "--cluster-env", type=Path, help="KEY=VALUE file (NSQD_TCP_ADDRESSES=... lines)"
    )
    cluster.add_argument(
        "--readers-via-lookupd", action="store_true", help="readers discover nsqd via lookupd"
    )
    parser.add_argument(
        "--scenarios", help="comma-separated names (default: all; see --list)", default=None
    )
    parser.add_argument("--skip", help="comma-separated scenario names to leave out")
    parser.add_argument("--list", action="store_true", help="list scenarios and exit")
    parser.add_argument(
        "--fanout-channels", type=_int_list, default=[20, 100], help="default 20,100"
    )
    parser.add_argument(
        "--writer-option",
        action="append",
        type=_config_option,
        default=[],
        metavar="NAME=VALUE",
        help="a Config option for every Writer, e.g. coalesce=true or linger=2 (repeatable)",
    )
    parser.add_argument(
        "--reader-option",
        action="append",
        type=_config_option,
        default=[],
        metavar="NAME=INT",
        help="a Config option for every Reader, e.g. output_buffer_timeout=25 (repeatable)",
    )
    parser.add_argument(
        "--latency-rate",
        type=_positive_float,
        default=100.0,
        help="messages per second of the latency scenarios (default 100: one every 10 ms)",
    )
    parser.add_argument(
        "--latency-duration",
        type=_positive_float,
        default=10.0,
        help="seconds of publishing in each latency scenario (default 10)",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="asyncio",
        help="event loop of the asyncio scenarios and of the sync facade's loop thread "
        "(uvloop needs the nsqclient[uvloop] extra); default asyncio",
    )
    parser.add_argument("--markdown", type=Path, help="write the markdown table here")
    parser.add_argument("--json", type=Path, help="write raw results here")
    parser.add_argument("--keep-topics", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--otel",
        choices=MODES,
        default="off",
        help="run with OpenTelemetry instrumentation on (SDK, in-memory sinks): its cost per "
        "message is the CPU us/msg difference from a run without it",
    )
    return parser


def settings_from_args(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    environ: dict[str, str] | None = None,
    extra: Mapping[str, ExtraScenario] | None = None,
) -> Settings:
    overrides = {
        "messages": args.messages,
        "payload_size": args.payload_size,
        "concurrency": args.concurrency,
        "batch_size": args.batch_size,
        "max_in_flight": args.max_in_flight,
        "mpub_concurrency": args.mpub_concurrency,
        "threads": args.threads,
        "http_messages": args.http_messages,
        "fanout_messages": args.fanout_messages,
        "requeue_messages": args.requeue_messages,
        "timeout": args.timeout,
    }
    try:
        profile = resolve_profile(args.profile, overrides)
    except ValueError as exc:
        parser.error(str(exc))
    extra = dict(extra or {})
    known = scenario_names(args.fanout_channels, extra)
    chosen = _split(args.scenarios) if args.scenarios else list(known)
    skip = set(_split(args.skip))
    for name in [*chosen, *skip]:
        if name not in known and not _latency_variant(name):
            parser.error(f"unknown scenario {name!r}; known: {', '.join(known)}")
    chosen = [n for n in chosen if n not in skip]
    nsqd_tcp, nsqd_http, lookupd_http = resolve_addresses(args, environ)
    if not (nsqd_tcp or nsqd_http or lookupd_http):
        nsqd_tcp, nsqd_http = [DEFAULT_NSQD_TCP], [DEFAULT_NSQD_HTTP]
    if not nsqd_tcp or not nsqd_http:
        parser.error(
            "the benchmark needs both addresses of each nsqd: give --nsqd-tcp-address and "
            "--nsqd-http-address (or set NSQD_TCP_ADDRESSES and NSQD_HTTP_ADDRESSES), or "
            "neither for nsqd on 127.0.0.1"
        )
    if args.readers_via_lookupd and not lookupd_http:
        parser.error("--readers-via-lookupd needs lookupd HTTP addresses")
    try:
        loop_factory(args.loop)
    except ConfigError as exc:
        parser.error(f"--loop {args.loop}: {exc}")
    return Settings(
        profile=profile,
        nsqd_tcp=nsqd_tcp,
        nsqd_http=nsqd_http,
        lookupd_http=lookupd_http,
        scenarios=chosen,
        fanout_channels=args.fanout_channels,
        extra=extra,
        use_lookupd=args.readers_via_lookupd,
        keep_topics=args.keep_topics,
        latency_rate=args.latency_rate,
        latency_duration=args.latency_duration,
        reader_options=dict(args.reader_option),
        writer_options=dict(args.writer_option),
        loop=args.loop,
    )


def _latency_variant(name: str) -> bool:
    """``latency-obt<ms>`` and the other latency variants beyond the listed ones."""
    if not is_latency(name):
        return False
    try:
        reader_options(name)
    except ValueError:
        return False
    return True


def _config_option(text: str) -> tuple[str, int | bool]:
    """``NAME=INT`` or ``NAME=true|false``, checked as a Config option."""
    from ..config import Config

    name, sep, value = text.partition("=")
    name = name.strip()
    flag = {"true": True, "false": False}.get(value.strip().lower())
    try:
        number: int | bool = int(value) if flag is None else flag
        Config.from_options(**{name: number})
    except (ValueError, ConfigError) as exc:
        reason = str(exc) if sep and name else "expected NAME=INT or NAME=true|false"
        raise argparse.ArgumentTypeError(f"{text!r}: {reason}") from None
    return name, number


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = build_parser(prog)
    return run(parser.parse_args(argv), parser, prog)


def run(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    prog: str,
    *,
    extra: Mapping[str, ExtraScenario] | None = None,
    machine: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    after: Callable[[list[ScenarioResult]], None] | None = None,
) -> int:
    """Run what ``args`` says; ``extra`` scenarios join the known ones, ``machine`` and
    ``settings`` go into the JSON report's sections of those names, ``after`` gets the results
    (e.g. to draw them)."""
    if args.list:
        for name in scenario_names(args.fanout_channels, extra or {}):
            print(f"{name:20} {kind_of(name, extra)}")
        return 0
    chosen = settings_from_args(args, parser, extra=extra)
    chosen.otel = args.otel
    keep_alive = enable_telemetry(args.otel)  # noqa: F841  (the providers live for the run)
    progress = Progress(enabled=not args.quiet)
    prof = chosen.profile
    progress.note(
        f"{prog}: profile {prof.name} ({prof.messages:,} x {prof.payload_size} B, "
        f"concurrency {prof.concurrency}, batch {prof.batch_size}, max_in_flight "
        f"{prof.max_in_flight}) against nsqd {', '.join(chosen.nsqd_tcp)}; "
        f"{len(chosen.scenarios)} scenarios on {chosen.loop}, run {chosen.run_id}"
        + (f"; OpenTelemetry {args.otel}" if args.otel != "off" else "")
    )
    results = run_benchmark(chosen, progress)
    table = markdown_table(results)
    sys.stdout.write(table)
    sys.stdout.flush()
    if args.markdown is not None:
        write_text(args.markdown, table)
    if args.json is not None:
        recorded = {**chosen.as_dict(), **(settings or {})}
        dump_json(args.json, json_report(results, settings=recorded, machine=machine))
    if after is not None:
        after(results)
    code = exit_code(results)
    if code:
        bad = ", ".join(r.scenario for r in results if not r.ok)
        progress.note(f"{prog}: ERRORS in {bad}; exit status {code}")
    return code
