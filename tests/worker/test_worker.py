"""The worker supervisor against real nsqd: stopping (SIGTERM with handlers held running, a
second SIGINT), a child SIGKILLed mid-message, recycling, failures at start-up, the health
endpoints in each state, lookupd discovery, OpenTelemetry's process attribute.

Handlers are held with a gate file (``worker_tasks.py``), not slept, so every state a test
looks at lasts until the test ends it. nsqd's counts are read with deadlines (its ``/stats``
follows the commands it received).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nsqclient.sync import SyncWriter
from tests.support import unique, wait_until
from tests.sync.support import drain_bodies

from .conftest import WorkerRun, channel_stats, worker_env

pytestmark = pytest.mark.timeout(90)


def args(target: str, topic: str, nsqd: Any, *more: str) -> list[str]:
    return [f"worker_tasks:{target}", "--topic", topic, "--channel", "c",
            "--nsqd-tcp-address", nsqd.tcp_address, "--health-address", "127.0.0.1:0",
            *more]  # fmt: skip


def publish(nsqd: Any, topic: str, bodies: list[str]) -> None:
    with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b.encode() for b in bodies])


def settled(nsqd: Any, topic: str) -> dict[str, Any]:
    """The channel once the worker's connections are gone."""
    stats: dict[str, Any] = wait_until(
        lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 0 and s,
        what="the worker's connections to close",
    )
    return stats


def in_flight(nsqd: Any, topic: str) -> int:
    stats = channel_stats(nsqd, topic, "c")
    return -1 if stats is None else int(stats["in_flight_count"])


# ---------------------------------------------------------------------- stopping


@pytest.mark.parametrize(
    ("handler", "group"),
    [pytest.param("plain", True, id="plain-group"), pytest.param("coro", False, id="coro")],
)
def test_sigterm_hands_back_what_was_not_started_at_once_and_exits_0(
    nsqd: Any, worker: Any, tmp_path: Path, handler: str, group: bool
) -> None:
    """Two processes x two handlers held running, one more message prefetched by each: after
    SIGTERM (to the supervisor, or to the whole process group as Kubernetes does) the
    prefetched go back to nsqd while the handlers still run; the handlers then finish, and
    nothing is left in flight. (The plain variant rests on the SyncReader handing back its
    not-started messages at once: issue 51's "reader-handback" commit.)"""
    count = 30
    topic = unique()
    bodies = [f"m{i}" for i in range(count)]
    publish(nsqd, topic, bodies)
    gate = tmp_path / "gate"
    width = "--threads" if handler == "plain" else "--concurrency"
    run = worker(args(handler, topic, nsqd, "--processes", "2", width, "2",
                      "--max-in-flight", "3", "--opt", "close_timeout=20000"),
                 WORKER_TEST_GATE=str(gate))  # fmt: skip
    wait_until(lambda: len(run.events("start")), until=lambda n: n == 4, what="4 handlers running")
    wait_until(lambda: in_flight(nsqd, topic), until=lambda n: n == 6, what="6 in flight")
    running = {body for _, body in run.events("start")}

    run.signal(signal.SIGTERM, group=group)
    # the two prefetched messages come back while the four handlers are still held
    wait_until(lambda: channel_stats(nsqd, topic, "c"),
               until=lambda s: s["in_flight_count"] == 4 and s["depth"] == count - 4,
               what="everything not started to be back at nsqd")  # fmt: skip
    assert run.get("/readyz")[0] == 503
    assert run.get("/healthz")[1]["status"] == "stopping"
    assert run.proc.poll() is None and run.done_bodies() == []

    gate.touch()  # the running handlers finish
    assert run.wait() == 0, run.log
    assert set(run.done_bodies()) == running and len(run.done_bodies()) == 4
    final = settled(nsqd, topic)
    assert (final["in_flight_count"], final["depth"]) == (0, count - 4)
    rest = drain_bodies(nsqd, topic, count - 4, channel="c")
    assert sorted([*running, *(b.decode() for b in rest)]) == sorted(bodies)


