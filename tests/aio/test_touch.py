"""AutoTouch's timing rules, without a server (tests/aio/test_reader_timeouts.py runs it live)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from nsqclient.aio.touch import AutoTouch


def _touch(conns: list[Any], msg_timeout_ms: float = 0, running: bool = True) -> AutoTouch:
    return AutoTouch(
        connections=lambda: conns,
        messages=list,
        running=lambda: running,
        msg_timeout_ms=msg_timeout_ms,
    )


def _conn(msg_timeout: int, max_msg_timeout: int) -> Any:
    return SimpleNamespace(
        identify_response=SimpleNamespace(msg_timeout=msg_timeout, max_msg_timeout=max_msg_timeout)
    )


def test_interval_is_half_the_shortest_msg_timeout_and_cap_the_smallest_max() -> None:
    touch = _touch(
        [_conn(10_000, 600_000), _conn(4_000, 900_000), SimpleNamespace(identify_response=None)]
    )
    assert touch.interval() == 2.0
    assert touch.cap() == 600.0
    touch.max_seconds = 5.0
    assert touch.cap() == 5.0


def test_without_connections_the_configured_then_nsqds_default_timeouts_apply() -> None:
    assert _touch([], msg_timeout_ms=3_000).interval() == 1.5
    assert _touch([]).interval() == 30.0  # nsqd's 60 s default
    assert _touch([]).cap() == 900.0


@pytest.mark.timeout(5)
async def test_arm_sets_a_timer_only_when_enabled_and_running() -> None:
    loop = asyncio.get_running_loop()
    touch = _touch([_conn(60_000, 900_000)])
    touch.arm(loop)
    assert touch._handle is None  # not enabled
    touch.enabled = True
    stopped = _touch([], running=False)
    stopped.enabled = True
    stopped.arm(loop)
    assert stopped._handle is None
    touch.arm(loop)
    handle = touch._handle
    assert handle is not None and handle.when() == pytest.approx(loop.time() + 30.0, abs=1.0)
    touch.cancel()
    assert touch._handle is None and handle.cancelled()
