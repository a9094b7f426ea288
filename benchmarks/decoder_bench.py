"""Micro-benchmark of the frame decoder on one core: message frames per second.

    python benchmarks/decoder_bench.py [--frames N] [--chunk BYTES]

Builds a stream of message frames (64-byte and 512-byte bodies), feeds it to FrameDecoder in
chunks the size asyncio reads (256 KiB by default) and reports frames/s, best of several rounds.
"""

from __future__ import annotations

import argparse
import time

from nsqclient.protocol import FrameDecoder, encode_message


def stream(frames: int, body_size: int) -> bytes:
    body = b"x" * body_size
    return b"".join(
        encode_message(1_700_000_000_000_000_000 + i, 1, b"%016x" % i, body) for i in range(frames)
    )


def run(frames: int, body_size: int, chunk: int, rounds: int) -> float:
    data = stream(frames, body_size)
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    best = float("inf")
    for _ in range(rounds):
        decoder = FrameDecoder(max_frame_size=1 << 20)
        count = 0
        start = time.perf_counter()
        for piece in chunks:
            count += len(decoder.feed(piece))
        elapsed = time.perf_counter() - start
        assert count == frames, (count, frames)
        best = min(best, elapsed)
    return frames / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=500_000)
    parser.add_argument("--chunk", type=int, default=256 * 1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for size in (64, 512):
        rate = run(args.frames, size, args.chunk, args.rounds)
        print(f"{size:>4}-byte bodies: {rate:>12,.0f} message frames/s ({1e9 / rate:.0f} ns/frame)")


if __name__ == "__main__":
    main()
