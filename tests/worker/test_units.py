"""The worker's pure parts, without daemons: loading the target, the options and their
defaults, the recycling gate, the link's framing, the health server's HTTP, summing stats,
saying how a child died."""

from __future__ import annotations

import asyncio
import inspect
import os
import selectors
import signal
import socket
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqclient.config import Config
from nsqclient.errors import ConfigError
from nsqclient.worker.child import Control, Gate, limited
from nsqclient.worker.health import HealthServer, Reply, sum_stats
from nsqclient.worker.link import MAX_OUTBOX, Link
from nsqclient.worker.options import cpu_count, default_max_in_flight, load_target, worker_options
from nsqclient.worker.supervisor import describe_exit
from tests.support import unique, wait_until

pytestmark = pytest.mark.timeout(30)

ADDRESS = ["127.0.0.1:4150"]


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current directory, as the command's: a module written here is importable."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write_module(folder: Path, source: str) -> str:
    name = unique("mod").replace("-", "_")
    (folder / f"{name}.py").write_text(source)
    return name


# ---------------------------------------------------------------------- the target


def test_load_target_imports_from_the_current_directory(module_dir: Path) -> None:
    name = write_module(module_dir, "class Box:\n    @staticmethod\n    def go(m): return m\n"
                        "def handle(msg): return msg\n")  # fmt: skip
    assert load_target(f"{name}:handle")(7) == 7
    assert load_target(f"{name}:Box.go")(8) == 8  # dotted


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("no_colon", "is not MODULE:FUNCTION"),
        (":handle", "is not MODULE:FUNCTION"),
        ("nope_zz_module:handle", "cannot import 'nope_zz_module'"),
    ],
)
def test_bad_targets_are_named(module_dir: Path, target: str, said: str) -> None:
    with pytest.raises(ConfigError, match="'") as info:
        load_target(target)
    assert said in str(info.value) and target in str(info.value)


def test_a_missing_function_suggests_the_close_name(module_dir: Path) -> None:
    name = write_module(module_dir, "def handle(msg): pass\nVALUE = 3\n")
    with pytest.raises(ConfigError, match=r"has no 'handel'.*did you mean 'handle'"):
        load_target(f"{name}:handel")
    with pytest.raises(ConfigError, match="is a int, not a function"):
        load_target(f"{name}:VALUE")


def test_a_module_that_raises_on_import_is_named_with_where(module_dir: Path) -> None:
    name = write_module(module_dir, "x = 1\nraise RuntimeError('broken at import')\n")
    with pytest.raises(ConfigError) as info:
        load_target(f"{name}:handle")
    text = str(info.value)
    assert f"importing '{name}'" in text and "RuntimeError: broken at import" in text
    assert f"{name}.py:2" in text
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_missing_dependency_of_the_module_is_not_blamed_on_the_module(
    module_dir: Path,
) -> None:
    name = write_module(module_dir, "import not_installed_zz\n")
    with pytest.raises(ConfigError, match=r"raised ModuleNotFoundError.*not_installed_zz"):
        load_target(f"{name}:handle")


# ---------------------------------------------------------------------- options


def plain(msg: Any) -> None:
    pass


async def coro(msg: Any) -> None:
    pass


def test_defaults_keep_every_handler_busy_and_a_quarter_more_waiting() -> None:
    assert [default_max_in_flight(n) for n in (1, 2, 4, 8, 32)] == [2, 3, 5, 10, 40]
    options = worker_options(plain, "t", "c", nsqd_tcp_addresses=ADDRESS)
    assert (options.is_async, options.handlers, options.max_in_flight) == (False, 1, 2)
    assert options.processes == cpu_count() <= len(os.sched_getaffinity(0))
    options = worker_options(coro, "t", "c", processes=3, nsqd_tcp_addresses=ADDRESS)
    assert (options.is_async, options.handlers, options.max_in_flight) == (True, 10, 12)
    assert "3 processes x 10 coroutines" in options.describe()
    assert options.target.endswith("test_units:coro")


