"""The comparison's harness: the same scenarios for nsqclient and peer clients (command line:
:mod:`.cli`).

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

import asyncio
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nsqclient.benchmark import accounting
from nsqclient.benchmark.nsqd_admin import NsqdAdmin
from nsqclient.benchmark.params import Params

from .drivers._common import ACCOUNTING_ENV
from .report import PairResult, run_errors, summarize_runs

__all__ = [
    "CLIENTS",
    "NSQD_FLAGS",
    "CompareSettings",
    "PairResult",
    "parse_driver_output",
    "run_compare",
]

DRIVERS_DIR = Path(__file__).resolve().parent / "drivers"
REPO_ROOT = Path(__file__).resolve().parents[2]  # harness.py -> compare -> benchmarks -> checkout
DEFAULT_PEERS_DIR = REPO_ROOT / "test_service" / ".peers"
DEFAULT_GOBENCH = REPO_ROOT / "test_service" / ".gobench" / "gobench"
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

CLIENTS = (
    "nsqclient-aio",
    "nsqclient-sync",
    "asyncnsq",
    "pynsq",
    "gnsq",
    "ansq",
    "go-nsq",
    "nsqclient-aio-coalesced",
    "nsqclient-sync-coalesced",
)
"""Known clients. The ``-coalesced`` rows are nsqclient with ``coalesce=True`` (concurrent PUBs
leave as one MPUB; each caller still gets its own acknowledgement), beside the plain rows."""
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
    if name.startswith("nsqclient-") and name in CLIENTS:
        mode = name.split("-")[1]
        driver = DRIVERS_DIR / "nsqclient_driver.py"
        extra = ["--coalesce"] if name.endswith("-coalesced") else []
        return ClientSpec(name, [sys.executable, str(driver), "--mode", mode, *extra])
    if name in PEERS:
        python = peers_dir / name / "bin" / "python"
        if not python.exists():
            return ClientSpec(
                name, None, f"not installed (bash test_service/peers/setup.sh {name})"
            )
        # the peer's python has no nsqclient: it loads the accounting from the installed file
        env = {ACCOUNTING_ENV: str(Path(accounting.__file__).resolve())}
        return ClientSpec(name, [str(python), str(DRIVERS_DIR / f"{name}_driver.py")], env=env)
    if name == "go-nsq":
        if not gobench.exists():
            return ClientSpec(name, None, "not built (bash test_service/benchmark_compare_go.sh)")
        return ClientSpec(name, [str(gobench)])
    return ClientSpec(name, None, "unknown client")


def parse_driver_output(
    stdout: str, marker: str = "nsqbench", who: str = "driver"
) -> dict[str, Any]:
    """The last protocol line (a JSON object with ``marker``) of a driver's stdout (the fleet
    benchmark's clients print theirs with ``"fleetbench"``)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and marker in data:
            return data
    raise ValueError(f"the {who} printed no result line")


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
