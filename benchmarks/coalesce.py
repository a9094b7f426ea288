"""Publish coalescing, with and without, in the same run: ``python -m benchmarks.coalesce``.

Each case runs ``nsqclient bench`` (the package's benchmark, against the cluster of
``--cluster-env``: ``test_service/start.sh`` writes it) once plain and once with
``coalesce=true`` per round, the two in alternating order from round to round so that a drift of
the shared machine falls on both; the table gives each figure's median over the rounds and the
coalesced/plain ratio of the medians. Figures per case: msg/s, the client's and nsqd's CPU per
message (user + system, from the process and from ``/proc``), p50 and p99 per publish (publish
-> FIN for ``e2e``).

Cases: PUB with 1, 16 and 256 outstanding (``tcp-pub``; 1 is one caller publishing in a loop),
publish -> FIN (``e2e``, 256 outstanding), ``SyncWriter.pub`` from 1, 4 and 16 threads
(``sync-pub``), and PUB with 16 outstanding at each ``--lingers`` value (coalesced only; its
plain twin is the 16-outstanding case).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: (label, scenario, bench arguments)
CASES: list[tuple[str, str, list[str]]] = [
    ("PUB, 1 outstanding", "tcp-pub", ["--concurrency", "1"]),
    ("PUB, 16 outstanding", "tcp-pub", ["--concurrency", "16"]),
    ("PUB, 256 outstanding", "tcp-pub", ["--concurrency", "256"]),
    ("publish -> FIN, 256 outstanding", "e2e", ["--concurrency", "256"]),
    ("SyncWriter.pub, 1 thread", "sync-pub", ["--threads", "1"]),
    ("SyncWriter.pub, 4 threads", "sync-pub", ["--threads", "4"]),
    ("SyncWriter.pub, 16 threads", "sync-pub", ["--threads", "16"]),
]
#: cases whose rate is low: fewer messages keep each run about as long as the others
SLOW = {"PUB, 1 outstanding": 5, "SyncWriter.pub, 1 thread": 5, "SyncWriter.pub, 4 threads": 2}
FIGURES = ("msg_per_s", "cpu_us_per_msg", "nsqd_cpu_us_per_msg", "p50_ms", "p99_ms")


def run_bench(
    cluster_env: str, scenario: str, args: Sequence[str], messages: int, options: Sequence[str]
) -> dict[str, Any]:
    """One ``nsqclient bench`` run of ``scenario``; its result row (with nsqd's CPU lifted)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "nsqclient.benchmark",
            "--cluster-env",
            cluster_env,
            "--scenarios",
            scenario,
            "--messages",
            str(messages),
            "--payload-size",
            "512",
            "--quiet",
            "--json",
            str(out),
            *args,
            *(a for o in options for a in ("--writer-option", o)),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        [row] = json.loads(out.read_text())["results"]
    if row.get("failure") or row.get("errors"):
        raise RuntimeError(f"{scenario} {args} {options}: {row.get('failure') or row['errors']}")
    row["nsqd_cpu_us_per_msg"] = (row.get("extra") or {}).get("nsqd_cpu_us_per_msg")
    return dict(row)


def measure(a: argparse.Namespace) -> list[dict[str, Any]]:
    """Every case, plain and coalesced, ``a.rounds`` times; one row per case and mode."""
    plans: list[tuple[str, str, list[str], int, dict[str, list[str]]]] = []
    for label, scenario, args in CASES:
        if a.cases and not any(c in label for c in a.cases):
            continue
        n = a.messages // SLOW.get(label, 1)
        plans.append((label, scenario, args, n, {"plain": [], "coalesced": ["coalesce=true"]}))
    plans.extend(
        (
            f"PUB, 16 outstanding, linger {linger} ms",
            "tcp-pub",
            ["--concurrency", "16"],
            a.messages,
            {"coalesced": ["coalesce=true", f"linger={linger}"]},
        )
        for linger in a.lingers
    )
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(a.rounds):
        for label, scenario, args, n, modes in plans:
            order = list(modes.items())
            if r % 2:
                order.reverse()
            for mode, options in order:
                row = run_bench(a.cluster_env, scenario, args, n, options)
                runs.setdefault((label, mode), []).append(row)
                if not a.quiet:
                    print(
                        f"round {r + 1} {label} [{mode}]: {row['msg_per_s']:,.0f} msg/s, "
                        f"client {row['cpu_us_per_msg']:.2f} µs/msg, nsqd "
                        f"{row['nsqd_cpu_us_per_msg']} µs/msg, p50 {row['p50_ms']} p99 "
                        f"{row['p99_ms']} ms",
                        file=sys.stderr,
                    )
    table = []
    for (label, mode), rows in runs.items():
        entry: dict[str, Any] = {"case": label, "mode": mode, "rounds": len(rows)}
        for f in FIGURES:
            values = [row[f] for row in rows if row.get(f) is not None]
            entry[f] = statistics.median(values) if values else None
            entry[f + "_all"] = values
        table.append(entry)
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    """The table: each case's plain and coalesced medians, and coalesced/plain."""
    by = {(e["case"], e["mode"]): e for e in table}
    lines = [
        "| case | mode | msg/s | client CPU µs/msg | nsqd CPU µs/msg | p50 ms | p99 ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]

    def fmt(value: Any, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    for e in table:
        lines.append(
            f"| {e['case']} | {e['mode']} | {fmt(e['msg_per_s'], ',.0f')} | "
            f"{fmt(e['cpu_us_per_msg'], '.2f')} | {fmt(e['nsqd_cpu_us_per_msg'], '.2f')} | "
            f"{fmt(e['p50_ms'], '.3f')} | {fmt(e['p99_ms'], '.3f')} |"
        )
        plain = by.get((e["case"], "plain"))
        if e["mode"] == "coalesced" and plain is not None:
            ratios = []
            for f, spec in zip(FIGURES, (".2f", ".2f", ".2f", ".2f", ".2f"), strict=True):
                p, c = plain[f], e[f]
                ratios.append("n/a" if not p or c is None else format(c / p, spec) + "x")
            lines.append(f"| {e['case']} | coalesced / plain | " + " | ".join(ratios) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coalesce", description=__doc__)
    parser.add_argument("--cluster-env", default=os.environ.get("NSQ_CLUSTER_ENV"), required=False)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--lingers", type=lambda t: [int(x) for x in t.split(",") if x], default=[1, 5]
    )
    parser.add_argument(
        "--cases",
        type=lambda t: [x for x in t.split(",") if x],
        default=[],
        help="run only the cases whose label contains one of these (comma-separated)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--quiet", action="store_true")
    a = parser.parse_args(argv)
    if not a.cluster_env:
        parser.error("--cluster-env (or $NSQ_CLUSTER_ENV) is needed: test_service/start.sh")
    table = measure(a)
    text = markdown(table)
    print(text)
    if a.json:
        a.json.write_text(json.dumps(table, indent=2))
    if a.markdown:
        a.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
