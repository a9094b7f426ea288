"""The embedded server as a drop-in ``nsqd`` / ``nsqlookupd``: go-nsq's test.sh launch line,
run through the PATH shims (``python -m nsqclient.testing shims DIR``), with free ports.

go-nsq's test.sh runs ``nsqlookupd`` and ``nsqd --data-path=/tmp
--lookupd-tcp-address=127.0.0.1:4160 --tls-cert=/tmp/cert.pem --tls-key=/tmp/key.pem``; here
the same flags, plus the listen addresses (and the lookupd address) on free ports.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqclient.aio import Reader
from nsqclient.sync import SyncWriter
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import free_port
from nsqclient.testing.embedded.goflags import NSQD_FLAGS, NSQLOOKUPD_FLAGS, FlagError, parse

pytestmark = pytest.mark.timeout(60)

DEADLINE = 15.0
REPO = Path(__file__).resolve().parents[2]


class Daemon:
    """A shim-started daemon; waits for its ``ready`` line (stdout) and keeps stderr."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        self.lines: list[str] = []
        deadline = time.monotonic() + DEADLINE
        while not self.lines or not self.lines[-1].startswith("ready"):
            line = self.proc.stdout.readline()
            if not line:
                _, err = self.proc.communicate(timeout=DEADLINE)
                raise AssertionError(f"{argv[0]} exited early: {self.lines} {err}")
            self.lines.append(line.rstrip("\n"))
            assert time.monotonic() < deadline, self.lines

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=DEADLINE)
        return self.proc.returncode, err


@pytest.fixture
def shims(tmp_path: Path) -> dict[str, str]:
    """PATH with the shims first (and the real binaries nowhere on it)."""
    folder = tmp_path / "bin"
    result = subprocess.run(
        [sys.executable, "-m", "nsqclient.testing", "shims", str(folder)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    assert "export PATH=" in result.stdout
    for name in ("nsqd", "nsqlookupd"):
        assert os.access(folder / name, os.X_OK)
    env = {k: v for k, v in os.environ.items() if k != "NSQ_BIN_DIR"}
    env["PATH"] = f"{folder}:/usr/bin:/bin"
    env["PYTHONPATH"] = str(REPO)
    return env


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in reversed(started):
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.communicate(timeout=DEADLINE)


def test_go_nsq_launch_line_through_the_shims(
    shims: dict[str, str], daemons: list[Daemon], tls_certs: CertBundle, tmp_path: Path
) -> None:
    lookupd_tcp, lookupd_http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    lookupd = Daemon(
        ["nsqlookupd", f"-tcp-address={lookupd_tcp}", "--http-address", lookupd_http], shims
    )
    daemons.append(lookupd)
    tcp, http, https = (f"127.0.0.1:{free_port()}" for _ in range(3))
    nsqd = Daemon(
        [
            "nsqd",
            f"--data-path={tmp_path}",
            f"--lookupd-tcp-address={lookupd_tcp}",
            f"--tls-cert={tls_certs.server_cert}",
            f"--tls-key={tls_certs.server_key}",
            f"--tcp-address={tcp}",
            f"--http-address={http}",
            f"--https-address={https}",
            "--verbose",
        ],
        shims,
    )
    daemons.append(nsqd)
    assert f"nsqd TCP  {tcp}" in nsqd.lines and f"nsqd HTTPS {https}" in nsqd.lines
    tls = {"tls_v1": True, "tls_ca_file": str(tls_certs.ca_cert)}
    with SyncWriter([tcp], **tls) as writer:  # type: ignore[arg-type]
        writer.pub("dropin", b"one")
        writer.pub("dropin", b"two")

    async def consume() -> list[bytes]:
        bodies: list[bytes] = []
        # discovery: the reader only knows the lookupd; nsqd registered itself there
        async with Reader(
            "dropin", "ch", lookupd_http_addresses=[lookupd_http], max_in_flight=5, **tls
        ) as reader:  # type: ignore[arg-type]
            async with asyncio.timeout(DEADLINE):
                async for msg in reader:
                    bodies.append(msg.body)
                    await msg.fin()
                    if len(bodies) == 2:
                        return bodies
        return bodies

    assert sorted(asyncio.run(consume())) == [b"one", b"two"]
    code, err = nsqd.stop()
    assert code == 0, err
    # the ignored persistence flag, said at start-up in nsqd's log format, then the daemon logs
    assert "WARNING: -data-path ignored: the embedded server keeps messages in memory only" in err
    assert "TCP: new client" in err
    code, err = lookupd.stop()
    assert code == 0, err


def test_version_and_unknown_flags_as_the_daemons(shims: dict[str, str]) -> None:
    for name in ("nsqd", "nsqlookupd"):
        result = subprocess.run(
            [name, "-version"], capture_output=True, text=True, env=shims, timeout=DEADLINE
        )
        assert result.returncode == 0 and result.stdout.startswith(f"{name} v1.3.0")
    result = subprocess.run(
        ["nsqd", "--no-such-flag"], capture_output=True, text=True, env=shims, timeout=DEADLINE
    )
    assert (
        result.returncode == 2 and "flag provided but not defined: -no-such-flag" in result.stderr
    )


def test_go_flag_forms() -> None:
    parsed = parse(
        [
            "-tcp-address",
            "127.0.0.1:1",
            "--msg-timeout=2s",
            "-snappy=false",
            "-tls-required",
            "--statsd-mem-stats",
            "--lookupd-tcp-address=a:1",
            "-lookupd-tcp-address",
            "b:2",
            "--data-path",
            "/tmp",
            "rest",
            "-verbose",
        ],
        NSQD_FLAGS,
    )
    assert parsed.values == [
        ("tcp-address", "127.0.0.1:1"),
        ("msg-timeout", "2s"),
        ("snappy", "false"),
        ("tls-required", "true"),
        ("lookupd-tcp-address", "a:1"),
        ("lookupd-tcp-address", "b:2"),
    ]
    assert parsed.ignored == ["statsd-mem-stats", "data-path"]
    assert parsed.rest == ["rest", "-verbose"]  # Go stops at the first non-flag
    for bad in (["-msg-timeout"], ["---x"], ["-tombstone-lifetime=1s"]):
        with pytest.raises(FlagError):
            parse(bad, NSQD_FLAGS)
    assert parse(["-tombstone-lifetime=1s"], NSQLOOKUPD_FLAGS).values == [
        ("tombstone-lifetime", "1s")
    ]


def test_every_flag_of_the_real_daemons_is_known() -> None:
    from nsqclient.testing._process import find_nsq_binary

    for name, table in (("nsqd", NSQD_FLAGS), ("nsqlookupd", NSQLOOKUPD_FLAGS)):
        binary = find_nsq_binary(name)  # missing binaries fail, as everywhere in the suite
        out = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, timeout=DEADLINE
        )
        names = {
            line.split()[0].lstrip("-")
            for line in (out.stdout + out.stderr).splitlines()
            if line.startswith("  -")
        }
        assert names and names == set(table), (name, names ^ set(table))
