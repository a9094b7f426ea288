"""Import time: nsqclient's faces beside asyncnsq and pynsq, medians of fresh interpreters.

    .venv/bin/python -m benchmarks.import_time [--rounds 9] [--top 15] [--json]
    .venv/bin/python -m benchmarks.import_time --python asyncnsq=/path/to/venv/bin/python

Each case is one import statement timed inside a fresh interpreter (``time.perf_counter`` around
the statement, so interpreter start-up is not counted); the rounds are interleaved across cases,
in a rotating order, so load from elsewhere on the machine lands on every case alike, and the
first round only warms the caches (bytecode, the OS's file cache) and is not counted. The
``asyncio`` row is the floor every asyncio client pays. A peer runs on this Python when it can
import it, else on ``test_service/.peers/<name>/bin/python`` (``bash test_service/peers/setup.sh
asyncnsq pynsq``), else on the python given with ``--python NAME=PATH``; a peer found nowhere
is "n/a". ``--top N`` prints where nsqclient's time goes beyond asyncio (``python -X
importtime``, median self time per module). Every row also says whether the import loaded a
module nsqclient defers until it is used (httpx, janus, json, ...): see
tests/test_import_cost.py, which fails when one of them loads at import.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CASES", "DEFERRED", "Case", "main", "measure"]

REPO_ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = REPO_ROOT / "test_service" / ".peers"

#: what nsqclient loads only when used (the HTTP layer, the thread bridge, IDENTIFY's json, the
#: jitter source, compression, the option-name suggestions): the test of the same name fails when
#: ``import nsqclient.sync`` or ``import nsqclient.aio`` loads one of them
DEFERRED = (
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "idna",
    "certifi",
    "email",
    "http.client",
    "urllib.request",
    "nsqclient.http",
    "nsqclient.aio.handshake",
    "nsqclient.protocol.handshake",
    "nsqclient.protocol.identify",
    "json",
    "janus",
    "queue",
    "random",
    "zlib",
    "snappy",
    "cramjam",
    "difflib",
)


@dataclass(frozen=True)
class Case:
    name: str
    client: str  # "nsqclient", or the peer whose python runs it
    statement: str


CASES = (
    Case("asyncio (the floor)", "nsqclient", "import asyncio"),
    Case("import nsqclient", "nsqclient", "import nsqclient"),
    Case("nsqclient.aio: Reader, Writer", "nsqclient", "from nsqclient.aio import Reader, Writer"),
    Case(
        "nsqclient.sync: SyncReader, SyncWriter",
        "nsqclient",
        "from nsqclient.sync import SyncReader, SyncWriter",
    ),
    Case("asyncnsq", "asyncnsq", "import asyncnsq"),
    Case("pynsq (import nsq)", "pynsq", "import nsq"),
)

_PROBE = """
import sys, time
t = time.perf_counter()
{statement}
elapsed = time.perf_counter() - t
deferred = {deferred!r}
print(elapsed, "asyncio" in sys.modules, ",".join(m for m in deferred if m in sys.modules) or "-")
"""


@dataclass
class Row:
    case: Case
    python: str | None
    seconds: list[float] = field(default_factory=list)
    loaded: str = ""
    asyncio: bool = False  # the import loaded asyncio (nsqclient's top level does not)

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.seconds) * 1000 if self.seconds else None


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a fresh interpreter outside the checkout, so that each python imports what it has
    installed (``-c`` puts the current folder first on ``sys.path``)."""
    return subprocess.run(
        args, env=_env(), cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=120
    )


