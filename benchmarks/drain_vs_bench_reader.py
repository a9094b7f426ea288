"""One nsqd at the limit: draining a preloaded channel, nsqclient against nsq's ``bench_reader``.

nsq's own ``bench/bench_reader`` (go-nsq's wire helpers, RDY 2500, one goroutine per
GOMAXPROCS, here GOMAXPROCS=1) and our aio Reader (a plain handler on the read path,
``max_in_flight=2500``) take turns at the same real nsqd 1.3.0, each on a fresh topic
preloaded with the same ``--messages`` 200-byte bodies, in interleaved rounds (ABBA...).

Both are measured from outside and alike, so neither side's start-up or imports count: the
clock and the CPU samples (the consumer's and nsqd's, from ``/proc``) start when nsqd's
``/stats`` first shows messages in flight and stop when nsqd has sent every message out
(topic and channel depth 0). ``bench_reader`` flushes its FINs only while more messages
arrive, so it leaves the last <= 2500 unanswered until nsqd's message timeout: waiting for
every FIN would time it out, hence "sent out" for both (at most 2500 / ``--messages`` early).

    bash test_service/build_nsq.sh     # builds bench_reader beside nsqd
    .venv/bin/python -m benchmarks.drain_vs_bench_reader --messages 300000 --rounds 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

_CONSUMER = """
import asyncio, sys
from nsqclient.aio import Reader

async def main() -> None:
    reader = Reader(sys.argv[2], "ch", nsqd_tcp_addresses=[sys.argv[1]], max_in_flight=2500)
    reader.set_message_handler(lambda m: None, direct=True)
    await reader.start()
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _cpu_s(pid: int) -> float:
    from nsqclient.benchmark.latency import nsqd_cpu_seconds  # utime + stime from /proc

    cpu = nsqd_cpu_seconds(pid)
    if cpu is None:
        raise RuntimeError(f"cannot read the CPU time of process {pid} from /proc")
    return cpu


def _sent_out(nsqd: Any, topic: str, total: int) -> tuple[int, bool]:
    """(in flight, everything sent out) from nsqd's /stats."""
    for t in nsqd.stats(topic=topic)["topics"]:
        for c in t["channels"]:
            if c["channel_name"] == "ch":
                done = t["depth"] == 0 and c["depth"] == 0 and c["message_count"] >= total
                return int(c["in_flight_count"]), done
    return 0, False


async def _preload(address: str, topic: str, total: int) -> None:
    from nsqclient.aio import Writer

    body = b"x" * 200
    async with Writer([address]) as writer:
        for lo in range(0, total, 500):
            await writer.mpub(topic, [body] * min(500, total - lo))


def _round(
    nsqd: Any, client: str, cmd: list[str], env: dict[str, str], total: int
) -> dict[str, Any]:
    topic = f"drain_vs_{client}_{time.monotonic_ns() % 10**9}"
    nsqd.http_post("/topic/create", params={"topic": topic})
    nsqd.http_post("/channel/create", params={"topic": topic, "channel": "ch"})
    asyncio.run(_preload(nsqd.tcp_address, topic, total))
    proc = subprocess.Popen(
        [*cmd, topic] if client == "nsqclient" else [*cmd, f"--topic={topic}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        start: tuple[float, float, float] | None = None
        deadline = time.monotonic() + 120
        while True:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{client}: did not drain {total} messages (exit {proc.poll()})")
            in_flight, done = _sent_out(nsqd, topic, total)
            if start is None and in_flight:
                start = (time.monotonic(), _cpu_s(proc.pid), _cpu_s(nsqd.pid))
            if start is not None and done:
                end = (time.monotonic(), _cpu_s(proc.pid), _cpu_s(nsqd.pid))
                break
            time.sleep(0.002)
    finally:
        proc.kill()
        proc.wait()
        nsqd.http_post("/topic/delete", params={"topic": topic})
    elapsed = end[0] - start[0]
    return {
        "client": client,
        "msg_s": total / elapsed,
        "client_cpu_us": (end[1] - start[1]) / total * 1e6,
        "nsqd_cpu_us": (end[2] - start[2]) / total * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=6, help="rounds per client, interleaved")
    ap.add_argument("--bench-reader", help="the binary (default: beside nsqd)")
    ap.add_argument("--json", help="write the rounds here")
    args = ap.parse_args(argv)

    from nsqclient.testing.daemons import NsqdProcess, find_nsq_binary

    bench_reader = args.bench_reader or str(find_nsq_binary("nsqd").parent / "bench_reader")
    if not os.access(bench_reader, os.X_OK):
        print(
            f"no bench_reader at {bench_reader}: run bash test_service/build_nsq.sh",
            file=sys.stderr,
        )
        return 2
    ours = [sys.executable, "-c", _CONSUMER]
    rows: list[dict[str, Any]] = []
    with NsqdProcess(mem_queue_size=10_000_000) as nsqd:
        clients = {
            "nsqclient": ([*ours, nsqd.tcp_address], dict(os.environ)),
            "bench_reader": (
                [
                    bench_reader,
                    f"--nsqd-tcp-address={nsqd.tcp_address}",
                    "--channel=ch",
                    "--runfor=300s",
                    "--rdy=2500",
                ],
                dict(os.environ, GOMAXPROCS="1"),
            ),
        }
        order = list(clients)
        for r in range(args.rounds):
            for client in order if r % 2 == 0 else order[::-1]:
                cmd, env = clients[client]
                row = _round(nsqd, client, cmd, env, args.messages)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print("| client | msg/s (median) | client CPU µs/msg | nsqd CPU µs/msg |")
    print("| --- | ---: | ---: | ---: |")
    med = {}
    for client in clients:
        mine = [x for x in rows if x["client"] == client]
        med[client] = {
            k: statistics.median(x[k] for x in mine)
            for k in ("msg_s", "client_cpu_us", "nsqd_cpu_us")
        }
        m = med[client]
        cpu = f"{m['client_cpu_us']:.2f} | {m['nsqd_cpu_us']:.2f}"
        print(f"| {client} | {m['msg_s']:,.0f} | {cpu} |")
    ratio = med["nsqclient"]["msg_s"] / med["bench_reader"]["msg_s"]
    print(f"\nnsqclient / bench_reader: {ratio:.2f}x msg/s (medians of {args.rounds} rounds each)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