def test_a_second_sigint_stops_at_once(nsqd: Any, worker: Any, tmp_path: Path) -> None:
    """Ctrl-C twice (to the process group): the first starts the graceful stop, which would
    wait close_timeout (60 s) for handlers held forever; the second stops at once (exit 130)
    and still hands every message back (the immediate close's REQ)."""
    topic = unique()
    publish(nsqd, topic, [f"m{i}" for i in range(6)])
    run = worker(args("plain", topic, nsqd, "--processes", "2", "--threads", "1",
                      "--opt", "close_timeout=60000"),
                 WORKER_TEST_GATE=str(tmp_path / "never"))  # fmt: skip
    wait_until(lambda: len(run.events("start")), until=lambda n: n == 2, what="2 handlers held")
    run.signal(signal.SIGINT, group=True)
    run.wait_log(r"SIGINT received: stopping 2 children gracefully")
    # both children began their graceful close (on the group's SIGINT or the supervisor's SIGTERM)
    run.wait_log(r"stopping \(SIG(INT|TERM)\)", count=2)
    run.signal(signal.SIGINT, group=True)
    assert run.wait(timeout=30) == 130, run.log  # well before the 60 s close_timeout
    assert "stopping 2 children at once" in run.log
    final = settled(nsqd, topic)
    assert (final["in_flight_count"], final["depth"]) == (0, 6), run.log
    assert run.done_bodies() == []


# ---------------------------------------------------------------------- failures


def test_a_sigkilled_child_is_replaced_and_its_message_handled_later(
    nsqd: Any, worker: Any
) -> None:
    """SIGKILL mid-message: the supervisor says how the child died and replaces it at once;
    the message comes back from nsqd (msg_timeout 2 s) and is handled by another child. A
    second death of that slot in a row waits 2 s: /healthz answers 503 once the slot has been
    empty for 1 s, then 200 again when it is filled."""
    topic = unique()
    publish(nsqd, topic, ["hang-1", "m1", "m2"])
    run = worker(args("plain", topic, nsqd, "--processes", "2", "--opt", "msg_timeout=2000",
                      "--opt", "close_timeout=2000"))  # fmt: skip
    victim = wait_until(
        lambda: [pid for pid, body in run.events("start") if body == "hang-1"],
        what="the hanging message to start",
    )[0]
    os.kill(victim, signal.SIGKILL)
    line = run.wait_log(rf"\(pid {victim}\) was killed by SIGKILL")[0]
    assert "replacing it" in line
    status, health = run.wait_health(
        "/healthz",
        until=lambda a: a[1]["processes"] == 2 and a[1]["restarts"] == 1,
        what="the replacement",
    )
    assert status == 200 and health["crashes"] == 1
    handled = wait_until(
        lambda: [pid for pid, body in run.events("done") if body == "hang-1"],
        what="the killed child's message to be handled again",
    )
    assert handled[0] != victim
    # what the killed child had prefetched comes back too
    assert sorted(run.wait_done(3)) == ["hang-1", "m1", "m2"]

    # the same slot dies again soon after: its next child waits 2 s, and the slot is empty
    found = re.search(rf"worker (\d+) \(pid {victim}\)", line)
    assert found is not None, line
    slot = int(found.group(1))
    successor = next(c["pid"] for c in health["children"] if c["index"] == slot)
    os.kill(successor, signal.SIGKILL)
    status, health = run.wait_health("/healthz", until=lambda a: a[0] == 503,
                                      what="/healthz to report the empty slot")  # fmt: skip
    assert health["empty_slots"] == [slot] and health["processes"] == 1
    run.wait_log(r"restarts in 2s")
    run.wait_health("/healthz", until=lambda a: a[0] == 200 and a[1]["processes"] == 2,
                    what="the slot to be filled again")  # fmt: skip
    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log
    final = settled(nsqd, topic)
    assert (final["in_flight_count"], final["depth"]) == (0, 0)


def test_a_target_that_cannot_be_loaded_fails_at_once_naming_it(worker: Any) -> None:
    """No child is ever started (no restart loop): exit 2, the target named."""
    for target, said in [
        ("no_such_module:handle", "cannot import 'no_such_module'"),
        ("worker_tasks:no_such_function", "'worker_tasks' has no 'no_such_function'"),
    ]:
        run: WorkerRun = worker([target, "--topic", "t", "--channel", "c"])
        assert run.wait() == 2, run.log
        assert said in run.log and f"handler '{target}'" in run.log
        assert "[worker" not in run.log and "Traceback" not in run.log


