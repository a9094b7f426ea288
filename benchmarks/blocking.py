"""The blocking face against its floor, on one nsqd, interleaved: ``python -m benchmarks.blocking``.

The floor is no library at all: threads with a socket each, writing a PUB and then blocking in
``recv`` for its OK, which is the least a blocking publish can cost in CPython. Beside it, in the
same run and on the same nsqd: two bare references for 16 threads sharing one connection
(``bare_shared``: threads write and take turns reading; ``bare_bridge``: threads bridged to a
loop thread that owns the connection, as issue 29 measured it), ``SyncWriter.pub`` from 1 and
16 threads (plain and with ``coalesce=True``), ``SyncWriter.pub_nowait`` waited for at once
from 1 and 16 threads and with 16 futures outstanding per thread (the oldest waited for, 256 in
all), gnsq's ``Producer.publish`` from 256 greenlets where gnsq is installed, and the asyncio
``Writer.pub`` with 256 concurrent awaits. Every publish waits for nsqd's OK.

The other kinds of connection (nsqd is started with a test CA's certificate, so TLS is offered
beside plain TCP): ``SyncWriter.pub`` from 1 and 16 threads over TLS, snappy and deflate, the
asyncio ``Writer.pub`` over TLS (256 concurrent, and one at a time beside the same over plain
TCP: a round trip's cost on the loop), and the TLS floor (a socket each, IDENTIFY asking for TLS,
``ssl``-wrapped, then PUB and a blocking ``recv`` of the OK). TLS cases are measured against the
TLS floor; snappy and deflate are also given against the plain ``SyncWriter.pub`` of the same
threads (what compression costs).

Each case runs in a process of its own (so its CPU is its own, without interpreter start-up):
the child measures msg/s, its CPU per message (user + system, every thread) and its context
switches per message (voluntary + involuntary) over the timed part only. Rounds interleave the
cases, so a drift of the shared machine falls on all of them; the table gives medians and each
case's ratios to the floor with the same number of threads. ``--before PATH`` adds the SyncWriter
cases run with the nsqclient found in PATH (another checkout), for before/after in one run.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: name -> (kind, threads, description)
CASES: dict[str, tuple[str, int, str]] = {
    "floor-1": ("floor", 1, "no library, 1 thread (socket, PUB, blocking recv)"),
    "floor-16": ("floor", 16, "no library, 16 threads, a socket each"),
    "floor-16-py1": ("floor-py1", 16, "no library, 16 threads, a socket each, +1 µs of Python"),
    "floor-16-py3": ("floor-py3", 16, "no library, 16 threads, a socket each, +3 µs of Python"),
    "bare-shared-16": ("bare-shared", 16, "no library, 16 threads, one socket they share"),
    "bare-bridge-16": ("bare-bridge", 16, "no library, 16 threads bridged to a loop thread"),
    "sync-1": ("sync", 1, "SyncWriter.pub, 1 thread"),
    "sync-1-script": ("sync-script", 1, "SyncWriter.pub, 1 thread, a script's first publishes"),
    "sync-16": ("sync", 16, "SyncWriter.pub, 16 threads"),
    "sync-16-coalesce": ("sync-coalesce", 16, "SyncWriter.pub, 16 threads, coalesce=True"),
    "sync-1-nowait": ("sync-nowait", 1, "SyncWriter.pub_nowait(...).result(), 1 thread"),
    "sync-16-nowait": ("sync-nowait", 16, "SyncWriter.pub_nowait(...).result(), 16 threads"),
    "sync-16-window": ("sync-window", 16, "SyncWriter.pub_nowait, 16 threads, 16 futures each"),
    "gnsq-256": ("gnsq", 256, "gnsq Producer.publish, 256 greenlets"),
    "aio-256": ("aio", 256, "asyncio Writer.pub, 256 concurrent"),
    "floor-1-tls": ("floor-tls", 1, "no library, 1 thread, TLS (ssl-wrapped socket)"),
    "floor-16-tls": ("floor-tls", 16, "no library, 16 threads, TLS, a socket each"),
    "sync-1-tls": ("sync-tls", 1, "SyncWriter.pub, 1 thread, TLS"),
    "sync-16-tls": ("sync-tls", 16, "SyncWriter.pub, 16 threads, TLS"),
    "sync-1-snappy": ("sync-snappy", 1, "SyncWriter.pub, 1 thread, snappy"),
    "sync-16-snappy": ("sync-snappy", 16, "SyncWriter.pub, 16 threads, snappy"),
    "sync-1-deflate": ("sync-deflate", 1, "SyncWriter.pub, 1 thread, deflate"),
    "sync-16-deflate": ("sync-deflate", 16, "SyncWriter.pub, 16 threads, deflate"),
    "aio-256-tls": ("aio-tls", 256, "asyncio Writer.pub, 256 concurrent, TLS"),
    "aio-1": ("aio", 1, "asyncio Writer.pub, one at a time"),
    "aio-1-tls": ("aio-tls", 1, "asyncio Writer.pub, one at a time, TLS"),
}
FLOOR_OF = {1: "floor-1"}  # otherwise floor-16; TLS cases: floor-1-tls, floor-16-tls
#: the connection kinds beside plain TCP, as the suffix of a case's kind
LAYERS = ("tls", "snappy", "deflate")
#: the test CA's certificate, for the children's TLS cases (set by the parent)
CA_ENV = "NSQCLIENT_BENCH_CA"
#: set for a child that measures another checkout's nsqclient (``--before``)
SOURCE_ENV = "NSQCLIENT_BENCH_SOURCE"


def _usage() -> tuple[float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw + r.ru_nivcsw


def _timed(start: Callable[[], None], wait: Callable[[], None], count: int) -> dict[str, float]:
    cpu0, cs0 = _usage()
    t0 = time.perf_counter()
    start()
    wait()
    elapsed = time.perf_counter() - t0
    cpu1, cs1 = _usage()
    return {
        "msg_per_s": count / elapsed,
        "cpu_us": 1e6 * (cpu1 - cpu0) / count,
        "cs": (cs1 - cs0) / count,
    }


def _in_threads(threads: int, work: Callable[[int], None], count: int) -> dict[str, float]:
    each = count // threads
    ts = [threading.Thread(target=work, args=(each,)) for _ in range(threads)]

    def start() -> None:
        for t in ts:
            t.start()

    def join() -> None:
        for t in ts:
            t.join()

    return _timed(start, join, each * threads)


#: ``floor-py1``/``floor-py3``: rounds of :func:`_python` (a counter under a lock) per publish,
#: 1.1 and 3.0 µs warm (CPython 3.11 on the 2-core VM): about as long as a client's least
#: Python per publish (2.9 µs on SyncWriter's path), and a third of it
_PYTHON_ROUNDS = {"floor": 0, "floor-py1": 5, "floor-py3": 15}


def _python(rounds: int, lock: threading.Lock, counter: list[int]) -> None:
    for _ in range(rounds):
        with lock:
            counter[0] += 1


def run_floor(
    address: str, topic: str, threads: int, count: int, body: bytes, kind: str = "floor"
) -> dict[str, float]:
    """The floor; with ``kind`` ``floor-py1``/``floor-py3`` the same plus some Python per
    publish, which shows how fast 16 threads lose the floor's rate as each publish holds the
    GIL longer (the convoy at every system call), whatever the design around it."""
    rounds = _PYTHON_ROUNDS[kind]
    lock = threading.Lock()
    counter = [0]
    host, port = address.rsplit(":", 1)
    command = b"PUB " + topic.encode() + b"\n" + struct.pack(">l", len(body)) + body
    socks = []
    for _ in range(threads):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"  V2")
        socks.append(s)

    def work(n: int) -> None:
        s = socks.pop()
        for _ in range(n):
            if rounds:
                _python(rounds, lock, counter)
            s.sendall(command)
            reply = s.recv(64)
            while len(reply) < 10:  # size, frame type, "OK"
                reply += s.recv(64)
            if reply[8:10] != b"OK":
                raise RuntimeError(f"nsqd answered {reply!r}")
        s.close()

    return _in_threads(threads, work, count)


def _read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (size,) = struct.unpack(">l", head)
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    return data


def tls_floor_socket(address: str, ca: str) -> socket.socket:
    """A bare TLS connection to nsqd: magic, IDENTIFY asking for TLS, the handshake, its OK."""
    import ssl

    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = json.dumps({"tls_v1": True, "feature_negotiation": True}).encode()
    s.sendall(b"  V2IDENTIFY\n" + struct.pack(">l", len(body)) + body)
    if not json.loads(_read_frame(s)[4:])["tls_v1"]:
        raise RuntimeError("nsqd did not offer TLS")
    tls = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname=host)
    if _read_frame(tls)[4:] != b"OK":
        raise RuntimeError("nsqd did not confirm TLS")
    return tls


def run_tls_floor(
    address: str, topic: str, threads: int, count: int, body: bytes
) -> dict[str, float]:
    """The TLS floor: as :func:`run_floor`, each socket ssl-wrapped after IDENTIFY."""
    ca = os.environ[CA_ENV]
    command = b"PUB " + topic.encode() + b"\n" + struct.pack(">l", len(body)) + body
    socks = [tls_floor_socket(address, ca) for _ in range(threads)]

    def work(n: int) -> None:
        s = socks.pop()
        for _ in range(n):
            s.sendall(command)
            reply = s.recv(64)
            while len(reply) < 10:
                reply += s.recv(64)
            if reply[8:10] != b"OK":
                raise RuntimeError(f"nsqd answered {reply!r}")
        s.close()

    return _in_threads(threads, work, count)


def client_options(layer: str | None) -> dict[str, Any]:
    """A client's options for a connection kind (None: plain TCP)."""
    if layer == "tls":
        return {"tls_v1": True, "tls_ca_file": os.environ[CA_ENV]}
    return {layer: True} if layer else {}


