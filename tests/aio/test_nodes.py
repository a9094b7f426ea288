"""The node set both Reader and Writer use: which nsqd to retry, when to stop, what is logged."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from nsqclient.addresses import Address, format_address
from nsqclient.aio import Writer
from nsqclient.aio.nodes import NodeSet
from nsqclient.aio.options import ClientOptions
from nsqclient.config import Config
from nsqclient.protocol.identify import IdentifyOptions
from nsqclient.testing.daemons import NsqdProcess, NsqlookupdProcess, free_port
from tests.support import wait_for

from .conftest import DEADLINE

pytestmark = pytest.mark.timeout(60)

log = logging.getLogger("nsqclient.test")


class _Owner:
    """A ConnectionOwner for node sets whose connections never come up."""

    _watch_fin = False

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no connection should have reached its owner ({name})")


def _node_set(config: Config, ups: list[object]) -> NodeSet:
    lookupd_only = ClientOptions(
        config, IdentifyOptions.from_config(config), None, [], [], [], False
    )
    return NodeSet(
        lookupd_only,
        _Owner(),  # type: ignore[arg-type]
        running=lambda: True,
        on_up=ups.append,
        log=log,
    )


async def test_a_node_lookupd_drops_stops_being_retried_and_may_come_back() -> None:
    dead: Address = ("127.0.0.1", free_port())
    ups: list[object] = []
    nodes = _node_set(Config(reconnect_delay=60_000, max_reconnect_delay=60_000), ups)
    async with asyncio.timeout(DEADLINE):
        await nodes.start()
        nodes._on_producers([dead])  # the poller's report: a new node is tried at once
        first = nodes._reconnects[dead]
        await wait_for(lambda: nodes.outages.down == [format_address(*dead)], what="a failure")
        nodes._on_producers([])  # no longer listed: forgotten, its retries stop
        assert dead not in nodes._reconnects and nodes.outages.down == []
        nodes._on_producers([dead])  # listed again before the old retry task has ended
        second = nodes._reconnects[dead]
        assert second is not first
        await asyncio.gather(first, return_exceptions=True)
        assert first.cancelled()
        await asyncio.sleep(0)  # the old task's done callback has run
        assert nodes._reconnects.get(dead) is second  # and did not drop the new one
        await nodes.stop_discovery()
        assert second.done() and not nodes._reconnects
    assert ups == []


async def test_a_recovered_writer_connection_logs_one_info_line(
    nsqd: NsqdProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nsqclient")
    async with Writer([nsqd.tcp_address], reconnect_delay=20, max_reconnect_delay=40) as writer:
        up = [r.getMessage() for r in caplog.records if r.name == "nsqclient.writer"]
        assert up == [f"writer connected to nsqd {nsqd.tcp_address}"]
        caplog.clear()
        nsqd.stop()
        await wait_for(lambda: writer.connections == [], what="the connection to drop")
        await wait_for(lambda: writer.stats()["nsqd_down"], what="a failed reconnect")
        nsqd.start()
        await wait_for(lambda: writer.connections, what="the reconnect")
    infos = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and nsqd.tcp_address in r.getMessage()
    ]
    assert len(infos) == 1 and "again after an outage of" in infos[0], infos


async def test_a_writer_forgets_an_nsqd_lookupd_no_longer_lists(
    nsqlookupd: NsqlookupdProcess, nsqd_factory: Any
) -> None:
    nsqd = nsqd_factory(lookupd_tcp_addresses=[nsqlookupd.tcp_address])
    await asyncio.to_thread(nsqlookupd.wait_for_nodes, [nsqd.tcp_address])
    async with asyncio.timeout(DEADLINE + 10):
        async with Writer(
            lookupd_http_addresses=[nsqlookupd.http_address],
            reconnect_delay=50,
            max_reconnect_delay=250,
            lookupd_poll_interval=1000,
            lookupd_poll_jitter=0.0,
        ) as writer:
            await wait_for(lambda: writer.connections, what="the discovered nsqd")
            await asyncio.to_thread(nsqd.stop)  # a clean stop: nsqd leaves lookupd too
            await wait_for(lambda: writer.connections == [], what="the connection to drop")
            await wait_for(lambda: not nsqlookupd.nodes(), what="lookupd to drop the node")
            # once a poll no longer lists it: no more retries, no outage to report (before the
            # node set, a Writer retried every node it had ever discovered, forever)
            await wait_for(
                lambda: writer.stats()["nsqd_down"] == [] and not writer._nodes._reconnects,
                what="the node to be forgotten",
            )
            assert writer.stats()["connection_losses"] == 1
