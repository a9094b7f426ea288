"""Supervised worker processes (``nsqclient worker``): ``python -m benchmarks.worker``.

Cases (every consumer is ``nsqclient worker benchmarks.worker:NAME`` unless said otherwise):

* ``cpu-1``, ``cpu-2``: a CPU-bound handler (pure Python, about 2 ms a message, calibrated once
  by this script and handed to every process) with ``--processes 1`` and ``2``, one thread each;
  the table gives the speed-up of 2 over 1.
* ``hand-2``: the same handler in 2 consumers started by hand, each ``SyncReader.run(handler)``
  in a ``python`` process of its own, with the worker's options (``max_in_flight`` 2): CPU per
  message of ``cpu-2`` against it is what the supervision costs.
* ``io-32``: a handler sleeping 50 ms, ``--processes 1 --threads 32``; the rate against the ideal
  32 / 0.05 s = 640 msg/s.
* ``startup-4``: ``--processes 4`` from launching the command to ``/readyz`` answering 200 (every
  child subscribed), and from the supervisor's first log line (its imports done, before the
  first fork) to the last child's "is ready" line.

A drain: the consumers start on an empty topic and are subscribed first (nsqd lists them), then
the messages go in one MPUB and the clock runs until nsqd shows the channel empty with nothing
in flight (polled every 10 ms). CPU (user + system) is read from ``/proc`` for every process of
the consumer side (the supervisor and its children, or the hand-started ones) over that same
window, so start-up and shutdown are not in it. Rounds alternate the order of the cases; the
table gives medians. Starts its own nsqd (1.3.0, ``test_service/.bin``) unless ``--nsqd-tcp``
and ``--nsqd-http`` name one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPIN_ENV = "BENCH_WORKER_SPIN"
_TICKS = os.sysconf("SC_CLK_TCK")

# ---------------------------------------------------------------------- the handlers


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def calibrate(target_s: float = 0.002) -> int:
    """Loop iterations that take ``target_s`` of CPU here (the best of a few tries)."""
    n = 20_000
    best = min(_timed(n) for _ in range(5))
    return max(1, int(n * target_s / best))


def _timed(n: int) -> float:
    start = time.process_time()
    _spin(n)
    return time.process_time() - start


_SPIN = int(os.environ.get(SPIN_ENV, "0") or 0)


def cpu(msg: Any) -> None:
    """About 2 ms of pure Python (the iterations are the driver's calibration)."""
    _spin(_SPIN)


def io(msg: Any) -> None:
    """A handler that waits 50 ms (on a database, say)."""
    time.sleep(0.05)


def noop(msg: Any) -> None:
    pass


# ---------------------------------------------------------------------- measuring


def proc_cpu(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                continue
    return found


class Consumers:
    """The consumer side of one case: processes started, their stderr kept."""

    def __init__(self, commands: list[list[str]], env: dict[str, str]) -> None:
        self.procs = [
            subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
            for cmd in commands
        ]  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self._threads = [threading.Thread(target=self._pump, args=(p,), daemon=True)
                         for p in self.procs]  # fmt: skip
        for thread in self._threads:
            thread.start()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in iter(proc.stderr.readline, b""):
            self.lines.append((time.monotonic(), line.decode(errors="replace")))

    def pids(self) -> list[int]:
        pids = [p.pid for p in self.procs]
        for p in self.procs:
            pids += children_of(p.pid)
        return pids

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for thread in self._threads:
            thread.join(5)

    def log(self) -> str:
        return "".join(line for _, line in self.lines)


def channel(nsqd_http: str, topic: str) -> dict[str, Any]:
    url = f"http://{nsqd_http}/stats?format=json&topic={topic}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        stats = json.loads(answer.read())
    for t in stats.get("topics") or []:
        for c in t.get("channels") or []:
            if c["channel_name"] == "bench":
                return dict(c)
    return {}


def wait_for(what: str, condition: Any, timeout: float = 60.0, every: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)


def worker_cmd(target: str, topic: str, a: argparse.Namespace, *more: str) -> list[str]:
    return [sys.executable, "-m", "nsqclient", "worker", f"benchmarks.worker:{target}",
            "--topic", topic, "--channel", "bench", "--nsqd-tcp-address", a.nsqd_tcp,
            "--log-level", "INFO", *more]  # fmt: skip


def hand_cmd(target: str, topic: str, a: argparse.Namespace) -> list[str]:
    code = (
        "import benchmarks.worker as w; from nsqclient.sync import SyncReader; "
        f"SyncReader({topic!r}, 'bench', nsqd_tcp_addresses=[{a.nsqd_tcp!r}], max_in_flight=2)"
        f".run(w.{target}, threads=1)"
    )
    return [sys.executable, "-c", code]


def drain(case: str, a: argparse.Namespace, env: dict[str, str], run: int) -> dict[str, Any]:
    """One drain of ``case``: rate and CPU per message over the drain window."""
    from nsqclient.sync import SyncWriter

    target, count, clients = {
        "cpu-1": ("cpu", a.messages, 1),
        "cpu-2": ("cpu", a.messages, 2),
        "hand-2": ("cpu", a.messages, 2),
        "io-32": ("io", a.io_messages, 1),
    }[case]
    topic = f"bench-worker-{os.getpid()}-{run}-{case}"
    if case == "hand-2":
        commands = [hand_cmd(target, topic, a) for _ in range(2)]
    elif case == "io-32":
        commands = [worker_cmd(target, topic, a, "--processes", "1", "--threads", "32")]
    else:
        commands = [worker_cmd(target, topic, a, "--processes", str(clients))]
    consumers = Consumers(commands, env)
    try:
        wait_for(f"{clients} consumers of {topic}",
                 lambda: channel(a.nsqd_http, topic).get("client_count") == clients)  # fmt: skip
        pids = consumers.pids()
        with SyncWriter(nsqd_tcp_addresses=[a.nsqd_tcp]) as writer:
            bodies = [b"m%d" % i for i in range(count)]
            cpu0 = sum(proc_cpu(p) for p in pids)
            start = time.monotonic()
            for i in range(0, count, 1000):
                writer.mpub(topic, bodies[i : i + 1000])
        wait_for(
            f"{topic} to drain",
            lambda: (c := channel(a.nsqd_http, topic)) and c["depth"] == 0
            and c["in_flight_count"] == 0 and c["message_count"] == count,
            timeout=600,
        )  # fmt: skip
        elapsed = time.monotonic() - start
        cpu_s = sum(proc_cpu(p) for p in pids) - cpu0
        final = channel(a.nsqd_http, topic)
    finally:
        consumers.stop()
    errors = final["timeout_count"] + final["requeue_count"]
    return {
        "case": case,
        "messages": count,
        "seconds": elapsed,
        "msg_per_s": count / elapsed,
        "cpu_us_per_msg": cpu_s / count * 1e6,
        "errors": errors,
    }


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _stamp(line: str) -> float:
    match = _STAMP.match(line)
    assert match is not None, line
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def startup(a: argparse.Namespace, env: dict[str, str], run: int) -> dict[str, Any]:
    """``--processes 4``: launch to /readyz 200, and the supervisor's first line to the last
    child ready (from the log's own timestamps)."""
    topic = f"bench-worker-{os.getpid()}-{run}-startup"
    start = time.monotonic()
    consumers = Consumers([worker_cmd("noop", topic, a, "--processes", "4",
                                      "--health-address", "127.0.0.1:0")], env)  # fmt: skip
    try:

        def started() -> str | None:
            return next((text for _, text in consumers.lines if "health on http://" in text), None)

        line = wait_for("the start-up line", started)
        url = line.rsplit("health on ", 1)[1].strip()

        def ready() -> bool:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=5) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        wait_for("/readyz", ready, every=0.005)
        launch_to_ready = time.monotonic() - start
        readies = [text for _, text in consumers.lines if " is ready" in text]
        children = max(map(_stamp, readies)) - _stamp(line)
    finally:
        consumers.stop()
    return {
        "case": "startup-4",
        "launch_to_ready_s": launch_to_ready,
        "children_ready_s": children,
        "errors": 0 if len(readies) == 4 else 1,
    }


@contextmanager
def nsqd_for(a: argparse.Namespace) -> Iterator[None]:
    if a.nsqd_tcp and a.nsqd_http:
        yield
        return
    os.environ.setdefault("NSQ_BIN_DIR", str(ROOT / "test_service" / ".bin"))
    from nsqclient.testing.daemons import NsqdProcess

    with NsqdProcess() as nsqd:
        a.nsqd_tcp, a.nsqd_http = nsqd.tcp_address, nsqd.http_address
        yield


def measure(a: argparse.Namespace) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env[SPIN_ENV] = str(calibrate())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    cases = [c for c in a.cases.split(",") if c]
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    with nsqd_for(a):
        for run in range(a.rounds):
            order = cases if run % 2 == 0 else cases[::-1]
            for case in order:
                row = startup(a, env, run) if case == "startup-4" else drain(case, a, env, run)
                rows[case].append(row)
                if not a.quiet:
                    print(f"round {run + 1} {case}: {row}", file=sys.stderr)
    table = []
    for case, results in rows.items():
        merged: dict[str, Any] = {"case": case, "rounds": len(results)}
        for key in results[0]:
            if key != "case":
                merged[key] = statistics.median(r[key] for r in results)
        merged["errors"] = sum(r["errors"] for r in results)
        table.append(merged)
    return table


LABELS = {
    "cpu-1": "2 ms CPU-bound, --processes 1",
    "cpu-2": "2 ms CPU-bound, --processes 2",
    "hand-2": "2 ms CPU-bound, 2 consumers started by hand",
    "io-32": "50 ms sleep, --processes 1 --threads 32",
}


def markdown(table: list[dict[str, Any]], spin: str = "") -> str:
    rows = {r["case"]: r for r in table}
    lines = ["| case | messages | msg/s | CPU µs/msg | against | errors |",
             "| --- | ---: | ---: | ---: | --- | ---: |"]  # fmt: skip
    for case, label in LABELS.items():
        row = rows.get(case)
        if row is None:
            continue
        against = ""
        if case == "cpu-2" and "cpu-1" in rows:
            against = f"{row['msg_per_s'] / rows['cpu-1']['msg_per_s']:.2f}x the rate of 1 process"
        elif case == "hand-2" and "cpu-2" in rows:
            ratio = rows["cpu-2"]["cpu_us_per_msg"] / row["cpu_us_per_msg"]
            against = f"--processes 2 uses {ratio:.2f}x its CPU per message"
        elif case == "io-32":
            against = f"{row['msg_per_s'] / 640:.2f}x the ideal 640 msg/s"
        lines.append(f"| {label} | {row['messages']:,} | {row['msg_per_s']:,.0f} | "
                     f"{row['cpu_us_per_msg']:,.0f} | {against} | {row['errors']} |")  # fmt: skip
    if "startup-4" in rows:
        row = rows["startup-4"]
        lines.append(
            f"| start-up, --processes 4 | | | | launch to /readyz 200 in "
            f"{row['launch_to_ready_s']:.2f} s; supervisor's first line to the 4th child ready "
            f"in {row['children_ready_s']:.3f} s | {row['errors']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--messages",
        type=int,
        default=4000,
        help="per CPU-bound drain (fewer: its start and end weigh)",
    )
    parser.add_argument("--io-messages", type=int, default=1280, help="for io-32")
    parser.add_argument("--cases", default="cpu-1,cpu-2,hand-2,io-32,startup-4")
    parser.add_argument("--nsqd-tcp", default=None)
    parser.add_argument("--nsqd-http", default=None)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quiet", action="store_true")
    a = parser.parse_args(argv)
    table = measure(a)
    print(markdown(table))
    if a.json:
        a.json.write_text(json.dumps(table, indent=1))
    return 1 if any(r["errors"] for r in table) else 0


if __name__ == "__main__":
    sys.exit(main())
