"""The loop thread's event loop: ``$NSQCLIENT_LOOP`` chooses asyncio's (the default) or uvloop;
anything else, or uvloop missing, is a ConfigError when the object is made."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest
import uvloop

from nsqclient.errors import ConfigError
from nsqclient.message import Message
from nsqclient.sync import SyncReader, SyncWriter, get_loop
from nsqclient.sync.portal import LOOP_ENV, loop_factory
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_until

from .support import channel_stats, loop_threads, unique


@pytest.mark.parametrize("value", ["trio", "uv", "asyncio,uvloop"])
def test_an_unknown_loop_is_refused_when_the_object_is_made(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(LOOP_ENV, value)
    with pytest.raises(ConfigError, match=r"NSQCLIENT_LOOP=.*use one of asyncio, uvloop"):
        SyncWriter(["127.0.0.1:4150"])
    with pytest.raises(ConfigError, match="NSQCLIENT_LOOP"):
        SyncReader("t", "c", nsqd_tcp_addresses=["127.0.0.1:4150"])
    assert loop_threads() == []  # refused before anything started


def test_uvloop_asked_for_but_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOOP_ENV, "uvloop")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` now raises ImportError
    with pytest.raises(ConfigError, match=r"not installed: pip install 'nsqclient\[uvloop\]'"):
        SyncWriter(["127.0.0.1:4150"])


@pytest.mark.parametrize("value", [None, "", "asyncio", " AsyncIO "])
def test_the_default_is_asyncios_own_loop(
    monkeypatch: pytest.MonkeyPatch, nsqd: NsqdProcess, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(LOOP_ENV, raising=False)
    else:
        monkeypatch.setenv(LOOP_ENV, value)
    assert loop_factory() is asyncio.new_event_loop
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(unique(), b"x")
        assert not isinstance(get_loop(), uvloop.Loop)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", ["uvloop", "UVLOOP"])
def test_the_facade_runs_on_uvloop(
    monkeypatch: pytest.MonkeyPatch, nsqd: NsqdProcess, value: str
) -> None:
    """Publishing from threads, pub_nowait, mpub, iterating and run(): exact counts."""
    monkeypatch.setenv(LOOP_ENV, value)
    topic, channel = unique(), unique()
    with SyncReader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
        reader.start()
        assert isinstance(get_loop(), uvloop.Loop)
        with SyncWriter([nsqd.tcp_address]) as writer:

            def publish(n: int) -> None:
                for i in range(25):
                    writer.pub(topic, b"t%d-%02d" % (n, i))

            threads = [threading.Thread(target=publish, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(20)
            writer.pub_nowait(topic, b"nowait").result(timeout=20)
            writer.mpub(topic, [b"m0", b"m1", b"m2"])
            assert writer.stats()["published"] == 104
        bodies = []
        for msg in reader:
            bodies.append(msg.body)
            msg.fin()
            if len(bodies) == 104:
                break
        stats = reader.stats()
    assert len(set(bodies)) == 104
    assert (stats["received"], stats["finished"]) == (104, 104)
    wait_until(
        lambda: (
            (c := channel_stats(nsqd, topic, channel)) is not None
            and c["message_count"] == 104
            and c["depth"] == 0
            and c["in_flight_count"] == 0
        ),
        what="nsqd to see every message FIN'd",
    )


@pytest.mark.timeout(30)
def test_run_with_a_handler_on_uvloop(monkeypatch: pytest.MonkeyPatch, nsqd: NsqdProcess) -> None:
    monkeypatch.setenv(LOOP_ENV, "uvloop")
    topic, channel = unique(), unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.mpub(topic, [b"%d" % i for i in range(50)])
    seen: list[bytes] = []
    loops: list[asyncio.AbstractEventLoop] = []
    lock = threading.Lock()
    reader = SyncReader(topic, channel, nsqd_tcp_addresses=[nsqd.tcp_address])

    def handler(msg: Message) -> None:
        with lock:
            seen.append(msg.body)
            loops.append(get_loop())
            if len(seen) == 50:
                reader.stop()

    try:
        reader.run(handler, threads=2, timeout=20)
    finally:
        reader.close()
    assert sorted(seen) == sorted(b"%d" % i for i in range(50))
    assert all(isinstance(loop, uvloop.Loop) for loop in loops)