def test_children_dying_at_start_up_end_the_worker(worker: Any, nsqd: Any) -> None:
    """``--init`` raises in every child: three start-up deaths in a row, then exit 3 (no
    fourth attempt), each death and its cause logged."""
    run = worker(args("plain", unique(), nsqd, "--processes", "2",
                      "--init", "worker_tasks:explode"))  # fmt: skip
    assert run.wait() == 3, run.log
    assert len(re.findall(r"during start-up \(", run.log)) == 3
    assert "RuntimeError: init of worker" in run.log
    assert "died during start-up 3 times in a row" in run.log.splitlines()[-1]


# ---------------------------------------------------------------------- recycling


def test_recycling_after_n_messages_handles_each_once(nsqd: Any, worker: Any) -> None:
    """One process recycled every 4 messages: 10 messages, three children (4, 4, 2), each
    message handled once; each replacement is ready before its predecessor is stopped."""
    topic = unique()
    bodies = [f"m{i}" for i in range(10)]
    publish(nsqd, topic, bodies)
    run = worker(args("plain", topic, nsqd, "--processes", "1",
                      "--max-messages-per-child", "4", "--opt", "close_timeout=2000"))  # fmt: skip
    run.wait_done(10)
    assert sorted(run.done_bodies()) == sorted(bodies)
    per_child: dict[int, int] = {}
    for pid, _ in run.events("done"):
        per_child[pid] = per_child.get(pid, 0) + 1
    assert sorted(per_child.values()) == [2, 4, 4], per_child
    run.wait_log(r"worker 0 \(pid \d+\) exited", count=2)
    log = run.err
    for old in [pid for pid, n in per_child.items() if n == 4]:
        stopping = next(i for i, s in enumerate(log) if f"; stopping pid {old}" in s)
        exited = next(i for i, s in enumerate(log) if f"(pid {old}) exited" in s)
        assert stopping < exited and " is ready; " in log[stopping]
    health = run.get("/healthz")[1]
    assert (health["recycled"], health["restarts"], health["crashes"]) == (2, 2, 0)
    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log
    final = settled(nsqd, topic)
    assert (final["in_flight_count"], final["depth"]) == (0, 0)


# ---------------------------------------------------------------------- discovery, health


def test_lookupd_discovery_and_readiness(nsqlookupd: Any, nsqd_factory: Any, worker: Any) -> None:
    """Through lookupd the children start before any nsqd has the topic: /healthz is 200,
    /readyz 503 until each child found the nsqd and connected, then 200."""
    nsqd = nsqd_factory(lookupd_tcp_addresses=[nsqlookupd.tcp_address])
    topic = unique()
    run = worker(["worker_tasks:coro", "--topic", topic, "--channel", "c", "--processes", "2",
                  "--lookupd-http-address", nsqlookupd.http_address, "--health-address",
                  "127.0.0.1:0", "--opt", "lookupd_poll_interval=1000",
                  "--opt", "close_timeout=2000"])  # fmt: skip
    run.wait_health("/healthz",
                    until=lambda a: a[0] == 200 and [c["started"] for c in a[1]["children"]]
                    == [True, True], what="both children started")  # fmt: skip
    status, ready = run.get("/readyz")
    assert status == 503 and ready["ready_processes"] == 0  # no nsqd has the topic yet
    publish(nsqd, topic, ["a", "b", "c"])
    run.wait_health("/readyz", until=lambda a: a[0] == 200, what="readiness")
    run.wait_done(3)
    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log
    assert settled(nsqd, topic)["depth"] == 0


def test_otel_metrics_of_each_child_carry_its_process(nsqd: Any, worker: Any) -> None:
    """OpenTelemetry set up in each child (``--init``): every metric point carries
    ``nsq.worker.process``, the child's index."""
    topic = unique()
    publish(nsqd, topic, [f"m{i}" for i in range(6)])
    run = worker(args("otel", topic, nsqd, "--processes", "2", "--init",
                      "worker_tasks:otel_init", "--opt", "close_timeout=2000"))  # fmt: skip
    run.wait_done(6)
    index_of = {pid: None for pid, _ in run.events("done")}
    for line in run.out:
        _, pid, _, points, process = line.split(" ")
        assert int(points.removeprefix("points=")) > 0
        value = process.removeprefix("process=")
        assert value in ("0", "1"), line
        assert index_of.setdefault(int(pid), value) in (None, value)
        index_of[int(pid)] = value
    assert len(set(index_of.values())) == len(index_of)  # one index per child
    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log


