"""Fixtures for the blocking facade's tests (all against real nsqd).

Every test here must leave no sync object open and no ``nsqclient-loop`` thread running: the
autouse ``no_leftover_loop_thread`` fixture checks that after each test (lease counting is part
of the contract), then cleans up so one failure does not cascade.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from nsqclient.sync import portal

from .support import DEADLINE, loop_threads


@pytest.fixture(autouse=True)
def no_leftover_loop_thread() -> Iterator[None]:
    yield
    deadline = time.monotonic() + DEADLINE
    while loop_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    leftover = loop_threads()
    still_open = list(portal._open.values())
    if leftover or still_open:
        portal._close_open_objects_at_exit()  # clean up for the next test, then fail this one
        pytest.fail(
            f"test left {len(still_open)} sync objects open ({still_open!r}) and loop threads "
            f"{[t.name for t in leftover]}"
        )
    assert threading.active_count() < 64
