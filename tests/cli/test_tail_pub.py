"""``nsqclient pub`` and ``nsqclient tail`` end to end, as subprocesses against nsqd."""

from __future__ import annotations

import base64
import json
import os
import pty
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nsqclient.http import SyncNsqdHTTPClient
from tests.support import wait_until

from .conftest import (
    DEADLINE,
    SIGNALS,
    Running,
    channel_stats,
    channels_of,
    clean_env,
    cli,
    topic_stats,
    unique,
)

pytestmark = pytest.mark.timeout(60)


def create_channel(nsqd: Any, topic: str, channel: str) -> None:
    with SyncNsqdHTTPClient(nsqd.http_address) as client:
        client.create_topic(topic)
        client.create_channel(topic, channel)


def binary_bodies(count: int, seed: int) -> list[bytes]:
    """Random bodies of every byte value except the delimiter used (NUL)."""
    rng = random.Random(seed)
    bodies = [
        bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 300))) for _ in range(count)
    ]
    bodies[0] = b"\n\r\xff\xfe line breaks and invalid UTF-8 \x80"
    return bodies


def test_pub_then_tail_round_trips_binary_bodies(nsqd: Any) -> None:
    topic = unique()
    bodies = binary_bodies(25, seed=1)
    pub = cli("pub", "--topic", topic, "--delimiter", r"\0", "--nsqd-tcp-address",
              nsqd.tcp_address, input=b"\0".join(bodies) + b"\0")  # fmt: skip
    assert pub.returncode == 0, pub.stderr
    assert topic_stats(nsqd, topic)["message_count"] == len(bodies)

    tail = cli("tail", "--topic", topic, "-n", str(len(bodies)), "--delimiter", r"\0",
               "--nsqd-tcp-address", nsqd.tcp_address)  # fmt: skip
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.endswith(b"\0")
    assert sorted(tail.stdout[:-1].split(b"\0")) == sorted(bodies)


def test_tail_json_carries_exact_bodies_and_metadata(nsqd: Any) -> None:
    topic = unique()
    bodies = [b"plain text", "caf\u00e9".encode(), b"\xff\x00\x01 not utf-8"]
    for body in bodies:
        nsqd.pub(topic, body)
    tail = cli("tail", "--topic", topic, "-n", "3", "--json", "--nsqd-tcp-address",
               nsqd.tcp_address)  # fmt: skip
    assert tail.returncode == 0, tail.stderr
    records = [json.loads(line) for line in tail.stdout.splitlines()]
    decoded = []
    for record in records:
        assert record["topic"] == topic and record["attempts"] == 1
        assert len(record["id"]) == 16 and record["timestamp"] > 0
        if record["encoding"] == "base64":
            decoded.append(base64.b64decode(record["body"]))
        else:
            assert record["encoding"] == "utf-8"
            decoded.append(record["body"].encode("utf-8"))
    assert sorted(decoded) == sorted(bodies)
    assert [r["encoding"] for r in records].count("base64") == 1


def test_tail_several_topics_print_topic_and_pretty(nsqd: Any) -> None:
    first, second = unique("a"), unique("b")
    nsqd.pub(first, b'{"k": [1, 2]}')
    nsqd.pub(second, b"not json")
    tail = cli("tail", "--topic", first, "--topic", second, "-n", "2", "--print-topic",
               "--pretty", "--nsqd-tcp-address", nsqd.tcp_address)  # fmt: skip
    assert tail.returncode == 0, tail.stderr
    out = tail.stdout.decode()
    assert f"{second} | not json\n" in out
    assert f'{first} | {{\n  "k": [\n    1,\n    2\n  ]\n}}\n' in out


