"""The thread paths of a blocking publish, driven step by step at named points (real nsqd).

Each scenario stops a thread at a named point of the wing (``Shared.read``: holding the turn,
about to read; the wire held by the test: writers queue) and lets the rest of the world move
(the loop's own command, a close, a refusal, a deadline, a cancel), then checks the invariant
the scenario is about at that very moment, lets the thread go, and checks the outcome. Nothing
waits on the machine's speed: every step waits for the condition it is about.

Every scenario runs twice: on the code as it is, where it must find nothing, and on a version
of it with the race the scenario is about (a ``mutant``, patched in for the run), where it must
find the race: so each test would catch the bug it is named for. Each runs on a plain TCP, a
TLS (a CA and client certificates) and a deflate connection, where the thread that reads takes
the wire to decrypt and the writers encode (the mutants on plain TCP and TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import struct
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from nsqclient.aio import connection as connection_module
from nsqclient.aio import sharing as sharing_module
from nsqclient.aio.replies import ReplyQueue
from nsqclient.aio.sharing import Shared
from nsqclient.errors import (
    BadMessageError,
    NotSentTimeoutError,
    NSQError,
    NSQTimeoutError,
)
from nsqclient.flow import turns as turns_module
from nsqclient.flow.turns import RESUME, ReadTurns, Turn
from nsqclient.protocol.frames import ErrorFrame
from nsqclient.sync import SyncWriter
from nsqclient.sync import door as door_module
from nsqclient.sync import ticket as ticket_module
from nsqclient.sync.door import Door
from nsqclient.sync.future import PublishFuture
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import NsqdProcess

from .kinds_support import DEFLATE, PLAIN, TLS, Kind
from .support import frozen, message_count, unique

pytestmark = [pytest.mark.timeout(90), pytest.mark.real_nsqd_only]

Problems = list[str]


@dataclass(frozen=True)
class On:
    """What a scenario runs on: a kind of connection and the client options for it."""

    kind: Kind
    options: dict[str, Any]


#: a scenario on the code with its race may leave a publish that never settles: the close
#: then waits this long, not the default 30 s
FAST = {"close_timeout": 2_000, "publish_timeout": 3_000}


class Stop:
    """A named point where one chosen thread stops (the first time it gets there) until the
    test lets it go."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.arrived = threading.Event()
        self.go = threading.Event()

    def here(self) -> None:
        if threading.current_thread() is not self.thread or self.arrived.is_set():
            return
        self.arrived.set()
        if not self.go.wait(60):
            raise AssertionError("a stopped thread was never let go")

    def reached(self) -> None:
        assert self.arrived.wait(20), "the thread never reached its stop"

    def release(self) -> None:
        self.go.set()


@contextlib.contextmanager
def stop_at_read(stop: Stop) -> Iterator[None]:
    """``Shared.read``: a thread holding the turn, about to poll and read the socket."""
    original = Shared.read

    def read(self: Shared, view: memoryview, timeout: float) -> int:
        stop.here()
        return original(self, view, timeout)

    Shared.read = read  # type: ignore[method-assign]
    try:
        yield
    finally:
        Shared.read = original  # type: ignore[method-assign]


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, original)


class Runner:
    """A thread running ``fn``, keeping its result or error."""

    def __init__(self, fn: Callable[[], Any], stop: Stop | None = None) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        if stop is not None:
            stop.thread = self.thread
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # (handed to the test)
            self.error = exc

    def join(self) -> Runner:
        self.thread.join(30)
        assert not self.thread.is_alive(), "a publishing thread never returned"
        return self


def _until(condition: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Wait for ``condition`` (AssertionError when it never holds: a scenario's finding)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.005)
    return value


def _door(writer: SyncWriter) -> Door:
    """The one door, once the threads have the turn (a first publish passes it to them)."""
    writer.start()
    doors = _until(lambda: writer._doors.open, "a shared connection")
    door: Door = doors[0]
    writer.pub(unique(), b"warm")  # written through the door: the loop passes the turn on
    _until(lambda: door.shared.turns.state is Turn.OPEN, "the turn to be the threads'")
    return door


def _unread(shared: Shared) -> int:
    """Bytes waiting unread in the connection's socket (nsqd's replies, for the next read)."""
    sock = shared._sock
    if sock is None:
        return 0
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0])


def _unread_at_least(shared: Shared, n: int) -> None:
    _until(lambda: _unread(shared) >= n, f"{n} bytes from nsqd")


def _on_loop(writer: SyncWriter, fn: Callable[[], Any]) -> Any:
    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), writer.loop).result(10)


