"""Fork: a child never touches the parent's loop thread or sockets; objects created before the
fork rebuild themselves in the child on first use. Nothing hangs and every message is accounted
for (FIN'd exactly once across all processes)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

from nsqclient.message import Message
from nsqclient.sync import SyncReader, SyncWriter
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import DEADLINE, channel_stats, collect, loop_threads, unique

CHILDREN = 4


def _fork(child: Callable[[], dict[str, Any]]) -> tuple[int, int]:
    """Run ``child`` in a forked process; returns (pid, read end of its result pipe)."""
    read, write = os.pipe()
    with warnings.catch_warnings():  # 3.12+: "this process is multi-threaded" - intended here
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            os.close(read)
            result = child()
            os.write(write, json.dumps(result).encode())
        except BaseException as exc:
            os.write(write, json.dumps({"error": repr(exc)}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _reap(pid: int, read: int) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE * 2
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"child {pid} hung")
        time.sleep(0.02)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    result: dict[str, Any] = json.loads(b"".join(chunks) or b'{"error": "no result"}')
    assert os.waitstatus_to_exitcode(status) == 0, result
    assert "error" not in result, result
    return result


def test_fork_children_use_objects_created_before_the_fork(nsqd: NsqdProcess) -> None:
    topic = unique()
    writer = SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address])
    reader = SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=10)
    finished: list[bytes] = []
    published = [f"parent-pre-{i}".encode() for i in range(40)]
    writer.mpub(topic, published)
    # the parent consumes a few, and holds one unanswered across the fork
    finished += [m.body for m in collect(reader, 3)]
    [held] = collect(reader, 1, fin=False)
    parent_loop = loop_threads()

    def child(index: int) -> dict[str, Any]:
        assert loop_threads() == []  # the parent's loop thread does not exist here
        held.fin()  # the parent's delivery: ignored here, the parent answers it
        mine = [f"child-{index}-{i}".encode() for i in range(25)]
        writer.mpub(topic, mine[:5])  # the pre-fork writer, rebuilt in this process
        for body in mine[5:]:
            writer.pub(topic, body)
        got: list[str] = []
        for _ in range(8):  # the pre-fork reader, rebuilt: a new subscriber on the channel
            msg = reader.get(timeout=DEADLINE)
            assert msg is not None
            msg.fin()
            got.append(msg.body.decode())
        with SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as fresh:  # and a new one
            fresh.pub(topic, f"child-{index}-fresh".encode())
        reader.graceful_close()
        writer.graceful_close()
        assert loop_threads() == []
        return {"published": [b.decode() for b in mine] + [f"child-{index}-fresh"], "fin": got}

    children = [_fork(lambda i=i: child(i)) for i in range(CHILDREN)]
    # the parent goes on publishing and consuming with the same objects meanwhile
    post = [f"parent-post-{i}".encode() for i in range(40)]
    for body in post:
        writer.pub(topic, body)
    published += post
    held.fin()
    finished.append(held.body)
    results = [_reap(pid, read) for pid, read in children]
    assert loop_threads() == parent_loop  # untouched by the children
    for result in results:
        published += [b.encode() for b in result["published"]]
        finished += [b.encode() for b in result["fin"]]
    assert len(published) == 40 + 40 + CHILDREN * 26
    assert len(finished) == len(set(finished)), "FIN'd twice: " + json.dumps(
        [r["fin"] for r in results]
    )
    missing = set(published) - set(finished)
    while missing:
        msg = reader.get(timeout=DEADLINE)
        assert msg is not None, f"{len(missing)} messages never arrived: {sorted(missing)[:5]}"
        msg.fin()
        assert msg.body in missing, f"{msg!r} {msg.body!r} was already finished"
        missing.discard(msg.body)
        finished.append(msg.body)
    assert reader.get(timeout=0.3) is None  # nothing extra (bounded look)
    reader.graceful_close()
    writer.graceful_close()
    assert sorted(finished) == sorted(published)  # each FIN'd exactly once, none lost
    stats = channel_stats(nsqd, topic, "c")
    assert stats is not None and stats["depth"] == 0 and stats["in_flight_count"] == 0
    assert stats["timeout_count"] == 0


def _mp_child(reader: SyncReader, writer: SyncWriter, topic: str, queue: Any) -> None:
    writer.pub(topic, f"mp-{os.getpid()}".encode())
    held: list[Message] = []
    for _ in range(3):
        msg = reader.get(timeout=DEADLINE)
        assert msg is not None
        held.append(msg)
    queue.put(len(held))
    # returns without closing or answering: multiprocessing ends the child with os._exit (no
    # atexit); the library's exit hook must still requeue what this child holds


def test_multiprocessing_fork_children_exit_without_closing(nsqd: NsqdProcess) -> None:
    topic = unique()
    ctx = multiprocessing.get_context("fork")
    with (
        SyncWriter(nsqd_tcp_addresses=[nsqd.tcp_address]) as writer,
        SyncReader(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=5) as reader,
    ):
        writer.mpub(topic, [f"{i}".encode() for i in range(12)])
        queue = ctx.Queue()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            procs = [
                ctx.Process(target=_mp_child, args=(reader, writer, topic, queue)) for _ in range(2)
            ]
            for p in procs:
                p.start()
        for p in procs:
            p.join(DEADLINE * 2)
            assert p.exitcode == 0
        assert sorted(queue.get(timeout=DEADLINE) for _ in procs) == [3, 3]
        queue.close()
        queue.join_thread()
        wait_until(
            lambda: (s := channel_stats(nsqd, topic, "c")) and s["client_count"] == 1,
            what="the children's connections to close",
        )
        # all 14 (12 + one per child) come to the parent at once: nothing left to nsqd's timeout
        got = collect(reader, 14)
        assert len({m.body for m in got}) == 14
    stats = channel_stats(nsqd, topic, "c")
    assert stats is not None and stats["timeout_count"] == 0 and stats["in_flight_count"] == 0
