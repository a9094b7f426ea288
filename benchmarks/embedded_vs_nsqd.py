"""The embedded nsqd against real nsqd 1.3.0: nsq's own ``bench_writer`` / ``bench_reader``, and
the memory an idle connection costs each server.

Both servers are launched alike, as another project's script would: ``nsqd`` with the same flags
(nsq's ``bench.sh``: ``--mem-queue-size=1000000``, topic and channel created over HTTP first),
real from ``test_service/.bin`` and the embedded one through the PATH shim of
``python -m nsqclient.testing shims DIR``. Each round starts a fresh server, runs ``bench_writer``
(MPUB batches of 200) for ``--writer-seconds``, then ``bench_reader`` (SUB, RDY 2500, FIN each
message) on the backlog for ``--reader-seconds`` (shorter, so the backlog never runs dry: a round
that drained it is reported and fails the run), and stops the server. Rounds alternate
real/embedded (ABBA...) on the same machine; the figures are the tools' own ``ops/s`` lines
(medians) and the server's CPU per message from ``/proc`` (steadier on a shared machine).

Memory: ``--connections N`` opens N TCP connections to a fresh server of each kind, each one
IDENTIFY'd (heartbeats every 60 s, nsqd's longest: none is due while measuring) and
SUBscribed (RDY 0) unless ``--no-subscribe``, and reports the server's RSS growth
(``/proc/PID/status`` VmRSS, after one warm-up connection) per connection. RLIMIT_NOFILE's soft
limit is raised to the hard one first (the servers inherit it).

``--baseline DIR`` adds a third server to the rounds: the embedded one of another checkout (say
``git worktree add /tmp/base HEAD~1``), through the same shim with ``PYTHONPATH=DIR``, for
before/after figures from one run.

    bash test_service/build_nsq.sh      # nsqd, bench_writer and bench_reader
    .venv/bin/python -m benchmarks.embedded_vs_nsqd --rounds 3 --connections 18000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

_OPS = re.compile(r"duration: (\S+) - [\d.]+mb/s - ([\d.]+)ops/s")
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


class Server:
    """One ``nsqd`` (real binary or shim) on free ports, ready once ``/ping`` answers."""

    def __init__(self, exe: str, data: Path, env: dict[str, str]) -> None:
        from nsqclient.testing.daemons import free_port

        self.tcp = f"127.0.0.1:{free_port()}"
        self.http = f"127.0.0.1:{free_port()}"
        argv = [exe, f"--tcp-address={self.tcp}", f"--http-address={self.http}",
                f"--data-path={data}", "--mem-queue-size=1000000"]  # fmt: skip
        # cwd: not this checkout, which ``python -m`` would put before PYTHONPATH (--baseline)
        self.proc = subprocess.Popen(
            argv, env=env, cwd=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{exe} exited with {self.proc.returncode}")
            try:
                if httpx.get(f"http://{self.http}/ping", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{exe} did not answer /ping within 30 s")
            time.sleep(0.05)

    def post(self, path: str, **params: str) -> None:
        httpx.post(f"http://{self.http}{path}", params=params, timeout=10).raise_for_status()

    def channel(self, topic: str) -> dict[str, Any]:
        stats = httpx.get(f"http://{self.http}/stats?format=json&topic={topic}", timeout=30)
        for t in stats.json()["topics"]:
            for c in t["channels"]:
                return {"depth": int(c["depth"]), "in_flight": int(c["in_flight_count"])}
        return {"depth": 0, "in_flight": 0}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _bench(tool: str, args: list[str], seconds: float) -> tuple[float, float]:
    """Run nsq's bench tool; (ops/s, its duration in s) from its last line."""
    done = subprocess.run(
        [tool, *args, f"--runfor={seconds}s"],
        capture_output=True, text=True, timeout=seconds + 60,
    )  # fmt: skip
    match = _OPS.search(done.stderr + done.stdout)
    if done.returncode != 0 or not match:
        raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:]}")
    duration = match.group(1)
    secs = float(duration[:-2]) / 1000 if duration.endswith("ms") else float(duration[:-1])
    return float(match.group(2)), secs


