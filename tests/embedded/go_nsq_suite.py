"""Run go-nsq v1.1.0's own test suite as its ``test.sh`` does, with ``nsqd`` / ``nsqlookupd``
taken from PATH (the embedded server's shims): a script, run by tests/embedded/test_go_nsq_suite.py.

go-nsq's tests dial the daemons' default ports (127.0.0.1:4150, 4151, 4161), so the caller runs
this in a private network namespace (``unshare -rn``, with ``--netns``: loopback is brought up
here), or else under a lock on the real ports. Steps, as ``test.sh``: start ``nsqlookupd``, then
``nsqd --data-path=... --lookupd-tcp-address=127.0.0.1:4160 --tls-cert=./test/server.pem
--tls-key=./test/server.key --tls-root-ca-file=./test/ca.pem`` (test.sh sleeps 0.3 s; here both
answer ``/ping`` and nsqd is registered with nsqlookupd), run the compiled ``go test -v -timeout
60s`` binary from a folder holding go-nsq's test/ certificates, stop both with SIGTERM. Prints
the suite's output and, on failure, the daemons' logs; exits with the suite's exit code (or
97-99: a daemon did not start or stop cleanly).

    python tests/embedded/go_nsq_suite.py --binary go-nsq.test --workdir DIR --netns
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

NSQD_FLAGS = [
    "--lookupd-tcp-address=127.0.0.1:4160",
    "--tls-cert=./test/server.pem",
    "--tls-key=./test/server.key",
    "--tls-root-ca-file=./test/ca.pem",
]


def loopback_up() -> None:
    """``ip link set lo up`` without ``ip``: SIOCGIFFLAGS / SIOCSIFFLAGS on ``lo``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        ifreq = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, 0x8913, ifreq))[1]
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH22x", b"lo", flags | 0x1))  # IFF_UP


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bytes(response.read())
    except OSError:
        return None


def wait_ready(procs: list[subprocess.Popen[bytes]], deadline_s: float = 30.0) -> None:
    """Until both answer /ping and nsqlookupd lists the nsqd (RuntimeError if one exits)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        nodes = _get("http://127.0.0.1:4161/nodes")
        if _get("http://127.0.0.1:4151/ping") and nodes and json.loads(nodes)["producers"]:
            return
        time.sleep(0.05)
    raise RuntimeError("nsqd / nsqlookupd not ready within 30 s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True, help="go-nsq's compiled test binary")
    ap.add_argument("--workdir", required=True, help="holds test/ (go-nsq's certificates)")
    ap.add_argument("--netns", action="store_true", help="in a fresh network namespace")
    a = ap.parse_args()
    if a.netns:
        loopback_up()
    work = Path(a.workdir)
    logs = {name: work / f"{name}.log" for name in ("nsqlookupd", "nsqd")}
    procs: list[subprocess.Popen[bytes]] = []
    code = 99
    try:
        for name, argv in (
            ("nsqlookupd", ["nsqlookupd"]),
            ("nsqd", ["nsqd", f"--data-path={work}", *NSQD_FLAGS]),
        ):
            with logs[name].open("wb") as log:
                procs.append(subprocess.Popen(argv, cwd=work, stdout=log, stderr=log))
        wait_ready(procs)
        started = time.monotonic()
        code = subprocess.run([a.binary, "-test.v", "-test.timeout", "60s"], cwd=work).returncode
        print(f"go-nsq suite: exit {code} in {time.monotonic() - started:.1f} s", flush=True)
    except RuntimeError as exc:
        print(f"go-nsq suite not run: {exc}", flush=True)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                if proc.wait(timeout=15) != 0:
                    code = code or 98
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = code or 97
        if code:
            for name, path in logs.items():
                if path.exists():
                    print(f"--- {name} log:\n{path.read_text('utf-8', 'replace')}")
    return code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