def _count(nsqd: NsqdProcess, topic: str) -> int:
    """nsqd's count for ``topic``, read once every publish of it returned (nsqd counts a
    message before it acknowledges it)."""
    time.sleep(0)  # (a yield first: the lesson of nsqd's /stats)
    return message_count(nsqd, topic)


# -- 1. the loop takes reading back while a thread reads ----------------------------------


def loop_takes_reading_back(nsqd: NsqdProcess, on: On) -> Problems:
    problems: Problems = []
    topic = unique()
    with SyncWriter([nsqd.tcp_address], **FAST, **on.options) as writer:
        door = _door(writer)
        shared = door.shared
        stop = Stop()
        loop_reads: list[int] = []
        original = connection_module.Connection.buffer_updated

        def buffer_updated(self: Any, nbytes: int) -> None:
            if stop.arrived.is_set() and not stop.go.is_set():  # t1 holds the turn
                loop_reads.append(nbytes)
            original(self, nbytes)

        with (
            stop_at_read(stop),
            patched(connection_module.Connection, "buffer_updated", buffer_updated),
        ):
            t1 = Runner(lambda: writer.pub(topic, b"t1"), stop)
            stop.reached()  # t1 holds the turn; its OK waits in the socket
            co = asyncio.run_coroutine_threadsafe(writer.aio.pub(topic, b"co"), writer.loop)
            # the loop sent its own command and asked for reading back; both OKs come now
            _until(
                lambda: shared.turns.reclaim or shared.turns.state is not Turn.HELD,
                "the loop's command seen by the turn",
            )
            # both replies wait in the socket for t1, unless the loop read them (a second
            # reader: invariant 1)
            _until(lambda: loop_reads or _unread(shared) >= 2 * on.kind.reply, "both replies")
            reading = _on_loop(writer, shared._transport.is_reading)
            if loop_reads or reading:  # (loop_reads read after: the loop may read meanwhile)
                problems.append("the loop read while a thread held the turn")
            stop.release()
        t1.join()
        co.result(10)
        if t1.error is not None:
            problems.append(f"the thread's publish raised {t1.error!r}")
        if _count(nsqd, topic) != 2:
            problems.append(f"nsqd stored {message_count(nsqd, topic)} of 2")
    return problems


def loop_reads_at_once(self: ReadTurns, now: float) -> int:
    """(mutant) the loop resumes reading on its own command even while a thread reads"""
    if self.state is Turn.CLOSED:
        return 0
    self.hold_until = now + 1.0
    self.state = Turn.LOOP
    return RESUME


# -- 2. close while a thread holds the turn --------------------------------------------------


def close_while_a_thread_reads(nsqd: NsqdProcess, on: On) -> Problems:
    problems: Problems = []
    topic = unique()
    writer = SyncWriter([nsqd.tcp_address], **FAST, **on.options)
    try:
        door = _door(writer)
        shared = door.shared
        stop = Stop()
        with stop_at_read(stop), frozen(nsqd):  # (frozen: its reply cannot come first)
            t1 = Runner(lambda: writer.pub(topic, b"t1"), stop)
            stop.reached()
            closer = Runner(writer.close)
            _until(lambda: shared.turns.closing, "the connection to be lost")
            if shared.socket_closed:  # invariant 4: never closed under a reading thread
                problems.append("the socket was closed while a thread held the turn")
            stop.release()
            closer.join()
        t1.join()
        if not isinstance(t1.error, NSQError) or not t1.error.sent:
            problems.append(f"the thread's publish ended with {t1.error!r}")
        _until(lambda: shared.socket_closed, "the holder to close the socket")
    finally:
        writer.close()
    return problems


def lost_closes_at_once(self: Shared) -> None:
    """(mutant) the socket closes when the connection is lost, whoever reads it"""
    self.turns.close()
    self._close_socket()
    if self.side is not None:
        self.side.lost()


# -- 3. a refused publish among sixteen threads ----------------------------------------------