def bench_round(kind: str, exe: str, env: dict[str, str], a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nsqbench-") as data:
        server = Server(exe, Path(data), env)
        try:
            server.post("/topic/create", topic="sub_bench")
            server.post("/channel/create", topic="sub_bench", channel="ch")
            common = [f"--nsqd-tcp-address={server.tcp}", f"--size={a.size}"]
            cpu0 = _cpu_s(server.proc.pid)
            w_ops, w_s = _bench(
                a.bench_writer, [*common, f"--batch-size={a.batch_size}"], a.writer_seconds
            )
            cpu1 = _cpu_s(server.proc.pid)
            r_ops, r_s = _bench(a.bench_reader, [*common, "--channel=ch"], a.reader_seconds)
            cpu2 = _cpu_s(server.proc.pid)
            left = server.channel("sub_bench")
        finally:
            server.stop()
    return {
        "server": kind,
        "writer_msg_s": w_ops,
        "writer_cpu_us": (cpu1 - cpu0) / max(1.0, w_ops * w_s) * 1e6,
        "reader_msg_s": r_ops,
        "reader_cpu_us": (cpu2 - cpu1) / max(1.0, r_ops * r_s) * 1e6,
        "backlog_left": left["depth"] + left["in_flight"],
    }


async def _open(address: str, count: int, subscribe: bool) -> list[asyncio.StreamWriter]:
    """``count`` connections, each IDENTIFY'd (and SUBscribed) and answered."""
    host, port = address.rsplit(":", 1)
    identify = json.dumps({"client_id": "idle", "hostname": "idle", "heartbeat_interval": 60_000})
    payload = b"  V2IDENTIFY\n" + len(identify).to_bytes(4, "big") + identify.encode()
    if subscribe:
        payload += b"SUB idle ch\n"
    answers = 2 if subscribe else 1

    async def one() -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(payload)
        for _ in range(answers):
            size = int.from_bytes(await reader.readexactly(4), "big")
            frame = await reader.readexactly(size)
            if frame[:4] != b"\x00\x00\x00\x00":
                raise RuntimeError(f"server answered {frame!r}")
        return writer

    writers: list[asyncio.StreamWriter] = []
    for lo in range(0, count, 250):
        async with asyncio.timeout(120):
            writers += await asyncio.gather(*(one() for _ in range(min(250, count - lo))))
    return writers


def memory(kind: str, exe: str, env: dict[str, str], count: int, subscribe: bool) -> dict[str, Any]:
    async def measure(server: Server) -> tuple[int, int]:
        for w in await _open(server.tcp, 1, subscribe):  # warm-up: first-use costs not counted
            w.close()
        await asyncio.sleep(0.5)
        before = _rss_kib(server.proc.pid)
        writers = await _open(server.tcp, count, subscribe)
        await asyncio.sleep(1.0)
        after = _rss_kib(server.proc.pid)
        for w in writers:
            w.close()
        return before, after

    with tempfile.TemporaryDirectory(prefix="nsqbench-") as data:
        server = Server(exe, Path(data), env)
        try:
            server.post("/topic/create", topic="idle")
            server.post("/channel/create", topic="idle", channel="ch")
            before, after = asyncio.run(measure(server))
        finally:
            server.stop()
    return {
        "server": kind,
        "connections": count,
        "rss_before_mib": before / 1024,
        "rss_after_mib": after / 1024,
        "bytes_per_connection": (after - before) * 1024 / count,
    }


def _raise_nofile(need: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    usable = hard - 64  # this process's own files, the servers' listeners
    return min(need, usable)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="bench rounds per server, interleaved")
    ap.add_argument("--writer-seconds", type=float, default=3.0)
    ap.add_argument("--reader-seconds", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--connections", type=int, default=0, help="idle connections (0: skip)")
    ap.add_argument("--no-subscribe", action="store_true", help="idle connections only IDENTIFY")
    ap.add_argument("--baseline", help="another checkout whose embedded server runs too")
    ap.add_argument("--json", help="write every round and the memory figures here")
    a = ap.parse_args(argv)

    from nsqclient.testing.daemons import find_nsq_binary

    real = str(find_nsq_binary("nsqd"))
    a.bench_writer = str(Path(real).parent / "bench_writer")
    a.bench_reader = str(Path(real).parent / "bench_reader")
    for tool in (a.bench_writer, a.bench_reader):
        if not os.access(tool, os.X_OK):
            print(f"no {tool}: run bash test_service/build_nsq.sh", file=sys.stderr)
            return 2
    shims = tempfile.mkdtemp(prefix="nsqbench-shims-")
    try:
        subprocess.run([sys.executable, "-m", "nsqclient.testing", "shims", shims],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "NSQ_BIN_DIR"}
        repo = str(Path(__file__).resolve().parents[1])
        envs = {kind: dict(env) for kind in ("real", "embedded", "baseline")}
        for kind, root in (("embedded", repo), ("baseline", a.baseline)):
            envs[kind]["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        exes = {"real": real, "embedded": str(Path(shims) / "nsqd")}
        exes["baseline"] = exes["embedded"]
        kinds = ("real", "embedded", "baseline") if a.baseline else ("real", "embedded")
        out: dict[str, Any] = {"kinds": kinds, "rounds": [], "memory": []}
        for r in range(a.rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                row = bench_round(kind, exes[kind], envs[kind], a)
                out["rounds"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        if a.connections:
            count = _raise_nofile(a.connections)
            for kind in kinds:
                row = memory(kind, exes[kind], envs[kind], count, not a.no_subscribe)
                out["memory"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(shims, ignore_errors=True)
    report(out, a.rounds)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    drained = [row for row in out["rounds"] if row["backlog_left"] == 0]
    if drained:
        print(
            f"{len(drained)} round(s) drained the backlog: raise --writer-seconds", file=sys.stderr
        )
        return 1
    return 0


def report(out: dict[str, Any], rounds: int) -> None:
    kinds = out["kinds"]
    keys = ("writer_msg_s", "writer_cpu_us", "reader_msg_s", "reader_cpu_us")
    med = {
        kind: {
            k: statistics.median(x[k] for x in out["rounds"] if x["server"] == kind) for k in keys
        }
        for kind in kinds
    }
    print(f"medians of {rounds} interleaved round(s) per server")
    print("| server | bench_writer msg/s | CPU µs/msg | bench_reader msg/s | CPU µs/msg |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for kind in kinds:
        m = med[kind]
        print(f"| {kind} | {m['writer_msg_s']:,.0f} | {m['writer_cpu_us']:.2f} "
              f"| {m['reader_msg_s']:,.0f} | {m['reader_cpu_us']:.2f} |")  # fmt: skip
    r = med["real"]
    for kind in kinds[1:]:
        e = med[kind]
        print(f"| {kind}/real | {e['writer_msg_s'] / r['writer_msg_s']:.2f}x | "
              f"{e['writer_cpu_us'] / r['writer_cpu_us']:.2f}x | "
              f"{e['reader_msg_s'] / r['reader_msg_s']:.2f}x | "
              f"{e['reader_cpu_us'] / r['reader_cpu_us']:.2f}x |")  # fmt: skip
    if out["memory"]:
        print("\n| server | connections | RSS before MiB | RSS after MiB | bytes/connection |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for m in out["memory"]:
            print(f"| {m['server']} | {m['connections']:,} | {m['rss_before_mib']:.1f} "
                  f"| {m['rss_after_mib']:.1f} | {m['bytes_per_connection']:,.0f} |")  # fmt: skip
        per = {m["server"]: m["bytes_per_connection"] for m in out["memory"]}
        for kind in kinds[1:]:
            print(f"| {kind}/real | | | | {per[kind] / max(1.0, per['real']):.2f}x |")


if __name__ == "__main__":
    raise SystemExit(main())
