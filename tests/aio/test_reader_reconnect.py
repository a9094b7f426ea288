"""The Reader keeps consuming across nsqd crashes and restarts, and leaves nothing running once
closed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nsqclient.aio import Message, ReaderState
from nsqclient.errors import ConnectError, WrongPortError
from nsqclient.testing.daemons import NsqdProcess, NsqlookupdProcess, free_port
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import (
    FAST,
    MakeReader,
    NsqdFactory,
    channel_stats,
    publish,
    wait_all_finished,
    wait_connected,
    wait_no_tasks_left,
)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("how", ["sigkill", "restart"])
async def test_direct_nsqd_comes_back_after_a_crash_or_restart(
    nsqd: NsqdProcess, make_reader: MakeReader, how: str
) -> None:
    topic, channel = unique(), unique()
    got: list[bytes] = []
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], **FAST)
    reader.set_message_handler(lambda m: got.append(m.body), direct=True)
    async with asyncio.timeout(DEADLINE + 10):
        await reader.start()
        await publish(nsqd, topic, [b"before"])
        await wait_for(lambda: got == [b"before"])
        await wait_all_finished(nsqd, topic, channel)  # else the restart redelivers it
        (first,) = reader.connections
        if how == "sigkill":
            await asyncio.to_thread(nsqd.kill)
            await wait_for(lambda: not first.is_open, what="the crash to be noticed")
            await asyncio.to_thread(nsqd.restart)
        else:
            await asyncio.to_thread(nsqd.restart)
        await wait_for(
            lambda: reader.connections and reader.connections[0] is not first,
            what="a new connection",
        )
        await wait_connected(reader, 1)
        await publish(nsqd, topic, [b"after"])
        await wait_for(lambda: got == [b"before", b"after"], what="the message published after")
        assert reader.state is ReaderState.RUNNING
        await reader.graceful_close()
    assert channel_stats(nsqd, topic, channel)["depth"] == 0


async def test_start_with_its_only_nsqd_down_comes_up_by_itself(
    nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    """The startup rule: start() does not fail while nsqd is not up yet; the Reader keeps
    retrying and consumes once nsqd is there (a service started before its nsqd)."""
    port = free_port()
    topic, channel = unique(), unique()
    got: list[bytes] = []
    reader = make_reader(topic, channel, nsqd_tcp_addresses=[f"127.0.0.1:{port}"], **FAST)
    reader.set_message_handler(lambda m: got.append(m.body), direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        assert reader.state is ReaderState.RUNNING and reader.connections == []
        late = await asyncio.to_thread(nsqd_factory, tcp_port=port)
        await wait_connected(reader, 1)
        await publish(late, topic, [b"late"])
        await wait_for(lambda: got == [b"late"], what="the message")
        await reader.graceful_close()


async def test_start_refuses_an_http_port_at_once(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """Retrying cannot fix a wrong port: start() raises WrongPortError (a ConnectError)."""
    reader = make_reader(unique(), unique(), nsqd_tcp_addresses=[nsqd.http_address], **FAST)
    with pytest.raises(WrongPortError, match="HTTP port") as info:
        await asyncio.wait_for(reader.start(), DEADLINE)
    assert isinstance(info.value, ConnectError) and info.value.address == nsqd.http_address
    assert reader.is_closed


async def test_nsqd_down_at_start_is_connected_once_it_comes_up(
    nsqd: NsqdProcess, nsqd_factory: NsqdFactory, make_reader: MakeReader
) -> None:
    port = free_port()
    topic, channel = unique(), unique()
    got: list[Message] = []
    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address, f"127.0.0.1:{port}"], **FAST
    )
    reader.set_message_handler(got.append, direct=True)
    async with asyncio.timeout(DEADLINE):
        await reader.start()  # one of two is down: retried in the background
        assert [c.address for c in reader.connections] == [nsqd.tcp_address]
        late = await asyncio.to_thread(nsqd_factory, tcp_port=port)
        await wait_connected(reader, 2)
        await publish(late, topic, [b"late"])
        await wait_for(lambda: [m.body for m in got] == [b"late"])
        assert got[0].nsqd_address == late.tcp_address
        await reader.graceful_close()


@pytest.mark.parametrize("style", ["await close()", "close() without await", "graceful_close()"])
async def test_close_cancels_pending_reconnects_and_polls(
    nsqlookupd: NsqlookupdProcess, make_reader: MakeReader, style: str
) -> None:
    baseline = set(asyncio.all_tasks())
    dead = f"127.0.0.1:{free_port()}"
    reader = make_reader(
        unique(),
        unique(),
        nsqd_tcp_addresses=[dead],
        lookupd_http_addresses=[nsqlookupd.http_address],
        **{
            **FAST,
            "reconnect_delay": 1_000,
            "max_reconnect_delay": 1_000,
            "lookupd_poll_interval": 60_000,
        },
    )
    async with asyncio.timeout(DEADLINE):
        await reader.start()  # the direct nsqd is down: retried in the background
        names = await wait_for(
            lambda: (
                {t.get_name() for t in asyncio.all_tasks() - baseline}
                >= {f"nsq-reconnect-{dead}", "nsq-lookupd"}
                and {t.get_name() for t in asyncio.all_tasks() - baseline}
            ),
            what="a pending reconnect and a lookupd poller",
        )
        assert names
        if style == "await close()":
            await reader.close()
        elif style == "close() without await":
            reader.close()
            await reader.wait_closed()
        else:
            await reader.graceful_close()
        await wait_no_tasks_left(baseline)
    assert reader.is_closed


@pytest.mark.one_backend
async def test_sigstopped_nsqd_is_declared_dead_and_reconnected(
    nsqd: NsqdProcess, make_reader: MakeReader
) -> None:
    """A frozen nsqd stops heartbeating: after two heartbeat intervals the connection is
    dropped, and once nsqd thaws the Reader reconnects and consumes again."""
    topic, channel = unique(), unique()
    got: list[bytes] = []
    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], heartbeat_interval=1000, **FAST
    )
    reader.set_message_handler(lambda m: got.append(m.body), direct=True)
    async with asyncio.timeout(DEADLINE + 10):
        await reader.start()
        (first,) = reader.connections
        nsqd.freeze()
        try:
            await wait_for(lambda: not first.is_open, what="the frozen nsqd to be given up")
        finally:
            nsqd.thaw()
        await wait_for(lambda: reader.connections and reader.connections[0] is not first)
        await wait_connected(reader, 1)
        await publish(nsqd, topic, [b"thawed"])
        await wait_for(lambda: got == [b"thawed"])
        await reader.graceful_close()


async def test_a_connection_lost_with_messages_in_flight_says_what_becomes_of_them(
    nsqd: NsqdProcess, make_reader: MakeReader, caplog: pytest.LogCaptureFixture
) -> None:
    """nsqd SIGKILLed while two messages are unanswered: the INFO line no longer promises
    that nsqd will redeliver them (a crashed nsqd cannot); it says when each case does."""
    topic, channel = unique(), unique()
    held: list[Message] = []
    reader = make_reader(
        topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=2, **FAST
    )
    reader.set_message_handler(lambda m: (m.disable_auto_response(), held.append(m)), direct=True)
    caplog.set_level(logging.INFO, "nsqclient.reader")
    async with asyncio.timeout(DEADLINE):
        await reader.start()
        await publish(nsqd, topic, [b"a", b"b"])
        await wait_for(lambda: len(held) == 2, what="two messages held unanswered")
        (conn,) = reader.connections
        await asyncio.to_thread(nsqd.kill)
        await wait_for(lambda: not conn.is_open, what="the crash to be noticed")
        await reader.close()
    lines = [r.getMessage() for r in caplog.records if "messages in flight" in r.getMessage()]
    assert len(lines) == 1 and "lost with 2 messages in flight" in lines[0]
    assert "will be redelivered" not in lines[0] and "crashed lost them" in lines[0]
