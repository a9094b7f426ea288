"""Idle cost of a Reader connected to many nsqd: client CPU and memory per connection.

One Reader subscribes (RDY > 0 on every connection, nothing published) to N nsqd, then sits
idle; the client process's CPU over the window is measured with ``time.process_time`` and its
RSS growth per connection from ``/proc/self/status`` (and the Python heap per connection from
``tracemalloc``, stopped before the CPU window). The nsqd are the embedded server, all N in
ONE other process (``--serve``), so their CPU is not counted; ``--real`` starts real nsqd
processes from ``test_service/.bin`` instead (slow to start at 256). At the end every connection
must still be open and have answered nsqd's heartbeats (nsqd closes a client that misses two),
else the script exits 1.

    .venv/bin/python benchmarks/idle_connections.py -n 64 -n 256 --seconds 20
    .venv/bin/python benchmarks/idle_connections.py -n 256 --seconds 75  # 2+ heartbeats each
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import tracemalloc
from typing import Any


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _serve(count: int) -> None:
    """Run ``count`` embedded nsqd on this process's loop; print their TCP addresses, then run
    until stdin closes."""
    from nsqclient.testing.embedded import EmbeddedNsqd

    servers = [EmbeddedNsqd() for _ in range(count)]
    for server in servers:
        await server.start()
    print(json.dumps([s.tcp_address for s in servers]), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    for server in servers:
        await server.stop()


def _start_servers(count: int, real: bool) -> tuple[list[str], list[Any]]:
    """Start the nsqd; return their TCP addresses and what to stop afterwards."""
    if not real:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the embedded nsqd process did not start")
        return json.loads(line), [proc]
    from nsqclient.testing.daemons import NsqdProcess

    daemons = [NsqdProcess() for _ in range(count)]
    for daemon in daemons:
        daemon.start()
    return [d.tcp_address for d in daemons], daemons


def _stop_servers(handles: list[Any]) -> None:
    for handle in handles:
        if isinstance(handle, subprocess.Popen):
            assert handle.stdin is not None
            handle.stdin.close()
            handle.wait(30)
        else:
            handle.stop()


async def _measure(
    addresses: list[str],
    seconds: float,
    heartbeat_ms: int,
    max_in_flight: int | None = None,
    rdy_strategy: str = "adaptive",
) -> dict[str, Any]:
    from nsqclient.aio import Reader

    async def handler(_msg: Any) -> None:
        return None

    n = len(addresses)
    rss_before = _rss_kib()
    tracemalloc.start()  # Python heap per connection; stopped before the CPU window
    reader = Reader(
        "idle-bench",
        "idle",
        nsqd_tcp_addresses=addresses,
        message_handler=handler,
        # default: RDY > 0 on every connection; fewer than n: the RDY-1 turns of an idle fleet
        max_in_flight=max(n, 1) if max_in_flight is None else max_in_flight,
        heartbeat_interval=heartbeat_ms,
        rdy_strategy=rdy_strategy,  # type: ignore[arg-type]
    )
    every = max_in_flight is None or max_in_flight >= n
    await reader.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        conns = reader.connections
        if len(conns) == n and (
            all(c.rdy > 0 for c in conns) if every else any(c.rdy for c in conns)
        ):
            break
        await asyncio.sleep(0.1)
    else:
        raise SystemExit(f"only {len(reader.connections)} of {n} connections came up with RDY")
    await asyncio.sleep(1.0)  # let the connect burst settle
    heap = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    rss_after = _rss_kib()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    beats0 = sum(c.heartbeats_received for c in reader.connections)
    await asyncio.sleep(seconds)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    conns = reader.connections
    beats = [c.heartbeats_received for c in conns]
    result = {
        "connections": n,
        "open_at_end": sum(1 for c in conns if c.is_open),
        "seconds": round(wall, 2),
        "cpu_percent_of_core": round(100 * cpu / wall, 3),
        "cpu_us_per_connection_second": round(1e6 * cpu / wall / n, 2),
        "rss_kib_per_connection": round((rss_after - rss_before) / n, 1),
        "py_heap_kib_per_connection": round(heap / 1024 / n, 1),
        "heartbeats_in_window": sum(beats) - beats0,
        "min_heartbeats_per_connection": min(beats) if beats else 0,
    }
    await reader.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--connections", type=int, action="append")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--heartbeat-interval", type=int, default=30_000, help="ms")
    parser.add_argument("--real", action="store_true", help="real nsqd processes")
    parser.add_argument(
        "--max-in-flight", type=int, help="default: one per connection (RDY on every one)"
    )
    parser.add_argument("--rdy-strategy", default="adaptive", choices=("adaptive", "even"))
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        asyncio.run(_serve(args.serve))
        return 0
    ok = True
    for n in args.connections or [64, 256]:
        addresses, handles = _start_servers(n, args.real)
        try:
            result = asyncio.run(
                _measure(
                    addresses,
                    args.seconds,
                    args.heartbeat_interval,
                    args.max_in_flight,
                    args.rdy_strategy,
                )
            )
        finally:
            _stop_servers(handles)
        print(json.dumps(result), flush=True)
        expect_beats = args.seconds * 1000 // args.heartbeat_interval
        if result["open_at_end"] != n or result["min_heartbeats_per_connection"] < expect_beats:
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