def test_max_in_flight_given_or_in_a_config_is_kept() -> None:
    given = worker_options(plain, "t", "c", threads=8, max_in_flight=50, nsqd_tcp_addresses=ADDRESS)
    assert given.max_in_flight == 50
    config = Config(max_in_flight=64, close_timeout=1000)
    kept = worker_options(plain, "t", "c", threads=8, config=config, nsqd_tcp_addresses=ADDRESS)
    assert (kept.max_in_flight, kept.config.close_timeout) == (64, 1000)
    default = worker_options(
        plain, "t", "c", threads=8, config=Config(), nsqd_tcp_addresses=ADDRESS
    )
    assert default.max_in_flight == 10


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"handler": coro, "threads": 2}, "--concurrency"),
        ({"handler": plain, "concurrency": 2}, "--threads"),
        ({"handler": plain, "processes": 0}, "processes must be an int >= 1"),
        ({"handler": plain, "max_messages_per_child": 0}, "max_messages_per_child"),
        ({"handler": plain, "health_address_": "nohost"}, "is not HOST:PORT"),
        ({"handler": plain, "health_address_": ":99999"}, "outside 0..65535"),
        ({"handler": 3}, "must be callable"),
        ({"handler": plain, "nsqd_tcp_addresses": None}, "nsqd_tcp_addresses"),
    ],
)
def test_bad_options_fail_before_any_child(kwargs: dict[str, Any], said: str) -> None:
    kwargs.setdefault("nsqd_tcp_addresses", ADDRESS)
    handler = kwargs.pop("handler")
    with pytest.raises(ConfigError, match=said):
        worker_options(handler, "t", "c", **kwargs)


def test_health_address_forms() -> None:
    def address(text: str) -> tuple[str, int] | None:
        return worker_options(
            plain, "t", "c", nsqd_tcp_addresses=ADDRESS, health_address_=text
        ).health_address

    assert address(":8080") == ("0.0.0.0", 8080)
    assert address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert address("[::1]:9000") == ("::1", 9000)


# ---------------------------------------------------------------------- the gate


