"""``python -m benchmarks.compare``: the same scenarios for nsqclient and peer clients.

Rules (also in BENCHMARKS.md):

* every (scenario, client) pair gets a fresh nsqd, started with the same flags for all
  (:data:`NSQD_FLAGS`); each repeat uses its own topic, deleted afterwards;
* repeats are interleaved across clients (rotating order), so load from elsewhere on the machine
  is spread over all clients instead of landing on one;
* clients run one at a time, each in its own process (its driver script, run with the python of
  its own virtualenv, or the Go binary), speaking the JSON protocol of ``drivers/_common.py``;
* the harness preloads drain channels (MPUB, untimed) and checks every run independently: the
  published sequence ids are drained back exactly, and nsqd's counters must show nothing left,
  in flight, requeued or timed out;
* a run is repeated ``--repeats`` times (default 3); the table shows the median and min-max;
* a pair the client cannot do (not installed, scenario unsupported) is "n/a", never faked.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nsqclient.benchmark.nsqd_admin import NsqdAdmin
from nsqclient.benchmark.params import Params
from nsqclient.benchmark.results import dump_json, machine_info, write_text

from .report import PairResult, compare_markdown, run_errors, summarize_runs

__all__ = [
    "CLIENTS",
    "NSQD_FLAGS",
    "CompareSettings",
    "PairResult",
    "build_parser",
    "main",
    "parse_driver_output",
    "run_compare",
]

DRIVERS_DIR = Path(__file__).resolve().parent / "drivers"
REPO_ROOT = Path(__file__).resolve().parents[2]  # harness.py -> compare -> benchmarks -> checkout
DEFAULT_PEERS_DIR = REPO_ROOT / "test_service" / ".peers"
DEFAULT_GOBENCH = REPO_ROOT / "test_service" / ".gobench" / "gobench"
CHECKOUT_BIN_DIR = REPO_ROOT / "test_service" / ".bin"
"""nsqd for the fresh daemons, unless ``NSQ_BIN_DIR`` names another folder."""
MEM_QUEUE_SIZE = 10_000_000
#: nsqd's shortest allowed flush interval; clients that send their own value are set to the same
#: (see BENCHMARKS.md), so no client's end time is rounded up to nsqd's 250 ms flush tick
OUTPUT_BUFFER_TIMEOUT_MS = 25
NSQD_FLAGS = (
    f"--mem-queue-size={MEM_QUEUE_SIZE}",
    f"--output-buffer-timeout={OUTPUT_BUFFER_TIMEOUT_MS}ms",
)
"""Flags beyond addresses/data path/node id; everything else (max RDY 2500, msg timeout 60 s,
output buffer size 16 KiB) is nsqd's default."""

CLIENTS = ("nsqclient-aio", "nsqclient-sync", "asyncnsq", "pynsq", "gnsq", "ansq", "go-nsq")
PEERS = ("asyncnsq", "pynsq", "gnsq", "ansq")
KINDS = {
    "pub": "publish",
    "pub-async": "publish",
    "mpub": "publish",
    "e2e": "e2e",
    "drain": "drain",
}
DEFAULT_SCENARIOS = ("pub", "mpub", "e2e", "drain")


# --------------------------------------------------------------------------- clients


@dataclasses.dataclass
class ClientSpec:
    name: str
    command: list[str] | None
    missing: str = ""
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def resolve_client(
    name: str, *, peers_dir: Path, gobench: Path, custom: Mapping[str, str]
) -> ClientSpec:
    if name in custom:
        return ClientSpec(name, shlex.split(custom[name]))
    if name in ("nsqclient-aio", "nsqclient-sync"):
        mode = name.split("-", 1)[1]
        driver = DRIVERS_DIR / "nsqclient_driver.py"
        return ClientSpec(name, [sys.executable, str(driver), "--mode", mode])
    if name in PEERS:
        python = peers_dir / name / "bin" / "python"
        if not python.exists():
            return ClientSpec(
                name, None, f"not installed (bash test_service/peers/setup.sh {name})"
            )
        return ClientSpec(name, [str(python), str(DRIVERS_DIR / f"{name}_driver.py")])
    if name == "go-nsq":
        if not gobench.exists():
            return ClientSpec(name, None, "not built (bash test_service/benchmark_compare_go.sh)")
        return ClientSpec(name, [str(gobench)])
    return ClientSpec(name, None, "unknown client")