def _env() -> dict[str, str]:
    # bytecode is cached as in any installed package (PYTHONDONTWRITEBYTECODE would make every
    # fresh interpreter compile the checkout's modules again)
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _imports(python: str, module: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return _run([python, "-c", code]).returncode == 0


def find_python(client: str, given: dict[str, str]) -> str | None:
    """The python that runs ``client``'s cases, or None when none has it installed."""
    if client == "nsqclient":
        return given.get(client, sys.executable)
    if client in given:
        return given[client]
    module = {"pynsq": "nsq"}.get(client, client)
    if _imports(sys.executable, module):
        return sys.executable
    peer = PEERS_DIR / client / "bin" / "python"
    if peer.exists() and _imports(str(peer), module):
        return str(peer)
    return None


def _once(python: str, statement: str) -> tuple[float, bool, str]:
    code = _PROBE.format(statement=statement, deferred=DEFERRED)
    result = _run([python, "-c", code])
    result.check_returncode()
    seconds, asyncio, loaded = result.stdout.split()
    return float(seconds), asyncio == "True", "" if loaded == "-" else loaded


def measure(rounds: int, given: dict[str, str] | None = None) -> list[Row]:
    """Every case ``rounds`` times (after one warm-up round), interleaved, in fresh processes."""
    rows = [Row(case, find_python(case.client, given or {})) for case in CASES]
    runnable = [row for row in rows if row.python is not None]
    for i in range(rounds + 1):
        order = runnable[i % len(runnable) :] + runnable[: i % len(runnable)]
        for row in order:
            assert row.python is not None
            seconds, row.asyncio, row.loaded = _once(row.python, row.case.statement)
            if i:  # round 0 warms the caches
                row.seconds.append(seconds)
    return rows


def where_time_goes(python: str, statement: str, rounds: int, top: int) -> list[tuple[float, str]]:
    """``-X importtime`` beyond asyncio: the ``top`` largest median self times (ms, module)."""
    selfs: dict[str, list[int]] = {}
    for _ in range(rounds):
        result = _run([python, "-X", "importtime", "-c", f"import asyncio\n{statement}"])
        result.check_returncode()
        stderr = result.stderr
        counting = False
        for line in stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|( *)(\S+)", line)
            if not m:
                continue
            if m.group(3) == "asyncio" and len(m.group(2)) == 1:
                counting = True  # everything after asyncio's own tree
            elif counting:
                selfs.setdefault(m.group(3), []).append(int(m.group(1)))
    ranked = sorted(((statistics.median(v) / 1000, k) for k, v in selfs.items()), reverse=True)
    return ranked[:top]


def table(rows: list[Row]) -> str:
    floor = next((r.median_ms for r in rows if r.case.statement == "import asyncio"), None)
    asyncnsq = next((r.median_ms for r in rows if r.case.client == "asyncnsq"), None)
    lines = [
        "| import | python | median ms | min-max ms | beyond asyncio ms | x asyncnsq | "
        "deferred modules loaded |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        med = row.median_ms
        if med is None:
            lines.append(f"| {row.case.name} | n/a (not installed) | | | | | |")
            continue
        lo, hi = min(row.seconds) * 1000, max(row.seconds) * 1000
        beyond = f"{med - floor:.1f}" if floor is not None and row.asyncio else "(no asyncio)"
        ratio = f"{med / asyncnsq:.2f}" if asyncnsq else ""
        python = "this python" if row.python == sys.executable else row.python
        lines.append(
            f"| {row.case.name} | {python} | {med:.1f} | {lo:.1f}-{hi:.1f} | {beyond} | "
            f"{ratio} | {row.loaded or '-'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per case (default 9)")
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="the python for a client (asyncnsq, pynsq or nsqclient); repeatable",
    )
    parser.add_argument(
        "--top", type=int, default=0, help="also list the N costliest modules of nsqclient.sync"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    given = dict(item.split("=", 1) for item in args.python)
    rows = measure(max(1, args.rounds), given)
    python = given.get("nsqclient", sys.executable)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "case": r.case.name,
                        "client": r.case.client,
                        "python": r.python,
                        "median_ms": r.median_ms,
                        "rounds_ms": [s * 1000 for s in r.seconds],
                        "deferred_loaded": r.loaded.split(",") if r.loaded else [],
                    }
                    for r in rows
                ]
            )
        )
    else:
        version = _run([python, "-c", "import sys; print(sys.version)"])
        print(f"Python {version.stdout.split()[0]}, {args.rounds} rounds after a warm-up round")
        print(table(rows))
    if args.top:
        print("\nwhere nsqclient.sync's time goes beyond asyncio (median self ms, -X importtime):")
        for ms, module in where_time_goes(
            python, CASES[3].statement, max(3, args.rounds), args.top
        ):
            print(f"{ms:6.2f}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
