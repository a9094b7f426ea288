"""``python -m benchmarks.compare``: the comparison's command line (:mod:`.harness` runs it)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from nsqclient.benchmark.results import dump_json, machine_info, write_text

from .. import source_revision
from .harness import (
    CLIENTS,
    DEFAULT_GOBENCH,
    DEFAULT_PEERS_DIR,
    DEFAULT_SCENARIOS,
    KINDS,
    NSQD_FLAGS,
    PEERS,
    CompareSettings,
    PairResult,
    list_client,
    load_pairs,
    merge_pairs,
    resolve_client,
    run_compare,
)
from .report import compare_markdown

__all__ = ["build_parser", "main"]


def _write_chart(path: Path, pairs: Sequence[PairResult], title: str) -> None:
    from .chart import write_compare_chart

    write_compare_chart(path, pairs, title)


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare",
        description="The same scenarios for nsqclient and peer NSQ clients (see BENCHMARKS.md).",
    )
    parser.add_argument("--clients", type=_csv, default=list(CLIENTS[:2]) + list(PEERS),
                        help=f"comma-separated (known: {', '.join(CLIENTS)})")  # fmt: skip
    parser.add_argument("--scenarios", type=_csv, default=None,
                        help=f"comma-separated (known: {', '.join(KINDS)})")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list clients and what they support")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000, help="pub, mpub and drain")
    parser.add_argument("--e2e-messages", type=int, default=20_000)
    parser.add_argument("--payload-size", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=256, help="outstanding PUBs")
    parser.add_argument("--batch-size", type=int, default=250)
    parser.add_argument("--mpub-concurrency", type=int, default=4, help="outstanding MPUBs")
    parser.add_argument("--max-in-flight", type=int, default=1_024)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--peers-dir", type=Path, default=DEFAULT_PEERS_DIR)
    parser.add_argument("--gobench", type=Path, default=DEFAULT_GOBENCH)
    parser.add_argument("--driver", action="append", default=[], metavar="NAME=COMMAND",
                        help="use COMMAND (shell words) as the driver of client NAME")  # fmt: skip
    parser.add_argument(
        "--render", type=Path, metavar="JSON", action="append",
        help="re-render earlier --json reports (repeatable: a later file adds only the "
        "(scenario, client) pairs the earlier ones lack, e.g. go-nsq's rows)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--chart", type=Path, help="write a PNG chart here (needs matplotlib)")
    parser.add_argument("--title", default="nsqclient compare", help="of the chart")
    parser.add_argument("--quiet", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    custom: dict[str, str] = {}
    for item in args.driver:
        name, sep, command = item.partition("=")
        if not sep or not name or not command:
            parser.error(f"--driver wants NAME=COMMAND, got {item!r}")
        custom[name] = command
    chosen = args.scenarios is not None
    if not chosen:
        args.scenarios = list(DEFAULT_SCENARIOS)
    for scenario in args.scenarios:
        if scenario not in KINDS:
            parser.error(f"unknown scenario {scenario!r}; known: {', '.join(KINDS)}")
    for name in ("repeats", "messages", "e2e_messages", "concurrency", "batch_size",
                 "mpub_concurrency", "max_in_flight"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.payload_size < 16:
        parser.error("--payload-size must be at least 16")
    settings = CompareSettings(
        clients=args.clients,
        scenarios=args.scenarios,
        messages=args.messages,
        e2e_messages=args.e2e_messages,
        payload_size=args.payload_size,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        mpub_concurrency=args.mpub_concurrency,
        max_in_flight=args.max_in_flight,
        repeats=args.repeats,
        timeout=args.timeout,
        peers_dir=args.peers_dir,
        gobench=args.gobench,
        custom_drivers=custom,
    )
    if args.chart is not None:
        from ..chart import matplotlib_available

        if not matplotlib_available():
            parser.error("--chart needs matplotlib: pip install matplotlib")
    if args.render:
        pairs = merge_pairs([load_pairs(path) for path in args.render])
        if chosen:  # only the scenarios asked for, in the order asked
            pairs = sorted(
                (p for p in pairs if p.scenario in args.scenarios),
                key=lambda p: args.scenarios.index(p.scenario),
            )
        table = compare_markdown(pairs)
        sys.stdout.write(table)
        if args.markdown is not None:
            write_text(args.markdown, table)
        if args.chart is not None:
            _write_chart(args.chart, pairs, args.title)
        return 0
    if args.list:
        for name in settings.clients:
            spec = resolve_client(
                name, peers_dir=settings.peers_dir, gobench=settings.gobench, custom=custom
            )
            if spec.command is None:
                print(f"{name:15} n/a: {spec.missing}")
                continue
            listing = list_client(spec)
            scen = listing.get("scenarios") or {}
            supported = ", ".join(k for k, v in scen.items() if v == "ok") or "-"
            version = listing.get("version", "?")
            print(f"{name:15} {version:8} {listing.get('runtime', '')}: {supported}")
        return 0

    def log(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    started = time.perf_counter()
    log(
        f"benchmarks.compare: {', '.join(settings.clients)} x "
        f"{', '.join(settings.scenarios)}, {settings.repeats} repeats, nsqd {' '.join(NSQD_FLAGS)}"
    )
    pairs = run_compare(settings, log)
    table = compare_markdown(pairs)
    sys.stdout.write(table)
    if args.markdown is not None:
        write_text(args.markdown, table)
    if args.chart is not None:
        _write_chart(args.chart, pairs, args.title)
    if args.json is not None:
        dump_json(
            args.json,
            {
                "tool": "benchmarks.compare",
                "machine": {**machine_info(), "nsqclient_source": source_revision()},
                "settings": settings.as_dict(),
                "elapsed_s": time.perf_counter() - started,
                "pairs": [pr.to_dict() for pr in pairs],
            },
        )
    failed = [f"{p.scenario}/{p.client}" for p in pairs if p.errors]
    if failed:
        log(f"compare: ERRORS in {', '.join(failed)}")
        return 1
    return 0