def run_bare_shared(
    address: str, topic: str, threads: int, count: int, body: bytes, kind: str = "bare-shared"
) -> dict[str, float]:
    from .bare_bridge import BareBridge
    from .bare_shared import BareShared

    command = b"PUB " + topic.encode() + b"\n" + struct.pack(">l", len(body)) + body
    shared: BareShared | BareBridge = (
        BareShared(address) if kind == "bare-shared" else BareBridge(address)
    )

    def work(n: int) -> None:
        for _ in range(n):
            shared.pub(command)

    try:
        return _in_threads(threads, work, count)
    finally:
        shared.close()


def run_sync(
    address: str,
    topic: str,
    threads: int,
    count: int,
    body: bytes,
    kind: str,
    options: dict[str, Any] | None = None,
) -> dict[str, float]:
    from nsqclient.sync import SyncWriter

    options = options or {}

    if kind == "sync-script":  # as a script starts: no ``with``, no warm-up, connect included
        cpu0, cs0 = _usage()
        t0 = time.perf_counter()
        script = SyncWriter([address], **options)
        try:
            for _ in range(count):
                script.pub(topic, body)
        finally:
            elapsed = time.perf_counter() - t0
            cpu1, cs1 = _usage()
            script.close()
        return {
            "msg_per_s": count / elapsed,
            "cpu_us": 1e6 * (cpu1 - cpu0) / count,
            "cs": (cs1 - cs0) / count,
        }
    with SyncWriter([address], coalesce=kind == "sync-coalesce", **options) as writer:
        writer.pub(topic, body)  # connected and warm

        def work(n: int) -> None:
            if kind == "sync-nowait":
                for _ in range(n):
                    writer.pub_nowait(topic, body).result()
            elif kind == "sync-window":  # 256 outstanding in all, the oldest waited for
                window: collections.deque[concurrent.futures.Future[None]] = collections.deque()
                for _ in range(n):
                    if len(window) >= 256 // threads:
                        window.popleft().result()
                    window.append(writer.pub_nowait(topic, body))
                for future in window:
                    future.result()
            else:
                pub = writer.pub
                for _ in range(n):
                    pub(topic, body)

        doors = list(getattr(writer.aio, "_doors", []))
        before = sum(getattr(d, "done_threads", 0) for d in doors)
        result = _in_threads(threads, work, count)
        # of the replies, the share a publishing thread read itself (the rest the loop read)
        after = sum(getattr(d, "done_threads", 0) for d in getattr(writer.aio, "_doors", []))
        result["read_by_threads"] = (after - before) / count if doors else 0.0
        return result


