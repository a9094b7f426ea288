"""The pytest plugin as a user meets it: a throwaway project with a consumer and a test that
uses the ``nsqd`` fixture, run by pytest in a subprocess, with nothing installed but nsqclient.

Once with the embedded backend forced, once with real binaries (``NSQ_BIN_DIR``), once with the
choice left to ``auto``; each run checks from the inside which backend its fixtures used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsqclient.testing.daemons import find_nsq_binary

pytestmark = pytest.mark.timeout(120)

CONSUMER = '''
"""The user's code under test: collect messages of a topic/channel."""
import asyncio

from nsqclient.aio import Reader


async def collect(topic, channel, count, *, nsqd_tcp_addresses=(), lookupd_http_addresses=(),
                  timeout=15.0):
    bodies = []
    reader = Reader(topic, channel, nsqd_tcp_addresses=list(nsqd_tcp_addresses),
                    lookupd_http_addresses=list(lookupd_http_addresses),
                    lookupd_poll_interval=1000, max_in_flight=10)
    async with reader:
        async with asyncio.timeout(timeout):
            async for msg in reader:
                bodies.append(msg.body)
                await msg.fin()
                if len(bodies) == count:
                    break
    return bodies
'''

TESTS = """
import asyncio
import os

from nsqclient.sync import SyncWriter
from nsqclient.testing import NsqdProcess, ThreadedEmbeddedNsqd

from consumer import collect

EXPECTED = os.environ["EXPECTED_BACKEND"]


def test_consumer_reads_what_was_published(nsqd, nsq_backend):
    assert nsq_backend == EXPECTED
    assert isinstance(nsqd, NsqdProcess if EXPECTED == "real" else ThreadedEmbeddedNsqd)
    with SyncWriter([nsqd.tcp_address]) as writer:
        for i in range(3):
            writer.pub("orders", f"order {i}".encode())
    got = asyncio.run(collect("orders", "billing", 3, nsqd_tcp_addresses=[nsqd.tcp_address]))
    assert sorted(got) == [b"order 0", b"order 1", b"order 2"]
    assert nsqd.stats(topic="orders")["topics"][0]["message_count"] == 3


def test_consumer_finds_nsqd_through_lookupd(nsq_cluster):
    for i, nsqd in enumerate(nsq_cluster.nsqds):
        nsqd.pub("events", f"from nsqd {i}".encode())
    got = asyncio.run(collect("events", "audit", len(nsq_cluster.nsqds),
                              lookupd_http_addresses=[nsq_cluster.lookupd.http_address]))
    assert sorted(got) == [f"from nsqd {i}".encode() for i in range(len(nsq_cluster.nsqds))]


def test_lookupd_fixture(nsqlookupd, nsqd_factory):
    nsqd = nsqd_factory(lookupd_tcp_addresses=[nsqlookupd.tcp_address])
    nsqd.pub("t", b"x")
    nsqlookupd.wait_for_nodes([nsqd.tcp_address])
"""

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


def make_project(root: Path) -> Path:
    root.mkdir()
    (root / "consumer.py").write_text(textwrap.dedent(CONSUMER))
    (root / "test_consumer.py").write_text(textwrap.dedent(TESTS))
    (root / "pytest.ini").write_text(INI)
    return root


def run_pytest(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH into this repository, no backend set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NSQ_BIN_DIR")}
    env.pop("NSQCLIENT_BACKEND", None)
    env.pop("PYTEST_ADDOPTS", None)
    env.update(extra)
    return env


def check(result: subprocess.CompletedProcess[str], passed: int = 3) -> None:
    summary = result.stdout.strip().splitlines()[-1:] or [""]
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{passed} passed" in summary[0], result.stdout


def test_embedded_backend_forced_by_option(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    result = run_pytest(project, user_env(EXPECTED_BACKEND="embedded"), "--nsq-backend=embedded")
    check(result)


def test_embedded_backend_forced_by_environment(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    env = user_env(EXPECTED_BACKEND="embedded", NSQCLIENT_BACKEND="embedded")
    check(run_pytest(project, env, "-k", "published"), passed=1)


def test_real_backend_with_nsq_bin_dir(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    bin_dir = find_nsq_binary("nsqd").parent  # test_service/.bin, built by bootstrap.sh
    env = user_env(EXPECTED_BACKEND="real", NSQ_BIN_DIR=str(bin_dir))
    result = run_pytest(project, env, "--nsq-backend=real", "-v")  # -v: show the header
    check(result)
    assert "nsqclient: NSQ backend real" in result.stdout  # the report header


def test_auto_picks_real_binaries_when_found(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    env = user_env(EXPECTED_BACKEND="real", NSQ_BIN_DIR=str(find_nsq_binary("nsqd").parent))
    check(run_pytest(project, env, "-k", "published"), passed=1)


def test_auto_without_binaries_is_embedded(tmp_path: Path) -> None:
    """Outside a checkout, with nothing on NSQ_BIN_DIR or PATH, auto means embedded."""
    project = make_project(tmp_path / "proj")
    empty = tmp_path / "empty"
    empty.mkdir()
    python_dir = str(Path(sys.executable).parent)
    env = user_env(EXPECTED_BACKEND="embedded", PATH=f"{empty}{os.pathsep}{python_dir}")
    check(run_pytest(project, env, "-k", "published"), passed=1)


def test_a_checkouts_layout_is_not_searched(tmp_path: Path) -> None:
    """The installed plugin knows no checkout's layout: a ``test_service/.bin`` above the folder
    pytest runs in is not looked for (the repository's own conftest points NSQ_BIN_DIR at it),
    so with nothing on NSQ_BIN_DIR or PATH the automatic choice is the embedded server."""
    checkout = tmp_path / "checkout"
    (checkout / "test_service").mkdir(parents=True)
    (checkout / "test_service" / ".bin").symlink_to(find_nsq_binary("nsqd").parent)
    project = make_project(checkout / "proj")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = user_env(
        EXPECTED_BACKEND="embedded", PATH=f"{empty}{os.pathsep}{Path(sys.executable).parent}"
    )
    check(run_pytest(project, env, "-k", "published"), passed=1)


def test_forced_real_without_binaries_fails_with_how_to_build(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    empty = tmp_path / "empty"
    empty.mkdir()
    # no binaries anywhere: NSQ_BIN_DIR and PATH empty, and the project is outside any checkout
    env = user_env(EXPECTED_BACKEND="real", NSQ_BIN_DIR=str(empty), PATH=str(empty))
    result = run_pytest(project, env, "--nsq-backend=real", "-k", "published")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 error" in result.stdout and "NSQ binary 'nsqd' not found" in result.stdout
    # what an installed user can do: install or point at binaries, or go embedded
    assert "build_nsq.sh" not in result.stdout
    assert "NSQ_BIN_DIR" in result.stdout and "--nsq-backend=embedded" in result.stdout