def parse_driver_output(stdout: str) -> dict[str, Any]:
    """The last protocol line (a JSON object with ``"nsqbench"``) of a driver's stdout."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "nsqbench" in data:
            return data
    raise ValueError("the driver printed no result line")


def call_driver(
    spec: ClientSpec, args: Sequence[str], timeout: float
) -> tuple[dict[str, Any], str]:
    """Run the driver; returns (its result line, the tail of its stderr)."""
    assert spec.command is not None
    env = {**os.environ, **spec.env}
    proc = subprocess.run(
        [*spec.command, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
    try:
        return parse_driver_output(proc.stdout), tail
    except ValueError:
        reason = f"exit status {proc.returncode}, no result line"
        return {"status": "error", "reason": reason}, tail


# --------------------------------------------------------------------------- results


# --------------------------------------------------------------------------- running


@dataclasses.dataclass
class CompareSettings:
    clients: list[str]
    scenarios: list[str]
    messages: int = 50_000
    e2e_messages: int = 20_000
    payload_size: int = 512
    concurrency: int = 256
    batch_size: int = 250
    mpub_concurrency: int = 4
    max_in_flight: int = 1_024
    repeats: int = 3
    timeout: float = 120.0
    peers_dir: Path = DEFAULT_PEERS_DIR
    gobench: Path = DEFAULT_GOBENCH
    custom_drivers: dict[str, str] = dataclasses.field(default_factory=dict)
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:6])

    def messages_for(self, scenario: str) -> int:
        return self.e2e_messages if scenario == "e2e" else self.messages

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["peers_dir"] = str(self.peers_dir)
        data["gobench"] = str(self.gobench)
        data["nsqd_flags"] = list(NSQD_FLAGS)
        return data


def _driver_args(s: CompareSettings, scenario: str, nsqd_tcp: str, topic: str) -> list[str]:
    return [
        "run",
        "--scenario", scenario,
        "--nsqd-tcp", nsqd_tcp,
        "--topic", topic,
        "--channel", "bench",
        "--messages", str(s.messages_for(scenario)),
        "--payload-size", str(s.payload_size),
        "--concurrency", str(s.concurrency),
        "--batch-size", str(s.batch_size),
        "--mpub-concurrency", str(s.mpub_concurrency),
        "--max-in-flight", str(s.max_in_flight),
        "--timeout", str(s.timeout),
    ]  # fmt: skip


def _verify_published(nsqd_tcp: str, topic: str, messages: int, timeout: float) -> dict[str, Any]:
    from nsqclient.benchmark.scenarios import measure_drain

    p = Params(nsqd_tcp=[nsqd_tcp], topic=topic, channel="verify", messages=messages,
               max_in_flight=1024, timeout=timeout)  # fmt: skip
    return asyncio.run(measure_drain(p, "direct"))


def run_one(
    s: CompareSettings, spec: ClientSpec, scenario: str, nsqd: Any, repeat: int
) -> dict[str, Any]:
    """One timed run of one driver against ``nsqd``, checked independently."""
    kind = KINDS[scenario]
    messages = s.messages_for(scenario)
    topic = f"cmp-{s.run_id}-{scenario}-{repeat}"
    admin = NsqdAdmin([nsqd.http_address])
    try:
        if kind == "drain":
            p = Params(nsqd_tcp=[nsqd.tcp_address], topic=topic, messages=messages,
                       payload_size=s.payload_size, batch_size=s.batch_size,
                       timeout=s.timeout)  # fmt: skip
            admin.preload([nsqd.tcp_address], topic, "bench", p)
        else:
            admin.create(topic, ["verify" if kind == "publish" else "bench"])
        try:
            run, stderr_tail = call_driver(
                spec, _driver_args(s, scenario, nsqd.tcp_address, topic), s.timeout + 60
            )
        except subprocess.TimeoutExpired:
            run, stderr_tail = {"status": "error", "reason": "driver timed out"}, ""
        run.setdefault("messages", messages)
        run["messages"] = messages
        if run.get("status") == "error" and stderr_tail:
            run["stderr"] = stderr_tail
        if run.get("status") != "ok":
            return run
        problems: list[str] = []
        if kind == "publish":
            failed = int(run.get("publish_errors", 0))
            # when nsqd already holds fewer than were acknowledged, do not wait long for them
            short = admin.channel_counts(topic, "verify")["depth"] < messages - failed
            verify = _verify_published(
                nsqd.tcp_address, topic, messages, 2.0 if short else max(30.0, s.timeout)
            )
            run["missing"] = max(0, int(verify["missing"]) - failed)
            run["duplicates"] = int(verify["duplicates"])
            problems = admin.check_consumed(topic, "verify", messages=messages - failed)
        else:
            problems = admin.check_consumed(topic, "bench", messages=messages)
        run["server_errors"] = len(problems)
        run["server_problems"] = problems
        return run
    finally:
        admin.delete_topic(topic)
        admin.close()


def prepare_pair(
    s: CompareSettings, spec: ClientSpec, scenario: str, listing: Mapping[str, Any]
) -> PairResult:
    """A pair with its fixed columns, or marked n/a (with the reason) if it cannot run."""
    pair = PairResult(scenario=scenario, client=spec.name, status="n/a")
    if spec.command is None:
        pair.reason = spec.missing
        return pair
    support = (listing.get("scenarios") or {}).get(scenario)
    if support != "ok":
        pair.reason = str(support or f"{spec.name} has no {scenario} scenario")
        return pair
    pair.status = "ok"
    pair.version = str(listing.get("version", ""))
    pair.runtime = str(listing.get("runtime", ""))
    pair.messages = s.messages_for(scenario)
    pair.payload_size = s.payload_size
    if scenario == "mpub":
        pair.batch_size, pair.concurrency = s.batch_size, s.mpub_concurrency
    elif scenario == "drain":
        pair.concurrency = s.max_in_flight
    else:
        pair.concurrency = s.concurrency
    return pair


def run_scenario_pairs(
    s: CompareSettings,
    scenario: str,
    specs: Sequence[ClientSpec],
    listings: Mapping[str, Mapping[str, Any]],
    log: Any,
) -> list[PairResult]:
    """Every client on one scenario. Each pair has its own fresh nsqd (all started up front,
    idle while not in use); repeats are interleaved (repeat 1 of every client, then repeat 2, in
    a rotating order), so a burst of load elsewhere on the machine hits all clients alike."""
    from nsqclient.testing.daemons import NsqdProcess

    pairs = [prepare_pair(s, spec, scenario, listings[spec.name]) for spec in specs]
    active = [(spec, pair) for spec, pair in zip(specs, pairs, strict=True) if pair.status == "ok"]
    daemons: dict[str, Any] = {}
    try:
        for spec, _ in active:
            daemons[spec.name] = NsqdProcess(
                mem_queue_size=MEM_QUEUE_SIZE,
                extra_args=[f for f in NSQD_FLAGS if not f.startswith("--mem-queue-size")],
            )
            daemons[spec.name].start()
        for repeat in range(s.repeats):
            shift = repeat % max(1, len(active))
            for spec, pair in active[shift:] + active[:shift]:
                log(f"  {scenario:6} {spec.name:15} run {repeat + 1}/{s.repeats} ...")
                run = run_one(s, spec, scenario, daemons[spec.name], repeat)
                pair.runs.append(run)
                rate = (
                    f"{run['messages'] / run['duration_s']:,.0f} msg/s"
                    if run.get("status") == "ok" and run.get("duration_s")
                    else run.get("reason", run.get("status"))
                )
                log(f"    -> {rate}; errors {run_errors(run)}")
    finally:
        for nsqd in daemons.values():
            nsqd.stop()
    for _, pair in active:
        finish_pair(pair)
    return pairs


def finish_pair(pair: PairResult) -> PairResult:
    """Summarise the runs of a pair and set its status, reason and notes."""
    pair.summary = summarize_runs(pair.runs, payload_size=pair.payload_size)
    statuses = {r.get("status") for r in pair.runs}
    if statuses - {"ok"}:
        pair.status = "failed"
        reasons = sorted({str(r.get("reason")) for r in pair.runs if r.get("status") != "ok"})
        pair.reason = "; ".join(reasons)
    elif pair.summary["errors"]:
        problems = sorted(
            {p for r in pair.runs for p in r.get("server_problems", [])}
            | {
                f"{k} {r[k]}"
                for r in pair.runs
                for k in ("missing", "duplicates", "publish_errors", "fin_errors")
                if r.get(k)
            }
        )
        pair.reason = "; ".join(problems[:6]) or "errors"
    median_run = pair.summary.get("median_run")
    pair.notes = str(pair.runs[median_run].get("notes", "")) if median_run is not None else ""
    if pair.runtime and not pair.runtime.startswith("CPython"):
        pair.notes = f"{pair.notes}; {pair.runtime}".lstrip("; ")
    return pair


def load_pairs(path: Path) -> list[PairResult]:
    """The pairs of an earlier ``--json`` report, summarised again."""
    data = json.loads(path.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(PairResult)}
    pairs = []
    for raw in data["pairs"]:
        pair = PairResult(**{k: v for k, v in raw.items() if k in fields})
        pairs.append(finish_pair(pair) if pair.status != "n/a" else pair)
    return pairs


def merge_pairs(reports: Sequence[Sequence[PairResult]]) -> list[PairResult]:
    """The first report's pairs, then each later report's pairs that are new, keeping each
    scenario's rows together in first-seen scenario order."""
    seen: set[tuple[str, str]] = set()
    merged: list[PairResult] = []
    for report in reports:
        for pair in report:
            key = (pair.scenario, pair.client)
            if key not in seen:
                seen.add(key)
                merged.append(pair)
    order = {s: i for i, s in enumerate(dict.fromkeys(p.scenario for p in merged))}
    return sorted(merged, key=lambda p: order[p.scenario])  # stable: clients keep their order


