"""The ``otel`` extra stays optional: nothing imports OpenTelemetry unless asked, and without
it installed the clients work as before (checked in fresh interpreters)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_clients_does_not_import_opentelemetry() -> None:
    out = run(
        """
        import sys
        import nsqclient, nsqclient.aio, nsqclient.sync, nsqclient.observability
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    assert out.strip() == "[]"


BLOCK_OTEL = """
import sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is blocked (the otel extra is not installed)")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
"""


def test_without_opentelemetry_clients_publish_and_consume() -> None:
    out = run(
        BLOCK_OTEL
        + """
import asyncio
from nsqclient.aio import Reader, Writer
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing import start_nsqd
from nsqclient import observability

nsqd = start_nsqd("embedded")
try:
    with SyncWriter([nsqd.tcp_address]) as w:
        w.mpub("t", [b"1", b"2"])
    with SyncReader("t", "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as r:
        for n, msg in enumerate(r, 1):
            msg.fin()
            if n == 2:
                break

    async def main():
        async with Writer([nsqd.tcp_address]) as w:
            await w.pub("u", b"x")
        async with Reader("u", "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as r:
            async for msg in r:
                msg.fin()
                return msg.body

    print(asyncio.run(main()))
    try:
        observability.instrument()
    except ImportError as exc:
        print("ImportError:", "nsqclient[otel]" in str(exc))
finally:
    nsqd.stop()
"""
    )
    assert out.split() == ["b'x'", "ImportError:", "True"]
