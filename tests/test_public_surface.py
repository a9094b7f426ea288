"""The public surface: each public name has one home, the core classes carry one name per thing,
and other clients' names live together in nsqclient.compat (and still work)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import nsqclient
import nsqclient.aio
import nsqclient.compat
import nsqclient.http
import nsqclient.stats
import nsqclient.sync
import nsqclient.worker
from nsqclient import ConfigError, Message, NSQError
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
    msg.enable_async()
    assert msg.auto_response is False
    with pytest.raises(NSQError):  # the same checks as req()
        msg.requeue(-1)


async def test_asyncnsq_reader_waits_for_subscribe() -> None:
    reader = AsyncnsqReader(nsqd_tcp_addresses=["127.0.0.1:1"])
    with pytest.raises(ConfigError, match="topic"):  # the core Reader's one start needs both
        await Reader(nsqd_tcp_addresses=["127.0.0.1:1"]).start()
    await reader.connect()  # no topic yet: waits for subscribe, as in asyncnsq
    assert reader.state.value == "new"
    await reader.close()


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