def run_aio(
    address: str,
    topic: str,
    concurrency: int,
    count: int,
    body: bytes,
    options: dict[str, Any] | None = None,
) -> dict[str, float]:
    import asyncio

    from nsqclient.aio import Writer

    async def main() -> dict[str, float]:
        async with Writer([address], **(options or {})) as writer:
            await writer.pub(topic, body)
            each = count // concurrency

            async def work() -> None:
                for _ in range(each):
                    await writer.pub(topic, body)

            result: dict[str, float] = {}

            async def go() -> None:
                await asyncio.gather(*(work() for _ in range(concurrency)))

            cpu0, cs0 = _usage()
            t0 = time.perf_counter()
            await go()
            elapsed = time.perf_counter() - t0
            cpu1, cs1 = _usage()
            n = each * concurrency
            result.update(msg_per_s=n / elapsed, cpu_us=1e6 * (cpu1 - cpu0) / n, cs=(cs1 - cs0) / n)
            return result

    return asyncio.run(main())


def run_gnsq(address: str, topic: str, greenlets: int, count: int, body: bytes) -> dict[str, float]:
    import gevent  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import gnsq  # type: ignore[import-untyped,import-not-found,unused-ignore]

    producer = gnsq.Producer([address])
    producer.start()
    producer.publish(topic, body)
    each = count // greenlets

    def work() -> None:
        for _ in range(each):
            producer.publish(topic, body)

    def start() -> None:
        jobs.extend(gevent.spawn(work) for _ in range(greenlets))

    jobs: list[Any] = []
    result = _timed(start, lambda: gevent.joinall(jobs, raise_error=True), each * greenlets)
    producer.close()
    producer.join()
    return result