class FakeMessage:
    """Records how it was answered (a unit test of the wrapper: no connection involved)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int | None, bool]] = []

    def req(self, delay_ms: int | None = None, *, backoff: bool = True) -> None:
        self.answers.append((delay_ms, backoff))


@pytest.fixture
def control() -> Iterator[Control]:
    made = Control()
    yield made
    os.close(made.wake_r)
    os.close(made.wake_w)


def test_the_gate_admits_exactly_max_messages_across_threads(control: Control) -> None:
    gate = Gate(250, control)
    admitted: list[int] = []

    def take() -> None:
        admitted.append(sum(gate.admit() for _ in range(100)))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(admitted) == 250 and not gate.open
    assert control.recycle_reason == "max_messages_per_child"
    assert os.read(control.wake_r, 100)  # the owner was woken


def test_a_shut_gate_hands_messages_back_without_calling_the_handler(control: Control) -> None:
    calls: list[Any] = []

    def handler(msg: Any) -> str:
        calls.append(msg)
        return "ok"

    gate = Gate(1, control)
    gated = limited(handler, gate, is_async=False)
    first, second = FakeMessage(), FakeMessage()
    assert gated(first) == "ok"
    gate.paused.set()  # RDY 0 is in: hand-backs go at once
    assert gated(second) is None
    assert calls == [first] and second.answers == [(0, False)]


def test_the_async_wrapper_stays_a_coroutine_and_pauses_before_handing_back(
    control: Control,
) -> None:
    events: list[str] = []

    async def handler(msg: Any) -> None:
        events.append("handled")

    gate = Gate(None, control)
    gate.pause_inline = lambda: events.append("paused")
    gated = limited(handler, gate, is_async=True)
    assert inspect.iscoroutinefunction(gated) and gated.__name__ == "handler"
    asyncio.run(gated(FakeMessage()))
    gate.close()
    msg = FakeMessage()
    asyncio.run(gated(msg))
    assert events == ["handled", "paused"] and msg.answers == [(0, False)]


# ---------------------------------------------------------------------- the link


def test_the_link_frames_messages_and_reads_end_of_file() -> None:
    a, b = socket.socketpair()
    left, right = Link(a), Link(b)
    assert left.send("stats", id=1, stats={"x": [1, 2]})
    a.send(b'{"t":"ready","ok":true}\n{"t":"par')  # a message split across reads
    assert right.receive() == [
        {"t": "stats", "id": 1, "stats": {"x": [1, 2]}},
        {"t": "ready", "ok": True},
    ]
    a.send(b'tial"}\nnot json\n')
    assert right.receive() == [{"t": "partial"}]  # a broken line is skipped
    assert right.receive() == []
    left.close()
    assert right.receive() is None and right.closed
    assert not right.send("late")


def test_a_peer_that_does_not_read_cannot_block_the_sender() -> None:
    a, b = socket.socketpair()
    link = Link(a)
    blob = "x" * 65536
    while link.send("stats", blob=blob):
        pass  # the socket fills, then the outbox, then sends are refused: never blocked
    assert link.pending and not link.closed
    assert MAX_OUTBOX < len(link._outbox) <= MAX_OUTBOX + len(blob) + 100
    link.close()
    b.close()


# ---------------------------------------------------------------------- health server


@pytest.fixture
def health() -> Iterator[tuple[str, list[Reply]]]:
    """A HealthServer on its own selector loop (a thread standing in for the supervisor's);
    ``/later`` is answered only when the test calls the reply it left in the list."""
    selector = selectors.DefaultSelector()
    pending: list[Reply] = []
    stop = threading.Event()

    def respond(path: str, reply: Reply) -> None:
        if path == "/later":
            pending.append(reply)
        elif path == "/ok":
            reply(200, {"path": path})
        else:
            reply(404, {"error": path})

    server = HealthServer(("127.0.0.1", 0), selector, respond)

    def loop() -> None:
        while not stop.is_set():
            for key, mask in selector.select(0.02):
                key.data(mask)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield server.url, pending
    finally:
        stop.set()
        thread.join(5)
        server.close()
        selector.close()


def fetch(url: str, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_health_server_answers_get_head_and_refuses_the_rest(
    health: tuple[str, list[Reply]],
) -> None:
    url, _ = health
    assert fetch(url + "/ok?x=1") == (200, b'{\n "path": "/ok"\n}\n')
    assert fetch(url + "/ok", "HEAD") == (200, b"")
    assert fetch(url + "/other")[0] == 404
    assert fetch(url + "/ok", "POST")[0] == 405
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"NONSENSE\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400 Bad Request")


def test_an_answer_may_come_later(health: tuple[str, list[Reply]]) -> None:
    url, pending = health
    results: list[tuple[int, bytes]] = []
    thread = threading.Thread(target=lambda: results.append(fetch(url + "/later")))
    thread.start()
    wait_until(lambda: pending, what="the request to reach the server")
    assert results == []
    pending[0](503, {"ready": False})
    thread.join(10)
    assert results == [(503, b'{\n "ready": false\n}\n')]


# ---------------------------------------------------------------------- reports


def test_sum_stats_adds_numbers_counts_connections_and_backoffs() -> None:
    a = {"topic": "t", "finished": 3, "in_backoff": True, "connections": [{}, {}], "x": 0.5}
    b = {"topic": "t", "finished": 4, "in_backoff": False, "connections": [{}], "x": 1.0}
    assert sum_stats([a, b]) == {
        "topic": "t",
        "finished": 7,
        "in_backoff": 1,
        "connections": 3,
        "x": 1.5,
    }


def test_describe_exit() -> None:
    assert describe_exit(0) == "exited"
    assert describe_exit(3 << 8) == "exited with code 3"
    assert describe_exit(signal.SIGKILL).startswith("was killed by SIGKILL (9) (kill -9, or")
    assert describe_exit(signal.SIGSEGV) == "was killed by SIGSEGV (11)"