def a_refusal_among_sixteen(nsqd_factory: Callable[..., NsqdProcess], on: On) -> Problems:
    problems: Problems = []
    small = nsqd_factory(extra_args=["--max-msg-size=100"])
    topic = unique()
    with SyncWriter([small.tcp_address], **FAST, **on.options) as writer:
        door = _door(writer)
        door.wire.acquire()  # every publish queues: one holder writes them all at once
        try:
            runners = [
                Runner(lambda i=i: writer.pub(topic, b"x" * (200 if i == 7 else 50)))
                for i in range(16)
            ]
            _until(lambda: door.queued == 16, "sixteen queued publishes")
        finally:
            door.wire.release()
        door.write_queued()
        for r in runners:
            r.join()
        refused = [r for r in runners if r.error is not None]
        if len(refused) != 1 or not isinstance(refused[0].error, BadMessageError):
            problems.append(f"refusals: {[r.error for r in refused]!r} (one BadMessageError)")
        stats = writer.stats()
        if (stats["published"], stats["failed"]) != (16, 1):  # (the warm-up's, and 15)
            problems.append(f"counted published={stats['published']} failed={stats['failed']}")
    if _count(small, topic) != 15:
        problems.append(f"nsqd stored {message_count(small, topic)} of 15")
    return problems


def error_frames_taken_as_oks(
    self: ReplyQueue, events: list[Any], now: float, done: list[Any]
) -> tuple[int, int]:
    """(mutant) a reading thread takes an error frame as the OK of the reply it answers"""
    events = [connection_module.OK if isinstance(e, ErrorFrame) else e for e in events]
    return ORIGINAL_TAKE_FOR_THREAD(self, events, now, done)


ORIGINAL_TAKE_FOR_THREAD = ReplyQueue.take_for_thread


# -- 4. a timeout in each state ----------------------------------------------------------------


def a_timeout_in_each_state(nsqd: NsqdProcess, on: On) -> Problems:
    problems: Problems = []
    topic = unique()
    with SyncWriter([nsqd.tcp_address], **FAST, **on.options) as writer:
        door = _door(writer)
        base = writer.stats()
        # queued at the door (the wire held): never written, said so
        door.wire.acquire()
        try:
            queued = Runner(lambda: writer.pub(topic, b"queued", timeout=0.2)).join()
        finally:
            door.wire.release()
        door.write_queued()
        if not isinstance(queued.error, NotSentTimeoutError) or queued.error.sent:
            problems.append(f"queued at the door: {queued.error!r}")
        # a deadline passed before the write (timeout 0): never written
        try:
            writer.pub(topic, b"zero", timeout=0)
            problems.append("a publish with timeout 0 returned")
        except NotSentTimeoutError as exc:
            if exc.sent:
                problems.append("timeout 0 said maybe sent")
        # sent and unanswered: maybe stored, counted as failed, also when the OK comes later
        with frozen(nsqd):
            sent = Runner(lambda: writer.pub(topic, b"sent", timeout=0.3)).join()
        if not isinstance(sent.error, NSQTimeoutError) or not sent.error.sent:
            problems.append(f"sent and unanswered: {sent.error!r}")
        writer.pub(topic, b"after")  # its OK comes behind the late one
        stats = writer.stats()
        if stats["published"] - base["published"] != 1 or stats["failed"] - base["failed"] != 3:
            problems.append(
                f"counted {stats['published'] - base['published']} published and "
                f"{stats['failed'] - base['failed']} failed (1 and 3: as the callers saw)"
            )
    if _count(nsqd, topic) != 2:  # "sent" and "after": nothing never-sent was written
        problems.append(f"nsqd stored {message_count(nsqd, topic)} of 2")
    return problems


def claim_everything(tickets: list[Any], now: float, ended: list[Any]) -> list[Any]:
    """(mutant) a writer writes whatever it finds queued, withdrawn or past its deadline"""
    for t in tickets:
        t.state = ticket_module.SENT
    return list(tickets)


# -- 5. a pub_nowait cancelled while queued ----------------------------------------------------


def a_future_cancelled_while_queued(nsqd: NsqdProcess, on: On) -> Problems:
    problems: Problems = []
    topic = unique()
    with SyncWriter([nsqd.tcp_address], **FAST, **on.options) as writer:
        door = _door(writer)
        window = writer._window
        base = window.failed
        door.wire.acquire()
        try:
            future = writer.pub_nowait(topic, b"cancelled")
            if not future.cancel():
                problems.append("a queued future could not be cancelled")
            if window.failed != base + 1:  # counted when it was cancelled (the window's
                # count, read here: stats() asks the loop, which would wait for the wire)
                problems.append("the cancelled publish was not counted at once")
        finally:
            door.wire.release()
        door.write_queued()
        writer.pub(topic, b"after")
    if _count(nsqd, topic) != 1:
        problems.append(f"nsqd stored {message_count(nsqd, topic)} (the cancelled one too?)")
    return problems


def cancel_only_the_future(self: PublishFuture) -> bool:
    """(mutant) cancelling a future leaves its ticket queued, and writers ignore it"""
    return concurrent_cancel(self)


