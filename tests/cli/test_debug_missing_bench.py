"""``--debug`` tracebacks on every error path, a missing ``--topic``/``--channel`` as an error,
and ``bench`` with the flag names, defaults and name of the other commands."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import Any

import pytest

from nsqclient.benchmark import run_cli
from nsqclient.testing.daemons import free_port

from .conftest import cli, topic_stats, unique

pytestmark = pytest.mark.timeout(60)


def _unreachable() -> str:
    return f"127.0.0.1:{free_port()}"


def _bench(tcp: str, http: str, *, old_names: bool = False) -> list[str]:
    tcp_flag, http_flag = (
        ("--nsqd-tcp", "--nsqd-http")
        if old_names
        else ("--nsqd-tcp-address", "--nsqd-http-address")
    )
    return ["bench", "--scenarios", "tcp-pub", "--messages", "200", "--quiet", tcp_flag, tcp,
            http_flag, http]  # fmt: skip


def _error_paths() -> list[Any]:
    tcp, http = "--nsqd-tcp-address", "--nsqd-http-address"
    return [
        pytest.param(["tail", "--topic", "t", tcp], "tail", id="tail"),
        # pub says how many were published: the path that used to skip the traceback
        pytest.param(["pub", "--topic", "t", "--body", "x", tcp], "pub", id="pub"),
        pytest.param(["stat", "--count", "1", http], "stat", id="stat"),
        pytest.param(["topics", http], "topics", id="topics"),
        pytest.param(["channels", "--topic", "t", http], "channels", id="channels"),
        pytest.param(["topic", "create", "t", http], "topic create", id="topic-create"),
        pytest.param(
            ["bench", "--scenarios", "tcp-pub", tcp, "127.0.0.1:1", http], "bench", id="bench"
        ),
    ]


@pytest.mark.parametrize(("args", "command"), _error_paths())
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_every_command_says_one_line_and_debug_adds_the_traceback(
    args: list[str], command: str, debug: bool
) -> None:
    result = cli(*(["--debug"] if debug else []), *args, _unreachable())
    assert result.returncode == 1, result.stderr
    err = result.stderr.decode()
    errors = [line for line in err.splitlines() if line.startswith(f"nsqclient {command}: error")]
    assert len(errors) == 1, err
    assert ("Traceback (most recent call last)" in err) is debug, err
    assert err.rstrip().endswith(errors[0])  # the line comes last, after the traceback


def test_debug_after_the_bench_name_too() -> None:
    args = _bench("127.0.0.1:1", _unreachable())
    result = cli(*args, "--debug")
    assert result.returncode == 1
    assert "Traceback" in result.stderr.decode()


def test_an_error_on_one_nsqd_of_an_action_gets_its_traceback(nsqd: Any) -> None:
    missing = unique()  # pause of a topic nsqd does not have: 404 from that nsqd
    args = ["topic", "pause", missing, "--nsqd-http-address", nsqd.http_address]
    plain, debug = cli(*args), cli("--debug", *args)
    assert plain.returncode == debug.returncode == 1
    assert "Traceback" not in plain.stderr.decode()
    assert "Traceback" in debug.stderr.decode()
    last = debug.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("nsqclient topic pause: error on") and nsqd.http_address in last


def test_debug_traceback_of_the_embedded_nsqd() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        args = ["nsqd", "--tcp-address", address, "--http-address", "127.0.0.1:0"]
        plain, debug = cli(*args), cli("--debug", *args)
    assert plain.returncode == debug.returncode == 1, plain.stderr
    assert "Traceback" not in plain.stderr.decode()
    assert "Traceback" in debug.stderr.decode()
    assert debug.stderr.decode().strip().splitlines()[-1].startswith("nsqclient nsqd: error")


# -- a missing topic or channel ---------------------------------------------------------------


def test_channels_of_a_missing_topic_exit_1_naming_it(nsqd: Any) -> None:
    missing = unique()
    result = cli("channels", "--topic", missing, "--nsqd-http-address", nsqd.http_address)
    assert result.returncode == 1
    assert result.stdout == b""
    [line] = result.stderr.decode().strip().splitlines()
    assert line.startswith("nsqclient channels: error") and repr(missing) in line
    assert nsqd.http_address in line
    assert topic_stats(nsqd, missing) is None  # asking did not create it


def test_channels_of_a_topic_without_channels_is_empty_not_an_error(nsqd: Any) -> None:
    topic = unique()
    nsqd.pub(topic, b"x")
    result = cli("channels", "--topic", topic, "--nsqd-http-address", nsqd.http_address)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""


def test_channels_of_a_missing_topic_through_lookupd(nsq_cluster: Any) -> None:
    lookupd = ["--lookupd-http-address", nsq_cluster.lookupd.http_address]
    missing = unique()
    result = cli("channels", "--topic", missing, *lookupd)
    assert result.returncode == 1
    assert repr(missing) in result.stderr.decode()
    topic = unique()
    nsqd = nsq_cluster.nsqds[0]
    nsqd.pub(topic, b"x")
    nsq_cluster.lookupd.wait_for_topic(topic, [nsqd.tcp_address])
    found = cli("channels", "--topic", topic, *lookupd)
    assert found.returncode == 0, found.stderr


def test_stat_of_a_missing_topic_or_channel_exits_1_naming_it(nsqd: Any) -> None:
    http = ["--nsqd-http-address", nsqd.http_address]
    missing = unique()
    result = cli("stat", "--count", "1", "--topic", missing, *http)
    assert result.returncode == 1
    assert repr(missing) in result.stderr.decode() and result.stdout == b""
    topic = unique()
    nsqd.pub(topic, b"x")
    no_channel = cli("stat", "--count", "1", "--topic", topic, "--channel", "nope", *http)
    assert no_channel.returncode == 1
    assert "'nope'" in no_channel.stderr.decode() and repr(topic) in no_channel.stderr.decode()
    ok = cli("stat", "--count", "1", "--topic", topic, *http)
    assert ok.returncode == 0, ok.stderr


# -- bench like the other commands ------------------------------------------------------------


def test_bench_is_named_nsqclient_bench() -> None:
    help_ = cli("bench", "--help")
    assert help_.stdout.startswith(b"usage: nsqclient bench")
    assert b"--nsqd-tcp-address" in help_.stdout and b"--nsqd-tcp " not in help_.stdout
    bad = cli("bench", "--no-such-flag")
    assert bad.returncode == 2
    assert bad.stderr.decode().strip().splitlines()[-1].startswith("nsqclient bench: error")
    soak = cli("bench", "soak", "--help")  # repository tooling: says where it is
    assert soak.returncode == 2 and b"python -m benchmarks.soak" in soak.stderr


def test_bench_defaults_to_nsqd_on_localhost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = run_cli.build_parser()
    settings = run_cli.settings_from_args(parser.parse_args([]), parser, environ={})
    assert settings.nsqd_tcp == ["127.0.0.1:4150"]
    assert settings.nsqd_http == ["127.0.0.1:4151"]
    env = {"NSQD_TCP_ADDRESSES": "a:1", "NSQD_HTTP_ADDRESSES": "a:2"}
    from_env = run_cli.settings_from_args(parser.parse_args([]), parser, environ=env)
    assert (from_env.nsqd_tcp, from_env.nsqd_http) == (["a:1"], ["a:2"])


def test_bench_refuses_half_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    parser = run_cli.build_parser()
    args = parser.parse_args(["--nsqd-tcp-address", "a:1"])
    with pytest.raises(SystemExit):
        run_cli.settings_from_args(args, parser, environ={})


def test_bench_old_flag_names_are_hidden_aliases() -> None:
    parser = run_cli.build_parser()
    new = parser.parse_args(["--nsqd-tcp-address", "a:1", "--lookupd-http-address", "l:1"])
    old = parser.parse_args(["--nsqd-tcp", "a:1", "--lookupd-http", "l:1"])
    assert isinstance(new, argparse.Namespace)
    assert (
        (new.nsqd_tcp, new.lookupd_http) == (old.nsqd_tcp, old.lookupd_http) == (["a:1"], ["l:1"])
    )


@pytest.mark.parametrize("old_names", [False, True], ids=["flags", "old-flags"])
def test_bench_runs_against_nsqd(nsqd: Any, old_names: bool) -> None:
    result = cli(*_bench(nsqd.tcp_address, nsqd.http_address, old_names=old_names), timeout=90)
    assert result.returncode == 0, result.stderr
    assert b"tcp-pub" in result.stdout


def test_stat_shows_an_unreachable_nsqd_and_debug_adds_its_traceback(nsqd: Any) -> None:
    dead = _unreachable()
    args = ["stat", "--count", "1", "--nsqd-http-address", f"{nsqd.http_address},{dead}"]
    plain, debug = cli(*args), cli(*args, "--debug")
    assert plain.returncode == debug.returncode == 0, plain.stderr
    assert dead in plain.stdout.decode() and dead in debug.stdout.decode()  # in the table
    assert "Traceback" not in plain.stderr.decode()
    assert "Traceback" in debug.stderr.decode() and dead in debug.stderr.decode()
