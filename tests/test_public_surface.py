"""The public surface: each public name has one home, the core classes carry one name per thing,
and other clients' names live together in nsqclient.compat (and still work)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import nsqclient
import nsqclient.aio
import nsqclient.compat
import nsqclient.http
import nsqclient.stats
import nsqclient.sync
import nsqclient.worker
from nsqclient import InvalidArgumentError, Message
from nsqclient.aio import Reader, Writer
from nsqclient.compat import AsyncnsqReader
from nsqclient.sync import SyncReader, SyncWriter

pytestmark = pytest.mark.timeout(60)

#: every name a public package exports, and the one package that exports it
HOMES = {
    "nsqclient": {"Config", "ConfigOptions", "Message", "HTTPError", "NSQError"},
    "nsqclient.aio": {
        "Message",
        "MessageSink",
        "MessageTracker",
        "Reader",
        "ReaderState",
        "Writer",
    },
    "nsqclient.sync": {"Message", "SyncReader", "SyncWriter", "get_loop", "run_in_loop"},
    "nsqclient.http": {
        "LookupResult",
        "LookupdHTTPClient",
        "Node",
        "NsqdHTTPClient",
        "Producer",
        "SyncLookupdHTTPClient",
        "SyncNsqdHTTPClient",
    },
    "nsqclient.stats": {
        "ConnectionStats",
        "ReaderStats",
        "SyncReaderStats",
        "SyncWriterStats",
        "WriterConnectionStats",
        "WriterStats",
    },
    "nsqclient.compat": {"AsyncnsqReader", "PynsqMessageNames", "create_reader", "create_writer"},
    "nsqclient.worker": {"Handler", "Init", "run"},
}
#: Message is the one name exported by several packages on purpose: every face hands it out
SHARED = {"Message"}


def test_each_public_name_has_one_home() -> None:
    modules = {name: sys.modules[name] for name in HOMES}
    for name, module in modules.items():
        exported = set(module.__all__)
        assert HOMES[name] <= exported, name
    seen: dict[str, str] = {}
    for name, module in modules.items():
        for export in module.__all__:
            if export in SHARED:
                continue
            assert export not in seen, f"{export} is exported by {seen.get(export)} and {name}"
            seen[export] = name
    assert nsqclient.aio.Message is nsqclient.sync.Message is nsqclient.Message


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("nsqclient", "NON_FATAL_CODES"),
        ("nsqclient", "error_from_frame"),
        ("nsqclient", "ReaderStats"),
        ("nsqclient.aio", "Connection"),
        ("nsqclient.aio", "ConnectionState"),
        ("nsqclient.aio", "NsqdHTTPClient"),
        ("nsqclient.aio", "WriterStats"),
        ("nsqclient.aio", "create_reader"),
        ("nsqclient.sync", "SyncNsqdHTTPClient"),
        ("nsqclient.sync", "SyncReaderStats"),
        ("nsqclient.http", "Call"),
        ("nsqclient.http", "decode_response"),
        ("nsqclient.http", "HTTPError"),
    ],
)
def test_names_removed_from_a_second_home(module: str, name: str) -> None:
    assert name not in sys.modules[module].__all__
    assert not hasattr(sys.modules[module], name), f"{module}.{name} is still importable"


@pytest.mark.parametrize("module", ["nsqclient.aio.http", "nsqclient.aio.addresses"])
def test_the_pre_release_move_shims_are_gone(module: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        __import__(module)


def test_core_classes_have_one_name_per_thing() -> None:
    for alias in ("subscribe", "connect", "clean_close", "wait_handler_tasks"):
        assert not hasattr(Reader, alias), f"Reader.{alias} belongs in nsqclient.compat"
        assert hasattr(AsyncnsqReader, alias)
    # one verb starts every client (aiokafka's producer and consumer both ``start()``); the
    # Writers keep connect() only for code migrating from pynsq and asyncnsq
    for cls in (Reader, Writer, SyncReader, SyncWriter):
        assert callable(cls.start), cls
    for cls in (Writer, SyncWriter):
        assert ":meth:`start`" in (cls.connect.__doc__ or ""), f"{cls.__name__}.connect: alias"
    assert not hasattr(SyncReader, "connect")
    for alias in ("finish", "requeue", "enable_async"):
        assert alias not in vars(Message), f"Message.{alias} belongs in nsqclient.compat"
    assert issubclass(Message, nsqclient.compat.PynsqMessageNames)


def _public_classes() -> list[type]:
    found = {}
    for module in HOMES:
        for name in sys.modules[module].__all__:
            obj = getattr(sys.modules[module], name)
            if inspect.isclass(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_no_public_signature_has_an_underscore_parameter() -> None:
    """What the layers hand each other (options checked already, a wait already done) goes
    through private constructors and methods (``Writer._from_checked``), never through an
    underscore parameter of a public one, which ``help()`` and ``inspect.signature`` show."""
    leaks = []
    for cls in _public_classes():
        members = [("__init__", cls)] + [
            (name, member)
            for name, member in inspect.getmembers(cls)
            if not name.startswith("_") and callable(member)
        ]
        for name, member in members:
            try:
                signature = inspect.signature(member)
            except (TypeError, ValueError):  # a builtin without a signature
                continue
            leaks += [f"{cls.__name__}.{name}({p})" for p in signature.parameters if p[0] == "_"]
    assert leaks == []
    assert "_checked" not in str(inspect.signature(Writer))
    assert "_checked" not in str(inspect.signature(Reader))


class _Recorder:
    """A Responder that records what a message asked for (pure logic: no connection)."""

    address = "127.0.0.1:4150"

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def message_fin(self, msg: Message) -> None:
        self.calls.append(("fin",))

    def message_req(self, msg: Message, delay_ms: int | None, backoff: bool) -> None:
        self.calls.append(("req", delay_ms, backoff))

    def message_touch(self, msg: Message) -> None:
        self.calls.append(("touch",))


def _message() -> tuple[Message, _Recorder]:
    responder = _Recorder()
    return Message(0, 1, b"0" * 16, b"body", responder), responder


async def test_pynsq_names_answer_as_the_core_names() -> None:
    msg, responder = _message()
    await msg.finish()
    msg.requeue()  # the first answer won: nothing more is sent
    assert responder.calls == [("fin",)]
    msg, responder = _message()
    msg.requeue(250, backoff=False)
    assert responder.calls == [("req", 250, False)]
    msg, _ = _message()
    assert msg.is_async() is False
    msg.enable_async()
    assert msg.auto_response is False and msg.is_async() is True


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        pytest.param(lambda m: m.requeue(), (None, True), id="default"),
        pytest.param(lambda m: m.requeue(time_ms=0, backoff=False), (0, False), id="pynsq"),
        pytest.param(lambda m: m.requeue(time_ms=-1), (None, True), id="pynsq-default"),
        pytest.param(lambda m: m.requeue(delay=2), (2000, True), id="pynsq-delay-s"),
        pytest.param(lambda m: m.requeue(delay=0.25, backoff=False), (250, False), id="float-s"),
        pytest.param(lambda m: m.requeue(delay=-1), (None, True), id="pynsq-delay-default"),
        pytest.param(lambda m: m.requeue(0, False), (0, False), id="gnsq-positional"),
        pytest.param(lambda m: m.requeue(-1), (None, True), id="negative-is-default"),
        pytest.param(lambda m: m.requeue(delay_ms=300), (300, True), id="nsqclient"),
    ],
)
def test_requeue_takes_pynsq_and_gnsq_call_forms(
    call: Callable[[Message], object], expected: tuple[int | None, bool]
) -> None:
    """A handler moved from pynsq or gnsq requeues as it did there (a TypeError in a handler
    is a failure: the message was retried with backoff and finally given up)."""
    msg, responder = _message()
    call(msg)
    assert responder.calls == [("req", *expected)]


@pytest.mark.parametrize(
    "kwargs",
    [{"time_ms": 1.5}, {"time_ms": "5"}, {"delay": True}, {"time_ms": 1, "delay": 2}],
    ids=["float-ms", "str", "bool", "two-delays"],
)
def test_requeue_refuses_what_it_cannot_read_naming_the_forms(kwargs: dict[str, Any]) -> None:
    msg, responder = _message()
    with pytest.raises(InvalidArgumentError, match=r"time_ms=<int ms>.*delay=<seconds>"):
        msg.requeue(**kwargs)
    assert responder.calls == [] and not msg.has_responded


def test_has_responded_reads_as_a_bool_and_calls_as_pynsq() -> None:
    msg, _ = _message()
    assert not msg.has_responded and msg.has_responded() is False
    assert repr(msg.has_responded) == "False" and msg.has_responded == False  # noqa: E712
    msg.requeue(time_ms=0)
    assert msg.has_responded and msg.has_responded() is True
    assert repr(msg.has_responded) == "True" and msg.has_responded == True  # noqa: E712


async def test_asyncnsq_reader_waits_for_subscribe() -> None:
    reader = AsyncnsqReader(nsqd_tcp_addresses=["127.0.0.1:1"])
    with pytest.raises(TypeError, match="'topic' and 'channel'"):  # the core Reader needs both
        Reader(nsqd_tcp_addresses=["127.0.0.1:1"])  # type: ignore[call-arg]
    await reader.connect()  # no topic yet: waits for subscribe, as in asyncnsq
    assert reader.state.value == "new"
    await reader.close()


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("Reader", "nsqclient.aio"),
        ("Writer", "nsqclient.aio"),
        ("SyncReader", "nsqclient.sync"),
        ("SyncWriter", "nsqclient.sync"),
        ("NsqdHTTPClient", "nsqclient.http"),
        ("ReaderStats", "nsqclient.stats"),
        ("create_reader", "nsqclient.compat"),
    ],
)
def test_a_name_looked_for_at_the_top_says_where_it_lives(name: str, home: str) -> None:
    """Issue 51: ``from nsqclient import Reader`` failed without pointing anywhere."""
    where = rf"lives in {home} \(from {home} import {name}\)"
    with pytest.raises(ImportError, match=where):
        exec(f"from nsqclient import {name}", {})
    with pytest.raises(AttributeError, match=where):
        getattr(nsqclient, name)
    assert not hasattr(nsqclient, name)  # still just absent for hasattr and getattr(default)
    assert getattr(sys.modules[home], name) is not None


def test_the_clients_at_the_top_name_both_faces() -> None:
    for name, other in (("Reader", "SyncReader"), ("Writer", "SyncWriter")):
        with pytest.raises(ImportError, match=f"from nsqclient.sync import {other}"):
            exec(f"from nsqclient import {name}", {})
    with pytest.raises(ImportError, match="cannot import name 'Bogus'"):
        exec("from nsqclient import Bogus", {})


def test_compat_names_load_the_reader_only_when_used() -> None:
    """nsqclient.message builds on compat's mixin, so importing compat loads no client."""
    code = (
        "import sys, nsqclient.message, nsqclient.compat; "
        "assert 'nsqclient.aio' not in sys.modules, sorted(sys.modules); "
        "nsqclient.compat.create_reader; assert 'nsqclient.aio.reader' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_the_default_sink_forgets_a_dead_connections_messages_in_place() -> None:
    from nsqclient.aio.delivery import MessageQueue

    queue = MessageQueue()
    dead, alive = _Recorder(), _Recorder()
    messages = [Message(0, 1, b"%016d" % i, b"", dead if i % 2 else alive) for i in range(6)]
    queue.put(messages)
    items = queue._items  # iterators hold this very deque
    queue.forget(dead)
    queue.flush()  # answers are given on the loop: nothing pending, nothing sent
    assert queue._items is items and len(queue) == 3
    assert [m.id for m in items] == [m.id for m in messages[::2]]
    assert dead.calls == alive.calls == []