concurrent_cancel = PublishFuture.__mro__[1].cancel  # (concurrent.futures.Future's)


# -- 6. a coroutine and threads on one connection ----------------------------------------------


def a_coroutine_and_threads(nsqd: NsqdProcess, on: On) -> Problems:
    problems: Problems = []
    topic = unique()
    completed_by: list[str] = []

    class Watched(asyncio.Future):  # type: ignore[type-arg]
        def set_result(self, result: Any) -> None:
            completed_by.append(threading.current_thread().name)
            super().set_result(result)

    with SyncWriter([nsqd.tcp_address], **FAST, **on.options) as writer:
        door = _door(writer)
        stop = Stop()
        with stop_at_read(stop), patched(connection_module, "_Future", Watched):
            t1 = Runner(lambda: writer.pub(topic, b"t1"), stop)
            stop.reached()  # t1 holds the turn: its OK, the coroutine's and t2's come to it
            co = asyncio.run_coroutine_threadsafe(writer.aio.pub(topic, b"co"), writer.loop)
            _until(lambda: door.shared.replies.loop_own, "the coroutine's publish")
            t2 = Runner(lambda: writer.pub(topic, b"t2"))
            _until(lambda: len(door.shared.replies) >= 3, "three pending replies")
            _unread_at_least(door.shared, 3 * on.kind.reply)  # t1 reads all three OKs at once
            stop.release()
            t1.join()
            if t1.error is not None:  # (the race broke the reading thread outright)
                return [f"t1 raised {t1.error!r}"]
            t2.join()
            _until(lambda: completed_by, "the coroutine's reply completed")
            writer.loop.call_soon_threadsafe(lambda: None)  # (a wake-up, should it need one)
            co.result(10)
        for name, r in (("t1", t1), ("t2", t2)):
            if r.error is not None:
                problems.append(f"{name} raised {r.error!r}")
        if completed_by != ["nsqclient-loop"]:  # a reply only the loop may complete
            problems.append(f"the coroutine's reply was completed in {completed_by!r}")
    if _count(nsqd, topic) != 3:
        problems.append(f"nsqd stored {message_count(nsqd, topic)} of 3")
    return problems


def take_every_ok(self: ReplyQueue, events: list[Any], now: float, done: list[Any]) -> Any:
    """(mutant) a reading thread completes any reply, the loop's own too"""
    q = self._q
    self._q = type(q)((w, d, data, True) for w, d, data, _s in q)
    self.loop_own = 0
    return ORIGINAL_TAKE_FOR_THREAD(self, events, now, done)


# -- 7. a future answered before its publish call returned ------------------------------------


def a_future_answered_before_pub_nowait_returns(nsqd: NsqdProcess, on: On) -> Problems:
    """The publishing thread sets its future running before its write makes it visible: a
    reading thread may resolve it at once, while the publishing thread is still inside
    ``pub_nowait`` (here: stopped right after its write)."""
    problems: Problems = []
    topic = unique()
    with SyncWriter([nsqd.tcp_address], **FAST, **on.options) as writer:
        door = _door(writer)
        reader_stop, writer_stop = Stop(), Stop()
        original = Shared.write_wired

        def write_wired(self: Shared, *args: Any) -> int:
            took = original(self, *args)
            writer_stop.here()  # written: the reading thread reads its reply meanwhile
            AFTER_WRITE[0](args[0])
            return took

        holder: list[Any] = []
        with stop_at_read(reader_stop), patched(Shared, "write_wired", write_wired):
            r = Runner(lambda: writer.pub(topic, b"r"), reader_stop)
            reader_stop.reached()  # r holds the turn
            p = Runner(lambda: holder.append(writer.pub_nowait(topic, b"p")), writer_stop)
            writer_stop.reached()  # p wrote, and waits inside pub_nowait
            _unread_at_least(door.shared, 2 * on.kind.reply)  # both OKs: r reads them at once
            reader_stop.release()
            r.join()
            _until(lambda: door.shared.replies.head() is None, "both replies read")
            writer_stop.release()
            p.join()
        try:
            holder[0].result(2)
        except TimeoutError:
            problems.append("the future was resolved, then set running again: it never ends")
    return problems


#: what happens in the publishing thread once its write returned (nothing, in the code)
AFTER_WRITE: list[Callable[[list[Any]], None]] = [lambda entries: None]