#: where ``test_service/peers/setup.sh gnsq`` puts gnsq's own virtualenv (gevent patches the
#: standard library, so it is never installed beside nsqclient)
PEERS = Path(os.environ.get("NSQ_PEERS_DIR", ROOT / "test_service" / ".peers"))


def _python_for(name: str) -> str:
    """The interpreter that runs ``name``'s child: gnsq's peer virtualenv where it has one."""
    if CASES[name.removesuffix(" (before)")][0] == "gnsq":
        peer = PEERS / "gnsq" / "bin" / "python"
        if peer.exists():
            return str(peer)
    return sys.executable


def available(name: str) -> bool:
    kind = CASES[name][0]
    if kind != "gnsq":
        return True
    probe = subprocess.run(
        [_python_for(name), "-c", "import gnsq, gevent"], capture_output=True, timeout=60
    )
    return probe.returncode == 0


def _layer(kind: str) -> tuple[str, str | None]:
    """A case's kind without its connection kind, and that (None: plain TCP)."""
    for layer in LAYERS:
        if kind.endswith("-" + layer):
            return kind.removesuffix("-" + layer), layer
    return kind, None


def child(name: str, address: str, topic: str, count: int, size: int) -> dict[str, float]:
    kind, threads, _ = CASES[name]
    kind, layer = _layer(kind)
    body = b"x" * size
    if kind == "floor" and layer == "tls":
        return run_tls_floor(address, topic, threads, count, body)
    if kind.startswith("floor"):
        return run_floor(address, topic, threads, count, body, kind)
    if kind.startswith("bare-"):
        return run_bare_shared(address, topic, threads, count, body, kind)
    if kind.startswith("sync"):
        return run_sync(address, topic, threads, count, body, kind, client_options(layer))
    if kind == "aio":
        return run_aio(address, topic, threads, count, body, client_options(layer))
    return run_gnsq(address, topic, threads, count, body)


def _run_child(
    name: str,
    address: str,
    topic: str,
    count: int,
    size: int,
    pythonpath: str | None,
    cpus: set[int] | None = None,
) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath is not None:
        env[SOURCE_ENV] = pythonpath
    done = subprocess.run(
        [_python_for(name), "-m", "benchmarks.blocking", "--child", name, "--address", address,
         "--topic", topic, "--messages", str(count), "--size", str(size)],
        cwd=str(ROOT),
        env=env, capture_output=True, text=True, timeout=600,
        preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)),
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _floor_name(name: str) -> str:
    kind, threads, _ = CASES[name.removesuffix(" (before)")]
    if _layer(kind)[1] == "tls":
        return "floor-1-tls" if threads == 1 else "floor-16-tls"
    return FLOOR_OF.get(threads, "floor-16")


