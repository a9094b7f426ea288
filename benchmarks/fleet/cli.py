"""``python -m benchmarks.fleet``: the fleet scenarios for nsqclient and go-nsq, side by side.

Starts one nsqlookupd and as many nsqd as the largest scenario needs (real processes when the
binaries are found, the embedded server otherwise), runs each scenario for each client in turn
(each client its own process, fresh topic), checks every run against nsqd's own counters,
prints a table per scenario and writes the JSON (every run's per-nsqd counts over time).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nsqclient import __version__

from .cluster import Fleet, nsqd_version
from .harness import DEFAULT_GOBENCH, REPO_ROOT, resolve_client
from .plot import matplotlib_missing, write_fleet_plot
from .scenarios import SCENARIOS, Settings, run_scenario, settings_for

__all__ = ["main"]

OVERRIDES = (
    "nsqd",
    "messages",
    "max_in_flight",
    "handler_ms",
    "rate",
    "phase_s",
    "phases",
    "window_s",
    "settle_s",
    "max_duration",
    "payload_size",
    "bucket_ms",
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__)
    ap.add_argument(
        "--scenario",
        default="all",
        help=f"comma-separated, of {', '.join(SCENARIOS)}; or all (default)",
    )
    ap.add_argument(
        "--clients",
        default="nsqclient,go-nsq",
        help="comma-separated: nsqclient, nsqclient+KEY=VALUE (Reader options), "
        "go-nsq (default: nsqclient,go-nsq)",
    )
    ap.add_argument(
        "--backend",
        choices=("auto", "real", "embedded"),
        default="auto",
        help="real nsqd processes, or the embedded server (auto: real when found)",
    )
    ap.add_argument("--nsqd", type=int, help="nsqd in the scenario")
    ap.add_argument(
        "--messages",
        type=int,
        help="preloaded per nsqd (spread, low-mif) or on the busy nsqd (skewed)",
    )
    ap.add_argument("--max-in-flight", type=int)
    ap.add_argument("--handler-ms", type=float, help="each handler's sleep (0: instant)")
    ap.add_argument(
        "--rate", type=float, help="msg/s: to the hot nsqd (hot-spot), to each nsqd (fairness)"
    )
    ap.add_argument("--phase-s", type=float, help="hot-spot: seconds per hot nsqd")
    ap.add_argument("--phases", type=int, help="hot-spot: how many hot nsqd in turn")
    ap.add_argument("--window-s", type=float, help="fairness: seconds of publishing")
    ap.add_argument("--settle-s", type=float, help="hot-spot: seconds to finish after publishing")
    ap.add_argument("--max-duration", type=float, help="preloaded scenarios: give up after (s)")
    ap.add_argument("--payload-size", type=int, help="body bytes (>= 20; default 512)")
    ap.add_argument("--bucket-ms", type=float, help="timeline bucket (default 100 ms)")
    ap.add_argument(
        "--nsqd-flag",
        action="append",
        default=[],
        help="an extra nsqd flag, e.g. --nsqd-flag=--output-buffer-timeout=25ms",
    )
    ap.add_argument("--gobench", type=Path, default=DEFAULT_GOBENCH)
    ap.add_argument(
        "--go-max-procs",
        type=int,
        default=int(os.environ.get("GO_MAX_PROCS", "1")),
        help="GOMAXPROCS of the go-nsq program (default 1, as the comparison)",
    )
    ap.add_argument("--json", type=Path, help="default: benchmark-results/fleet-<time>.json")
    ap.add_argument("--plot", type=Path, help="PNG of per-nsqd deliveries over time")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    names = SCENARIOS if a.scenario == "all" else tuple(a.scenario.split(","))
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(unknown)} (choose from {', '.join(SCENARIOS)})")
    a.scenarios = names
    return a


def _fmt(value: Any, spec: str = ",.0f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int) and not isinstance(value, bool):
        return format(value, spec)
    return str(value)


Column = tuple[str, Callable[[dict[str, Any]], str]]


def _f(key: str, spec: str = ",.0f") -> Callable[[dict[str, Any]], str]:
    return lambda fig: _fmt(fig.get(key), spec)


COLUMNS: dict[str, list[Column]] = {
    "spread": [
        ("msg/s, N nsqd", _f("msg_s")),
        ("msg/s, 1 nsqd", _f("single_msg_s")),
        ("ratio", _f("ratio", ".2f")),
        (
            "client µs/msg (N / 1)",
            lambda f: (
                f"{_fmt(f.get('cpu_us_per_msg'), '.1f')} / "
                f"{_fmt(f.get('single_cpu_us_per_msg'), '.1f')}"
            ),
        ),
        (
            "nsqd µs/msg (N / 1)",
            lambda f: (
                f"{_fmt(f.get('nsqd_cpu_us_per_msg'), '.1f')} / "
                f"{_fmt(f.get('single_nsqd_cpu_us_per_msg'), '.1f')}"
            ),
        ),
    ],
    "low-mif": [
        (
            "drained, s",
            lambda f: (
                _fmt(f.get("drain_s"), ".2f")
                if f.get("gave_up_after_s") is None
                else f"> {f['gave_up_after_s']:.0f} (gave up)"
            ),
        ),
        ("last nsqd's first delivery, s", _f("last_first_delivery_s", ".2f")),
        ("median first delivery, s", _f("median_first_delivery_s", ".2f")),
        ("nsqd never delivered", _f("nsqd_never_delivered", "d")),
    ],
    "skewed": [
        ("msg/s", _f("msg_s")),
        ("ideal", _f("ideal_msg_s")),
        ("fraction", _f("fraction", ".2f")),
        ("handled", _f("handled", ",d")),
    ],
    "hot-spot": [
        (
            "follow s, each phase",
            lambda f: " ".join(_fmt(p["follow_s"], ".1f") for p in f.get("phases", [])),
        ),
        (
            "hot nsqd msg/s, each phase",
            lambda f: " ".join(_fmt(p["hot_msg_s"]) for p in f.get("phases", [])),
        ),
        ("max follow (phases 2+), s", _f("max_follow_s", ".1f")),
        (
            "handled / published",
            lambda f: f"{_fmt(f.get('handled'), ',d')} / {_fmt(f.get('published'), ',d')}",
        ),
    ],
    "fairness": [
        ("msg/s (capacity)", lambda f: f"{_fmt(f.get('msg_s'))} ({_fmt(f.get('capacity_msg_s'))})"),
        (
            "share min / max",
            lambda f: f"{_fmt(f.get('min_share'), '.2f')} / {_fmt(f.get('max_share'), '.2f')}",
        ),
        ("nsqd within 20%", _f("nsqd_within_20pct", "d")),
        ("nsqd with nothing", _f("nsqd_with_nothing", "d")),
        ("last first delivery, s", _f("last_first_delivery_s", ".2f")),
    ],
}


def _describe(s: Settings) -> str:
    parts = [f"{s.nsqd} nsqd", f"max_in_flight {s.max_in_flight}"]
    if s.scenario in ("spread", "low-mif", "skewed"):
        parts.append(
            f"{s.messages:,} messages" + (" on one" if s.scenario == "skewed" else " each")
        )
    if s.handler_ms:
        parts.append(f"handlers {s.handler_ms:g} ms")
    if s.scenario == "hot-spot":
        parts.append(f"{s.rate:g} msg/s to one nsqd, {s.phases} x {s.phase_s:g} s")
    if s.scenario == "fairness":
        parts.append(f"{s.rate:g} msg/s to each for {s.window_s:g} s")
    return ", ".join(parts)


def markdown(results: Sequence[dict[str, Any]]) -> str:
    """One table per scenario, one row per client."""
    out: list[str] = []
    for scenario in dict.fromkeys(r["scenario"] for r in results):
        rows = [r for r in results if r["scenario"] == scenario]
        cols = COLUMNS[scenario]
        out.append(f"\n{scenario}: {_describe(Settings(**rows[0]['settings']))}\n")
        out.append("| client | " + " | ".join(h for h, _ in cols) + " | checks |")
        out.append("| --- |" + " ---: |" * len(cols) + " --- |")
        for r in rows:
            if r["status"] in ("failed", "n/a"):
                cells = ["-"] * len(cols)
                check = f"{r['status']}: {r['reason']}"
            else:
                cells = [fn(r["figures"]) for _, fn in cols]
                check = "; ".join(r["problems"][:4]) or r.get("reason") or "ok"
            out.append(f"| {r['client']} | " + " | ".join(cells) + f" | {check} |")
    return "\n".join(out) + "\n"


def _git_rev() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return ""
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)

    def log(text: str) -> None:
        if not a.quiet:
            print(text, file=sys.stderr)

    overrides = {k: getattr(a, k) for k in OVERRIDES}
    settings = [settings_for(name, overrides) for name in a.scenarios]
    specs = [
        resolve_client(c, gobench=a.gobench, go_max_procs=a.go_max_procs)
        for c in a.clients.split(",")
        if c
    ]
    need = max(s.nsqd for s in settings)
    spread = any(s.scenario == "spread" for s in settings)
    report: dict[str, Any] = {
        "fleetbench": 1,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "nsqclient": __version__,
        "commit": _git_rev(),
        "machine": machine(),
        "nsqd_flags": a.nsqd_flag,
        "go_max_procs": a.go_max_procs,
        "results": [],
    }
    fleet = Fleet(need + (1 if spread else 0), a.backend, a.nsqd_flag)
    log(f"fleet: starting {fleet.count} nsqd ({fleet.backend}) and nsqlookupd ...")
    report["backend"] = fleet.backend
    report["nsqd_version"] = nsqd_version() if fleet.backend == "real" else "embedded"
    with fleet:
        single = fleet.nsqds[-1] if spread else None
        for s in settings:
            for spec in specs:
                if spec.command is None:
                    report["results"].append(
                        {
                            "scenario": s.scenario,
                            "client": spec.name,
                            "status": "n/a",
                            "reason": spec.missing,
                            "settings": vars(s) | {},
                            "problems": [],
                            "figures": {},
                            "runs": {},
                        }
                    )
                    continue
                log(f"  {s.scenario:9} {spec.name:24} ({_describe(s)}) ...")
                result = run_scenario(fleet, spec, s, single)
                report["results"].append(result)
                log(f"    -> {result['status']} {json.dumps(_brief(result['figures']))}")
    report["machine"]["loadavg_end"] = list(os.getloadavg())
    table = markdown(report["results"])
    print(table)
    load = report["machine"]
    print(
        f"backend {report['backend']} ({report['nsqd_version']}), nsqclient {__version__} "
        f"({report['commit']}), load average {load['loadavg_start'][0]:.2f} at start, "
        f"{load['loadavg_end'][0]:.2f} at end, {load['cpus']} CPUs"
    )
    path = a.json or REPO_ROOT / "benchmark-results" / (
        "fleet-" + datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ") + ".json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    log(f"results: {path}")
    if a.plot:
        why = matplotlib_missing()
        if why:
            log(f"--plot: {why}")
        else:
            drawn = write_fleet_plot(a.plot, report["results"], "per-nsqd deliveries over time")
            log(f"plot: {a.plot} ({drawn} panels)")
    bad = [r for r in report["results"] if r["status"] in ("failed", "errors")]
    return 1 if bad else 0


def _brief(figures: dict[str, Any]) -> dict[str, Any]:
    return {
        k: round(v, 3) if isinstance(v, float) else v
        for k, v in figures.items()
        if not isinstance(v, list)
    }
