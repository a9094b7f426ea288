"""Interop with NSQ's own tools, built by test_service/build_nsq.sh from the same module proxy
as nsqd: ``to_nsq`` -> ``nsqclient tail`` and ``nsqclient pub`` -> ``nsq_tail``."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from nsqclient.testing.daemons import NsqBinaryNotFound, find_nsq_binary

from .conftest import DEADLINE, clean_env, cli, topic_stats, unique

pytestmark = pytest.mark.timeout(60)

LINES = [b"first", b"caf\xc3\xa9", b"with | pipe", b'{"json": true}']


def go_tool(name: str) -> str:
    """The Go tool next to nsqd; missing binaries fail (as the daemon fixtures do)."""
    try:
        return str(find_nsq_binary(name))
    except NsqBinaryNotFound as exc:
        pytest.fail(f"{exc} (build_nsq.sh builds {name} too)", pytrace=False)


def test_to_nsq_then_nsqclient_tail(nsqd: Any) -> None:
    topic = unique()
    go = subprocess.run(
        [go_tool("to_nsq"), "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address],
        input=b"\n".join(LINES) + b"\n",
        capture_output=True,
        env=clean_env(),
        timeout=DEADLINE,
        check=False,
    )
    assert go.returncode == 0, go.stderr
    assert topic_stats(nsqd, topic)["message_count"] == len(LINES)
    tail = cli("tail", "--topic", topic, "-n", str(len(LINES)), "--nsqd-tcp-address",
               nsqd.tcp_address)  # fmt: skip
    assert tail.returncode == 0, tail.stderr
    assert sorted(tail.stdout.splitlines()) == sorted(LINES)


def test_nsqclient_pub_then_nsq_tail(nsqd: Any) -> None:
    topic = unique()
    pub = cli("pub", "--topic", topic, "--batch", "2", "--nsqd-tcp-address", nsqd.tcp_address,
              input=b"\n".join(LINES) + b"\n")  # fmt: skip
    assert pub.returncode == 0, pub.stderr
    go = subprocess.run(
        [go_tool("nsq_tail"), "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address,
         "-n", str(len(LINES)), "--print-topic"],
        capture_output=True,
        env=clean_env(),
        timeout=DEADLINE,
        check=False,
    )  # fmt: skip
    assert go.returncode == 0, go.stderr
    assert sorted(go.stdout.splitlines()) == sorted(topic.encode() + b" | " + li for li in LINES)
