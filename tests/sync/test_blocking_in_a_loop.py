"""A blocking publish from a thread that runs an event loop blocks that loop until nsqd
answers (4.9 ms a call measured, every other task of the loop stalled): said once, with what to
use instead, and the publish still works (issue 51)."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from nsqclient.sync import SyncWriter
from nsqclient.sync import writer as writer_module
from nsqclient.testing.daemons import NsqdProcess

from .support import message_count, unique

pytestmark = pytest.mark.timeout(60)


def test_a_blocking_publish_inside_a_running_loop_warns_once(
    nsqd: NsqdProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "_warned_in_loop", False)
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(topic, b"outside a loop")  # no warning (filterwarnings=error would raise)

        async def view() -> None:  # e.g. an async web framework calling sync code
            with pytest.warns(RuntimeWarning, match=r"blocks that loop.*aio\.pub") as seen:
                writer.pub(topic, b"inside")
                writer.mpub(topic, [b"inside", b"again"])
            assert len(seen) == 1  # once
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                writer.pub(topic, b"and again")  # said already: no more

        asyncio.run(view())
        writer.pub_nowait(topic, b"a future does not block").result(10)
    assert message_count(nsqd, topic) == 6