def test_tail_leaves_no_channel_and_nothing_in_flight(nsqd: Any) -> None:
    topic = unique()
    for i in range(5):
        nsqd.pub(topic, b"m%d" % i)
    tail = cli("tail", "--topic", topic, "-n", "2", "--nsqd-tcp-address", nsqd.tcp_address)
    assert tail.returncode == 0, tail.stderr
    assert len(tail.stdout.splitlines()) == 2
    # the ephemeral channel disappears with its last client (nsqd does this asynchronously)
    wait_until(lambda: channels_of(nsqd, topic) == [], what="the tail channel to be deleted")


def test_tail_on_a_named_channel_fins_exactly_what_it_printed(nsqd: Any) -> None:
    topic, channel = unique(), unique("c")
    for i in range(10):
        nsqd.pub(topic, b"m%d" % i)
    tail = cli("tail", "--topic", topic, "--channel", channel, "-n", "4",
               "--nsqd-tcp-address", nsqd.tcp_address)  # fmt: skip
    assert tail.returncode == 0, tail.stderr
    assert len(tail.stdout.splitlines()) == 4

    def settled() -> dict[str, Any] | None:
        c = channel_stats(nsqd, topic, channel)
        return c if c and c["client_count"] == 0 and c["in_flight_count"] == 0 else None

    stats = wait_until(settled, what="tail to disconnect")
    assert stats["depth"] == 6  # the rest, and what was delivered but not shown, are back