def test_sighup_replaces_every_child_and_ttin_ttou_resize(nsqd: Any, worker: Any) -> None:
    """SIGHUP: each child's successor first, then the child stops (as gunicorn reloads);
    SIGTTIN and SIGTTOU: one child more, one fewer."""
    topic = unique()
    run = worker(args("plain", topic, nsqd, "--processes", "1", "--opt", "close_timeout=2000"))

    def children() -> list[dict[str, Any]]:
        return list(run.get("/healthz")[1]["children"])

    [first] = wait_until(children, until=lambda c: len(c) == 1 and c[0]["ready"],
                         what="the first child ready")  # fmt: skip
    run.signal(signal.SIGHUP)
    [second] = wait_until(children, what="only its successor left, ready",
                          until=lambda c: len(c) == 1 and c[0]["pid"] != first["pid"]
                          and c[0]["ready"])  # fmt: skip
    assert run.get("/healthz")[1]["restarts"] == 1
    run.wait_log(rf"pid {second['pid']} is ready; stopping pid {first['pid']}")
    run.signal(signal.SIGTTIN)
    wait_until(lambda: run.get("/readyz"), what="two children ready",
               until=lambda a: a[0] == 200 and a[1]["ready_processes"] == 2)  # fmt: skip
    run.signal(signal.SIGTTOU)
    wait_until(children, until=lambda c: [x["pid"] for x in c] == [second["pid"]],
               what="the added child gone")  # fmt: skip
    publish(nsqd, topic, ["a", "b"])
    assert sorted(run.wait_done(2)) == ["a", "b"]
    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log


def test_recycling_past_max_memory_per_child(nsqd: Any, worker: Any) -> None:
    """A child above its memory limit (1 MiB: any child) is replaced, looked at every second;
    each message is still handled once."""
    topic = unique()
    publish(nsqd, topic, ["a", "b", "c"])
    run = worker(args("plain", topic, nsqd, "--processes", "1",
                      "--max-memory-per-child", "1", "--opt", "close_timeout=2000"))  # fmt: skip
    assert sorted(run.wait_done(3)) == ["a", "b", "c"]
    line = run.wait_log(r"is replaced \(max_memory_per_child \(\d+ MiB resident > 1 MiB\)\)")[0]
    old = int(re.search(r"worker 0 \(pid (\d+)\)", line).group(1))  # type: ignore[union-attr]
    run.wait_log(rf"worker 0 \(pid {old}\) exited")
    assert run.log.count("above --max-memory-per-child at its first look") == 1
    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log
    assert sorted(run.done_bodies()) == ["a", "b", "c"]
    final = settled(nsqd, topic)
    assert (final["in_flight_count"], final["depth"]) == (0, 0)


def test_run_takes_any_callable(nsqd: Any, tmp_path: Path) -> None:
    """``nsqclient.worker.run()`` from a script, with a closure as the handler: the children
    are forked, so nothing needs to be importable by name."""
    topic = unique()
    publish(nsqd, topic, ["x", "y"])
    script = tmp_path / "service.py"
    script.write_text(
        "import os, sys\n"
        "import nsqclient.worker\n"
        "seen = []\n"
        "def make():\n"
        "    def handle(msg):\n"
        "        seen.append(msg.body)\n"
        "        os.write(1, b'done %d ' % len(seen) + msg.body + b'\\n')\n"
        "    return handle\n"
        "if __name__ == '__main__':\n"
        f"    sys.exit(nsqclient.worker.run(make(), {topic!r}, 'c', processes=1,\n"
        f"        nsqd_tcp_addresses=[{nsqd.tcp_address!r}], close_timeout=2000))\n"
    )
    with subprocess.Popen([sys.executable, str(script)], env=worker_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, proc.stderr.read()
        log = proc.stderr.read()
    assert sorted(lines) == ["done 1 x", "done 2 y"] or sorted(lines) == ["done 1 y", "done 2 x"]
    assert "[worker 0 pid" in log and "worker_tasks" not in log