def _write_chart(path: Path, pairs: Sequence[PairResult], title: str) -> None:
    from .chart import write_compare_chart

    write_compare_chart(path, pairs, title)


def list_client(spec: ClientSpec) -> dict[str, Any]:
    if spec.command is None:
        return {}
    try:
        listing, _ = call_driver(spec, ["list"], 60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    return listing


def run_compare(s: CompareSettings, log: Any = None) -> list[PairResult]:
    log = log or (lambda text: None)
    pairs: list[PairResult] = []
    specs = [
        resolve_client(c, peers_dir=s.peers_dir, gobench=s.gobench, custom=s.custom_drivers)
        for c in s.clients
    ]
    listings = {spec.name: list_client(spec) for spec in specs}
    for spec in specs:
        listing = listings[spec.name]
        if spec.command is not None and "scenarios" not in listing:
            spec.missing = f"driver 'list' failed: {listing.get('reason') or listing.get('error')}"
            spec.command = None
    for scenario in s.scenarios:
        pairs.extend(run_scenario_pairs(s, scenario, specs, listings, log))
    return pairs


# --------------------------------------------------------------------------- command line


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
    parser.add_argument("--chart", type=Path, help="write a PNG chart here (needs [plot])")
    parser.add_argument("--title", default="nsqclient compare", help="of the chart")
    parser.add_argument("--quiet", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if CHECKOUT_BIN_DIR.is_dir():
        os.environ.setdefault("NSQ_BIN_DIR", str(CHECKOUT_BIN_DIR))
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
        from nsqclient.benchmark.chart import matplotlib_available

        if not matplotlib_available():
            parser.error("--chart needs matplotlib: pip install 'nsqclient[plot]'")
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
                "machine": machine_info(),
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
