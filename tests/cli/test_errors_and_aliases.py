"""Exit codes and error lines of the ``nsqclient`` command, and the ``bench`` / ``nsqd``
subcommands with their old script names. No daemon: unreachable addresses are free ports."""

from __future__ import annotations

import signal
import sys
from importlib import metadata
from typing import Any

import pytest

from nsqclient.testing.daemons import free_port

from .conftest import cli

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["tail"], id="tail-without-topic"),
        pytest.param(["tail", "--topic", "bad topic!"], id="invalid-topic"),
        pytest.param(["tail", "--topic", "t", "-n", "0"], id="n-zero"),
        pytest.param(["pub", "--topic", "t", "--batch", "0"], id="batch-zero"),
        pytest.param(["pub", "--topic", "t", "--delimiter", ""], id="empty-delimiter"),
        pytest.param(["pub", "--topic", "t", "--defer", "5", "--batch", "2"], id="defer-batch"),
        pytest.param(["pub", "--topic", "t", "--body", "x", "file"], id="body-and-file"),
        pytest.param(["tail", "--topic", "t", "--opt", "no_such_option=1"], id="unknown-opt"),
        pytest.param(["tail", "--topic", "t", "--snappy", "--deflate"], id="snappy-deflate"),
        pytest.param(["stat", "--interval", "-1"], id="negative-interval"),
        pytest.param(["worker", "tasks:handle", "--topic", "t"], id="worker-without-channel"),
        pytest.param(["worker", "no_colon", "--topic", "t", "--channel", "c"], id="worker-target"),
        pytest.param(
            ["worker", "json:dumps", "--topic", "t", "--channel", "c", "--concurrency", "2"],
            id="worker-concurrency-for-plain",
        ),
        pytest.param(["topic", "explode", "t"], id="unknown-action"),
        pytest.param(["no-such-command"], id="unknown-command"),
        pytest.param([], id="no-command"),
    ],
)
def test_bad_usage_exits_2_with_a_clear_line(args: list[str]) -> None:
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    err = result.stderr.decode()
    assert "Traceback" not in err
    assert "error" in err or "usage" in err
    if args:  # argparse's usage line, or our single error line
        assert err.strip().splitlines()[-1].startswith(("nsqclient", "usage"))


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["tail", "--topic", "t", "--nsqd-tcp-address"], id="tail"),
        pytest.param(["pub", "--topic", "t", "--body", "x", "--nsqd-tcp-address"], id="pub"),
        pytest.param(["stat", "--count", "1", "--nsqd-http-address"], id="stat"),
        pytest.param(["topics", "--nsqd-http-address"], id="topics"),
        pytest.param(["topic", "create", "t", "--nsqd-http-address"], id="topic-create"),
        pytest.param(["tail", "--topic", "t", "--lookupd-http-address"], id="tail-lookupd"),
    ],
)
def test_unreachable_daemon_exits_1_with_one_line(args: list[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    result = cli(*args, address)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"nsqclient {args[0]}") and "error" in lines[0]
    assert address in lines[0] or "127.0.0.1" in lines[0]


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_adds_the_traceback(where: str) -> None:
    args = ["tail", "--topic", "t", "--nsqd-tcp-address", f"127.0.0.1:{free_port()}"]
    result = cli(*(["--debug", *args] if where == "before" else [*args, "--debug"]))
    assert result.returncode == 1
    err = result.stderr.decode()
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("nsqclient tail: error")


def test_every_subcommand_help_shows_an_example() -> None:
    for command in ("tail", "pub", "stat", "topics", "channels", "topic", "channel", "nsqd",
                    "worker"):  # fmt: skip
        result = cli(command, "--help")
        assert result.returncode == 0, (command, result.stderr)
        assert b"example" in result.stdout and b"nsqclient " + command.encode() in result.stdout
    bench = cli("bench", "--help")
    assert bench.returncode == 0 and b"example" in bench.stdout


def test_bench_subcommand_is_the_benchmark() -> None:
    result = cli("bench", "--list")
    old = cli_module("nsqclient.benchmark", "--list")
    assert result.returncode == 0 and old.returncode == 0
    assert result.stdout == old.stdout and b"tcp-pub" in result.stdout


def test_one_console_script() -> None:
    """``nsqclient bench`` and ``nsqclient nsqd`` are the benchmark and the embedded server."""
    scripts = {
        ep.name: ep.value
        for ep in metadata.entry_points(group="console_scripts")
        if ep.value.startswith("nsqclient")
    }
    assert scripts == {"nsqclient": "nsqclient.cli:main"}


def test_version() -> None:
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.startswith(b"nsqclient ")


def cli_module(module: str, *args: str) -> object:
    import subprocess

    from .conftest import clean_env

    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        env=clean_env(),
        timeout=30,
        check=False,
    )


def test_nsqd_subcommand_serves_until_sigterm(running: Any) -> None:
    proc = running(["nsqd", "--tcp-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"])
    lines = [proc.line() for _ in range(3)]
    assert lines[0].startswith(b"nsqd TCP  127.0.0.1:") and lines[2].startswith(b"ready")
    tcp = lines[0].split()[-1].decode()
    pub = cli("pub", "--topic", "t", "--body", "hello", "--nsqd-tcp-address", tcp)
    assert pub.returncode == 0, pub.stderr
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
