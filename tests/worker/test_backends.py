"""``nsqclient worker`` end to end on both backends (real nsqd 1.3.0 and the embedded server):
plain and ``async def`` handlers, several processes, every message handled once, ``/stats``
summing the children, each child's log lines naming it, and a graceful stop leaving nothing at
nsqd. The supervisor's other behaviours (kills, recycling, health states, signals) are
``test_worker.py``, on real nsqd."""

from __future__ import annotations

import re
import signal
from typing import Any

import pytest

from tests.support import unique, wait_until

from .conftest import channel_stats

pytestmark = pytest.mark.timeout(60)

COUNT = 12


@pytest.mark.parametrize("handler", ["plain", "coro"])
def test_every_message_is_handled_once_across_processes(
    nsqd: Any, worker: Any, handler: str
) -> None:
    topic = unique()
    bodies = [f"m{i}" for i in range(COUNT)]
    for body in bodies:
        nsqd.pub(topic, body.encode())
    run = worker([f"worker_tasks:{handler}", "--topic", topic, "--channel", "c",
                  "--processes", "2", "--nsqd-tcp-address", nsqd.tcp_address,
                  "--health-address", "127.0.0.1:0", "--opt", "close_timeout=2000"])  # fmt: skip
    run.wait_done(COUNT)
    # the children's stats(), summed by the supervisor (each answers when asked)
    status, stats = run.wait_health(
        "/stats",
        until=lambda answer: answer[1]["total"].get("finished") == COUNT
        and answer[1]["total"].get("connections") == 2,  # (a child reconnecting counts 0)
        what="/stats to count every FIN, each child connected",
    )
    assert status == 200 and stats["processes"] == 2
    assert sum(c["stats"]["finished"] for c in stats["children"]) == COUNT
    assert {c["index"] for c in stats["children"]} == {0, 1}
    assert stats["total"]["connections"] == 2 and stats["total"]["topic"] == topic

    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log
    assert sorted(run.done_bodies()) == sorted(bodies)  # each exactly once
    # each child's log lines carry its index and pid, and its pid is one that handled messages
    children = {int(pid): int(i) for i, pid in re.findall(r"\[worker (\d) pid (\d+)\]", run.log)}
    assert set(children.values()) == {0, 1}
    assert {pid for pid, _ in run.events("done")} <= set(children)
    final = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="both children's connections to close",
    )
    assert (final["depth"], final["in_flight_count"], final["requeue_count"]) == (0, 0, 0)
    assert final["message_count"] == COUNT
