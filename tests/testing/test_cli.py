"""``nsqclient nsqd`` (``python -m nsqclient.testing``) as a separate process: flags
that mirror nsqd's, the printed addresses, real clients through it, a clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.http import NsqdHTTPClient, SyncLookupdHTTPClient
from nsqclient.sync import SyncWriter
from nsqclient.testing.certs import CertBundle
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)

#: the one console script's ``nsqd`` command
COMMAND = [str(Path(sys.executable).parent / "nsqclient"), "nsqd"]
DEADLINE = 15.0


class Server:
    """One embedded-server process and the addresses it printed."""

    def __init__(self, *args: str, command: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*(command or COMMAND), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        deadline = time.monotonic() + DEADLINE
        # stdout is line-buffered by the server (flush=True); readline blocks at most until the
        # server prints or exits, and the test's timeout bounds the whole thing
        while not self.lines or not self.lines[-1].startswith("ready"):
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"server exited early: {self.lines}")
            self.lines.append(line.rstrip("\n"))
            assert time.monotonic() < deadline, self.lines

    def addresses(self, what: str) -> list[str]:
        """Addresses printed as ``<what> <address>`` (e.g. ``nsqd TCP``)."""
        return [line.split()[-1] for line in self.lines if line.split()[:-1] == what.split()]

    def terminate(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=DEADLINE)
        return self.proc.returncode, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=DEADLINE)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.kill()


async def consume(count: int, **reader_options: object) -> list[bytes]:
    bodies: list[bytes] = []
    async with Reader("cli", "ch", max_in_flight=10, **reader_options) as reader:  # type: ignore[arg-type]
        async with asyncio.timeout(DEADLINE):
            async for msg in reader:
                bodies.append(msg.body)
                await msg.fin()
                if len(bodies) == count:
                    break
    return bodies


def test_console_script_serves_real_clients_and_exits_cleanly_on_sigterm(
    servers: list[Server],
) -> None:
    server = Server(
        "--tcp-address=127.0.0.1:0",
        "--http-address",
        "127.0.0.1:0",
        "--msg-timeout",
        "5s",
        "--max-rdy-count=7",
    )
    servers.append(server)
    (tcp,) = server.addresses("nsqd TCP")
    (http,) = server.addresses("nsqd HTTP")
    with SyncWriter([tcp]) as writer:
        writer.pub("cli", b"from SyncWriter")

    async def scenario() -> list[bytes]:
        async with Writer([tcp]) as writer:
            await writer.mpub("cli", [b"from aio 1", b"from aio 2"])
        async with NsqdHTTPClient(http) as client:
            assert await client.config("msg_timeout") == 5_000_000_000  # ns, as nsqd says
            assert await client.config("max_rdy_count") == 7
        return await consume(3, nsqd_tcp_addresses=[tcp])

    bodies = asyncio.run(scenario())
    assert sorted(bodies) == [b"from SyncWriter", b"from aio 1", b"from aio 2"]
    code, rest = server.terminate()
    assert code == 0, rest
    assert rest.splitlines() == ["stopping", "stopped"]


def test_module_with_lookupd_and_several_nsqd(servers: list[Server], tmp_path: Path) -> None:
    env_file = tmp_path / "cluster.env"
    server = Server(
        "--lookupd",
        "--nsqd-count=2",
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--lookupd-tcp-listen=127.0.0.1:0",
        "--lookupd-http-listen=127.0.0.1:0",
        f"--env-file={env_file}",
        command=[sys.executable, "-m", "nsqclient.testing"],
    )
    servers.append(server)
    tcp = server.addresses("nsqd TCP")
    (lookupd_http,) = server.addresses("nsqlookupd HTTP")
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert env["NSQD_TCP_ADDRESSES"].split(",") == tcp
    assert env["NSQLOOKUPD_HTTP_ADDRESSES"] == lookupd_http
    for address in tcp:
        with SyncWriter([address]) as writer:
            writer.pub("cli", address.encode())
    # each nsqd registers the topic with lookupd on its own time; a Reader that asked before the
    # second one did finds it only at its next poll (up to lookupd_poll_interval later), so wait
    # until lookupd lists both, as the cluster fixtures do
    with SyncLookupdHTTPClient(lookupd_http) as lookupd:
        wait_until(
            lambda: len(lookupd.lookup("cli").producers),
            until=lambda found: found == len(tcp),
            what="lookupd to list both nsqd for the topic",
        )
    bodies = asyncio.run(consume(2, lookupd_http_addresses=[lookupd_http]))
    assert sorted(bodies) == sorted(a.encode() for a in tcp)
    code, rest = server.terminate()
    assert code == 0, rest


def test_tls_flags(servers: list[Server], tls_certs: CertBundle) -> None:
    server = Server(
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--tls-cert={tls_certs.server_cert}",
        f"--tls-key={tls_certs.server_key}",
    )
    servers.append(server)
    (tcp,) = server.addresses("nsqd TCP")
    assert server.addresses("nsqd HTTPS")
    options = {"tls_v1": True, "tls_ca_file": str(tls_certs.ca_cert)}
    with SyncWriter([tcp], **options) as writer:
        writer.pub("cli", b"over TLS")
    assert asyncio.run(consume(1, nsqd_tcp_addresses=[tcp], **options)) == [b"over TLS"]
    code, rest = server.terminate()
    assert code == 0, rest


def test_bad_flags_fail_with_a_message() -> None:
    result = subprocess.run(
        [*COMMAND, "--tcp-address=127.0.0.1:0", "--max-deflate-level=12"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert result.returncode == 1
    assert "max-deflate-level" in result.stderr
