"""Line-syntax facts of nsq-protocol.md §2.2 / §4.13 that the encoders rely on, checked on real
nsqd: why a name must not contain a space or newline, why a line must stay short, and so on."""

from __future__ import annotations

import pytest
from nsqd_support import options, unique, wait_channel

from nsqclient.protocol import OK, ErrorFrame, commands
from nsqclient.testing.daemons import NsqdProcess
from tests.rawconn_support import RawConnection

pytestmark = pytest.mark.timeout(60)


def test_empty_line_is_an_invalid_command(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        conn.send(b"\n")
        assert conn.expect_closed() == [ErrorFrame("E_INVALID invalid command ")]


def test_carriage_return_before_newline_is_stripped(nsqd: NsqdProcess) -> None:
    topic = unique()
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        assert conn.command(b"SUB " + topic.encode() + b" ch\r\n") is OK
        conn.send(b"NOP\r\n")
        assert conn.command(commands.pub(unique(), b"x")) is OK


def test_rdy_without_count_means_one(nsqd: NsqdProcess) -> None:
    topic = unique()
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        assert conn.command(commands.sub(topic, "ch")) is OK
        nsqd.pub(topic, b"one")
        nsqd.pub(topic, b"two")
        conn.send(b"RDY\n")
        conn.read_message()
        stats = wait_channel(nsqd, topic, "ch", in_flight_count=1, depth=1)
        assert stats["clients"][0]["ready_count"] == 1


def test_a_space_in_a_topic_would_become_a_second_parameter(nsqd: NsqdProcess) -> None:
    # "PUB a b": nsqd publishes to topic "a" and ignores "b" -- the encoder must refuse spaces
    first = unique()
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        assert conn.command(b"PUB " + first.encode() + b" extra\n\x00\x00\x00\x01x") is OK
        assert conn.command(b"SUB " + first.encode() + b" ch extra params\n") is OK


def test_line_longer_than_nsqds_buffer_closes_without_error_frame(nsqd: NsqdProcess) -> None:
    # why names are bounded and bodies travel length-prefixed: a >16 KiB line just kills the link
    with RawConnection.connect(nsqd.tcp_address, options()) as conn:
        conn.send(b"PUB " + b"a" * 20_000 + b"\n")
        assert conn.expect_closed() == []
