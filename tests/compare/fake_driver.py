"""A fake peer driver for the compare harness's tests: standard library only, like a real one.

``--behaviour good`` publishes exactly what it is asked (raw TCP MPUB) and reports a duration of
``1 + repeat`` seconds (the repeat is the topic's last ``-N``), so medians are predictable;
``lossy`` publishes 3 fewer than asked yet claims success; ``crash`` dies without a result line.
It supports ``pub`` only; ``drain`` is declared unsupported, so the harness must mark it n/a.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

HEADER = struct.Struct(">QQ")


def emit(obj: dict[str, object]) -> None:
    print("some log line a library printed on stdout")
    print(json.dumps({"nsqbench": 1, **obj}))


def mpub(address: str, topic: str, bodies: list[bytes]) -> None:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        payload = struct.pack(">I", len(bodies)) + b"".join(
            struct.pack(">I", len(b)) + b for b in bodies
        )
        sock.sendall(b"  V2" + f"MPUB {topic}\n".encode() + struct.pack(">I", len(payload)))
        sock.sendall(payload)
        header = b""
        while len(header) < 8:
            header += sock.recv(8 - len(header))
        size, frame_type = struct.unpack(">II", header)
        data = b""
        while len(data) < size - 4:
            data += sock.recv(size - 4 - len(data))
        if frame_type != 0 or data != b"OK":
            raise RuntimeError(f"MPUB failed: {data!r}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--behaviour", default="good")
    parser.add_argument("command")
    parser.add_argument("--scenario")
    parser.add_argument("--nsqd-tcp")
    parser.add_argument("--topic")
    parser.add_argument("--messages", type=int, default=0)
    parser.add_argument("--payload-size", type=int, default=64)
    args, _ = parser.parse_known_args()
    if args.command == "list":
        emit(
            {
                "client": "fake",
                "version": "9.9",
                "runtime": "fake 1",
                "scenarios": {"pub": "ok", "drain": "fake has no consumer"},
            }
        )
        return 0
    if args.behaviour == "crash":
        print("Traceback: boom", file=sys.stderr)
        return 3
    count = args.messages - (3 if args.behaviour == "lossy" else 0)
    pad = b"x" * (args.payload_size - HEADER.size)
    bodies = [HEADER.pack(seq, time.time_ns()) + pad for seq in range(count)]
    mpub(args.nsqd_tcp, args.topic, bodies)
    repeat = int(args.topic.rsplit("-", 1)[1])
    emit(
        {
            "status": "ok",
            "scenario": args.scenario,
            "duration_s": 1.0 + repeat,
            "latency_ms": {"p50": 1.0 + repeat, "p95": 2.0, "p99": 3.0, "max": 4.0},
            "received": args.messages,
            "cpu_s": 0.5,
            "max_rss_kib": 2048,
            "notes": "fake",
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