def run_fresh_after_the_write(entries: list[Any]) -> None:
    """(mutant) the future set running after the write (a reader may have resolved it)"""
    for entry in entries:
        future = getattr(entry[0], "future", None)
        if future is not None:
            future.run_fresh()


# -- the tests -----------------------------------------------------------------------------------

SCENARIOS: dict[str, tuple[Callable[..., Problems], Callable[[], Any]]] = {
    "loop_takes_reading_back": (
        loop_takes_reading_back,
        lambda: patched(ReadTurns, "loop_command", loop_reads_at_once),
    ),
    "close_while_a_thread_reads": (
        close_while_a_thread_reads,
        lambda: patched(Shared, "lost", lost_closes_at_once),
    ),
    "a_refusal_among_sixteen": (
        a_refusal_among_sixteen,
        lambda: patched(ReplyQueue, "take_for_thread", error_frames_taken_as_oks),
    ),
    "a_timeout_in_each_state": (
        a_timeout_in_each_state,
        lambda: patched(door_module, "claim_all", claim_everything),
    ),
    "a_future_cancelled_while_queued": (
        a_future_cancelled_while_queued,
        lambda: _both(
            patched(PublishFuture, "cancel", cancel_only_the_future),
            patched(door_module, "claim_all", claim_everything),
        ),
    ),
    "a_coroutine_and_threads": (
        a_coroutine_and_threads,
        lambda: patched(ReplyQueue, "take_for_thread", take_every_ok),
    ),
    "a_future_answered_before_pub_nowait_returns": (
        a_future_answered_before_pub_nowait_returns,
        lambda: _item(AFTER_WRITE, 0, run_fresh_after_the_write),
    ),
}


@contextlib.contextmanager
def _item(seq: list[Any], i: int, value: Any) -> Iterator[None]:
    original = seq[i]
    seq[i] = value
    try:
        yield
    finally:
        seq[i] = original


@contextlib.contextmanager
def _both(a: Any, b: Any) -> Iterator[None]:
    with a, b:
        yield


#: the loop's idle look (flow.turns.IDLE, 0.25 s) during a scenario: a scenario's steps are
#: events it makes happen, and on a busy machine 0.25 s can pass between two of them, when the
#: idle look hands reading back to the loop (a thread then never gets the turn the scenario
#: stops it in: "the thread never reached its stop" with two CPU hogs beside the free-threaded
#: step). No scenario is about the idle look (tests/flow/test_flow_turns.py is).
SCENARIO_IDLE = 60.0


def _run(name: str, request: pytest.FixtureRequest, kind: Kind) -> Problems:
    scenario = SCENARIOS[name][0]
    certs: CertBundle = request.getfixturevalue("tls_certs")
    factory = request.getfixturevalue("nsqd_factory")
    on = On(kind, kind.options(certs))
    with (
        patched(turns_module, "IDLE", SCENARIO_IDLE),
        patched(sharing_module, "IDLE", SCENARIO_IDLE),
    ):
        if "nsqd_factory" in scenario.__code__.co_varnames[:1]:
            return scenario(lambda **extra: kind.nsqd(factory, certs, **extra), on)
        return scenario(kind.nsqd(factory, certs), on)


#: scenarios that cannot happen on a kind. On TLS the reading thread decrypts holding the
#: wire, which a publishing thread holds from before its write until after its future is set
#: running: a reply cannot be read in between (and the scenario's stop, there, would hold the
#: reader), so that race does not exist on TLS.
NOT_ON = {("a_future_answered_before_pub_nowait_returns", TLS.name)}


def _cases(kinds: list[Kind]) -> list[Any]:
    return [
        pytest.param(name, kind, id=f"{name}-{kind.name}")
        for kind in kinds
        for name in SCENARIOS
        if (name, kind.name) not in NOT_ON
    ]


@pytest.mark.parametrize(("name", "kind"), _cases([PLAIN, TLS, DEFLATE]))
def test_the_scenario_finds_nothing(name: str, kind: Kind, request: pytest.FixtureRequest) -> None:
    assert _run(name, request, kind) == []


@pytest.mark.parametrize(("name", "kind"), _cases([PLAIN, TLS]))
def test_the_scenario_finds_its_race(name: str, kind: Kind, request: pytest.FixtureRequest) -> None:
    """The same scenario on the code with the race it is about: it must say so."""
    with SCENARIOS[name][1]():
        try:
            problems = _run(name, request, kind)
        except (AssertionError, NSQError, TimeoutError) as exc:  # (broke outright: found too)
            problems = [f"{type(exc).__name__}: {exc}"]
    assert problems, f"{name} did not notice its race"