def test_tail_requeue_leaves_a_live_channel_untouched(nsqd: Any) -> None:
    topic, channel = unique(), unique("live")
    for i in range(3):
        nsqd.pub(topic, b"m%d" % i)
    # the channel exists (with the 3 messages) before tail peeks at it
    create_channel(nsqd, topic, channel)
    nsqd.pub(topic, b"m3")
    tail = cli("tail", "--topic", topic, "--channel", channel, "--requeue", "-n", "4",
               "--nsqd-tcp-address", nsqd.tcp_address)  # fmt: skip
    assert tail.returncode == 0, tail.stderr
    assert sorted(tail.stdout.splitlines()) == [b"m0", b"m1", b"m2", b"m3"]
    stats = wait_until(
        lambda: (c := channel_stats(nsqd, topic, channel)) and c["client_count"] == 0 and c,
        what="tail to disconnect",
    )
    assert stats["in_flight_count"] == 0
    assert stats["depth"] == 4  # every message is still there for the real consumers


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_signal_ends_tail_promptly_with_nothing_in_flight(
    nsqd: Any, running: Any, signum: int, code: int
) -> None:
    topic, channel = unique(), unique("c")
    for i in range(3):
        nsqd.pub(topic, b"m%d" % i)
    # --requeue holds what it shows: the signal must hand those messages back
    proc: Running = running(["tail", "--topic", topic, "--channel", channel, "--requeue",
                             "--nsqd-tcp-address", nsqd.tcp_address])  # fmt: skip
    shown = sorted(proc.line() for _ in range(3))
    assert shown == [b"m0", b"m1", b"m2"]
    wait_until(
        lambda: (c := channel_stats(nsqd, topic, channel)) and c["in_flight_count"] == 3,
        what="the three messages to be in flight",
    )
    proc.signal(signum)
    assert proc.wait(timeout=10) == code, proc.stderr
    stats = channel_stats(nsqd, topic, channel)
    assert stats is not None and stats["in_flight_count"] == 0 and stats["depth"] == 3


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_signal_ends_pub_promptly_with_every_sent_message_acknowledged(
    nsqd: Any, running: Any, signum: int, code: int
) -> None:
    topic = unique()
    proc: Running = running(
        ["pub", "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address], stdin=True
    )
    proc.write(b"one\ntwo\nthree\n")  # stdin stays open: pub waits for more
    wait_until(
        lambda: (t := topic_stats(nsqd, topic)) and t["message_count"] == 3,
        what="three messages at nsqd",
    )
    proc.signal(signum)
    assert proc.wait(timeout=10) == code
    assert b"3 messages published and acknowledged, 0 not acknowledged" in proc.stderr
    assert topic_stats(nsqd, topic)["message_count"] == 3


def test_pub_files_batch_and_body(nsqd: Any, tmp_path: Path) -> None:
    topic = unique()
    first = tmp_path / "a.txt"
    first.write_bytes(b"1\n2\n\n3")  # no final newline; one empty line (skipped)
    second = tmp_path / "b.txt"
    second.write_bytes(b"4\n5\n6\n7\n")
    result = cli("pub", "--topic", topic, "--batch", "3", str(first), str(second),
                 "--nsqd-tcp-address", nsqd.tcp_address)  # fmt: skip
    assert result.returncode == 0, result.stderr
    result = cli("pub", "--topic", topic, "--body", "8", "--body", "9",
                 "--nsqd-tcp-address", nsqd.tcp_address)  # fmt: skip
    assert result.returncode == 0, result.stderr
    tail = cli("tail", "--topic", topic, "-n", "9", "--nsqd-tcp-address", nsqd.tcp_address)
    assert tail.returncode == 0, tail.stderr
    assert sorted(tail.stdout.split()) == [b"%d" % i for i in range(1, 10)]


def test_pub_defer_uses_dpub(nsqd: Any) -> None:
    topic, channel = unique(), unique("c")
    create_channel(nsqd, topic, channel)
    result = cli("pub", "--topic", topic, "--defer", "600000", "--rate", "1000",
                 "--nsqd-tcp-address", nsqd.tcp_address, input=b"x\ny\n")  # fmt: skip
    assert result.returncode == 0, result.stderr
    stats = channel_stats(nsqd, topic, channel)
    assert stats is not None and stats["deferred_count"] == 2 and stats["depth"] == 0


def test_pub_too_large_message_fails_saying_what_was_published(nsqd: Any) -> None:
    topic = unique()
    data = b"ok1\nok2\n" + b"x" * (1_048_576 + 1) + b"\nnever\n"
    result = cli("pub", "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address, input=data)
    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "2 messages published and acknowledged" in lines[0], lines
    assert topic_stats(nsqd, topic)["message_count"] == 2


def test_pub_progress_goes_to_stderr_only_on_a_terminal(nsqd: Any) -> None:
    topic = unique()
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "nsqclient", "pub", "--topic", topic,
             "--nsqd-tcp-address", nsqd.tcp_address],
            input=b"a\nb\nc\n",
            stdout=subprocess.PIPE,
            stderr=slave,
            env=clean_env(),
            timeout=DEADLINE,
            check=False,
        )  # fmt: skip
        os.close(slave)
        slave = -1
        seen = b""
        while b"\n" not in seen:  # the final progress line ends with a newline
            seen += os.read(master, 4096)
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    assert proc.returncode == 0 and proc.stdout == b""
    assert b"sent 3, acknowledged 3" in seen
    quiet = cli("pub", "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address, input=b"d\n")
    assert quiet.returncode == 0 and quiet.stderr == b""  # not a terminal: nothing


def test_tail_ends_when_the_reader_of_its_output_leaves(nsqd: Any) -> None:
    topic = unique()
    nsqd.pub(topic, b"first")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsqclient", "tail", "--topic", topic,
         "--nsqd-tcp-address", nsqd.tcp_address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"first\n"
        proc.stdout.close()  # like `| head -1` exiting: no further message is needed to notice
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stderr.close()
    assert err == b""
    wait_until(lambda: channels_of(nsqd, topic) == [], what="the tail channel to be deleted")


def test_pub_batch_splits_mpubs_that_would_exceed_max_body_size(nsqd: Any) -> None:
    topic = unique()
    bodies = [bytes([65 + i]) * 600_000 for i in range(12)]  # 7.2 MB > nsqd's 5 MiB body limit
    result = cli("pub", "--topic", topic, "--batch", "12", "--nsqd-tcp-address", nsqd.tcp_address,
                 input=b"\n".join(bodies) + b"\n")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert topic_stats(nsqd, topic)["message_count"] == 12