def _plain_twin(name: str) -> str | None:
    """The plain TCP case a compressed or TLS SyncWriter case is compared with."""
    base = name.removesuffix(" (before)")
    kind, layer = _layer(CASES[base][0])
    if layer is None or not kind.startswith("sync"):
        return None
    return base.removesuffix("-" + layer)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=40_000, help="publishes per case")
    parser.add_argument("--size", type=int, default=512, help="body bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--before", default=None, help="another checkout: its SyncWriter too")
    parser.add_argument("--json", default=None, help="write the rows to this file")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="each client process on CPU 0, nsqd on the others (as with taskset)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--address", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--topic", default="blocking", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        source = os.environ.get(SOURCE_ENV)
        if source:  # measure that checkout's nsqclient, not the installed (editable) one
            sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
            sys.path.insert(0, source)
        print(json.dumps(child(args.child, args.address, args.topic, args.messages, args.size)))
        return 0

    from nsqclient.testing.certs import make_certs
    from nsqclient.testing.daemons import NsqdProcess

    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown cases: {', '.join(unknown)} (known: {', '.join(CASES)})")
    skipped = [n for n in names if not available(n)]
    names = [n for n in names if n not in skipped]
    for name in {_floor_name(n) for n in names} - set(names):
        names.insert(0, name)  # every ratio needs its floor
    runs: list[tuple[str, str | None]] = [(n, None) for n in names]
    if args.before:  # (the asyncio face too: TLS is the connection's own now)
        runs += [
            (f"{n} (before)", args.before)
            for n in names
            if CASES[n][0].startswith(("sync", "aio"))
        ]
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in runs}
    certs = make_certs(Path(tempfile.mkdtemp(prefix="nsqclient-bench-certs-")))
    os.environ[CA_ENV] = str(certs.ca_cert)
    with NsqdProcess(tls_cert=certs.server_cert, tls_key=certs.server_key) as nsqd:
        client_cpus: set[int] | None = None
        if args.pin:
            cpus = sorted(os.sched_getaffinity(0))
            if len(cpus) < 2:
                parser.error("--pin needs two CPUs")
            assert nsqd.pid is not None
            os.sched_setaffinity(nsqd.pid, set(cpus[1:]))
            client_cpus = {cpus[0]}
        for r in range(args.rounds):
            order = runs if r % 2 == 0 else runs[::-1]
            for label, path in order:
                topic = f"blocking{r}"
                name = label.removesuffix(" (before)")
                results[label].append(
                    _run_child(
                        name, nsqd.tcp_address, topic, args.messages, args.size, path, client_cpus
                    )
                )
                print(f"round {r + 1}: {label}: {results[label][-1]}", file=sys.stderr)
            for t in {f"blocking{r}"}:
                try:
                    nsqd.http_post("/topic/delete", params={"topic": t})
                except Exception:  # a topic that never existed
                    pass
    rows: list[dict[str, Any]] = []
    for label, _ in runs:
        med = {k: statistics.median(x[k] for x in results[label]) for k in results[label][0]}
        rows.append({"case": label, **med})
    by = {row["case"]: row for row in rows}
    pinned = ", each client process on one CPU and nsqd on the other" if args.pin else ""
    print(
        f"\n{args.rounds} rounds, {args.messages} publishes of {args.size} B per case, "
        f"medians{pinned}"
    )
    print("| case | msg/s | x floor | client CPU µs/msg | x floor CPU | ctx switches/msg |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        label = str(row["case"])
        base = label.removesuffix(" (before)")
        floor = by[_floor_name(base)]
        desc = CASES[base][2] + (" (before)" if label != base else "")
        print(
            f"| {desc} | {row['msg_per_s']:,.0f} | {row['msg_per_s'] / floor['msg_per_s']:.2f} "
            f"| {row['cpu_us']:.1f} | {row['cpu_us'] / floor['cpu_us']:.2f} | {row['cs']:.2f} |"
        )
    twins = []
    for row in rows:
        label = str(row["case"])
        twin = _plain_twin(label)
        if twin is not None and label.endswith(" (before)"):
            twin += " (before)"
        if twin is not None and twin in by:
            twins.append((label, twin))
    if twins:
        print("\n| kind against plain TCP | x rate of plain SyncWriter | x its CPU |")
        print("| --- | ---: | ---: |")
        for label, twin in twins:
            row, plain = by[label], by[twin]
            base = label.removesuffix(" (before)")
            desc = CASES[base][2] + (" (before)" if label != base else "")
            print(
                f"| {desc} | {row['msg_per_s'] / plain['msg_per_s']:.2f} "
                f"| {row['cpu_us'] / plain['cpu_us']:.2f} |"
            )
    if skipped:
        print(f"\nnot installed, not run: {', '.join(skipped)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
