"""validate_client_options refuses exactly what the core Reader and Writer constructors refuse,
with the same error, without building either (the sync facade checks input with it in the
caller's thread and builds the core object later, on the loop thread)."""

from __future__ import annotations

from typing import Any

import pytest

from nsqclient import Config, ConfigError, NSQError
from nsqclient.aio import Reader, Writer
from nsqclient.aio.options import validate_client_options
from nsqclient.sync import SyncReader, SyncWriter

GOOD = {"nsqd_tcp_addresses": ["127.0.0.1:4150"], "lookupd_http_addresses": None}

BAD: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"nsqd_tcp_addresses": None, "lookupd_http_addresses": None}, {}),
    ({"nsqd_tcp_addresses": ["127.0.0.1:notaport"], "lookupd_http_addresses": None}, {}),
    ({"nsqd_tcp_addresses": [""], "lookupd_http_addresses": ["http://"]}, {}),
    ({"nsqd_tcp_addresses": None, "lookupd_http_addresses": ["http://h:99999"]}, {}),
    (GOOD, {"tls_v1": True, "tls_ca_file": "/nonexistent/ca.pem"}),
    (GOOD, {"tls_v1": True, "tls_min_version": "sslv2"}),
    (GOOD, {"heartbeat_interval": 500, "read_timeout": 100}),
]


def _error(build: Any) -> tuple[type[BaseException], str] | None:
    try:
        build()
    except NSQError as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize(("addresses", "options"), BAD)
def test_the_same_refusals_as_the_core_constructors(
    addresses: dict[str, Any], options: dict[str, Any]
) -> None:
    config = Config.from_options(None, **options)
    for core, extra in ((Reader, {"consumer": True}), (Writer, {})):
        if core is Reader:
            expected = _error(lambda: Reader("t", "c", config=config, **addresses))
        else:
            expected = _error(lambda: Writer(config=config, **addresses))
        assert expected is not None, (core, addresses, options)  # the case really is bad
        got = _error(lambda: validate_client_options(config, **addresses, **extra))  # noqa: B023
        assert got == expected, core


def test_a_reader_needs_heartbeats_a_writer_does_not() -> None:
    config = Config(heartbeat_interval=-1)
    validate_client_options(config, **GOOD)
    with pytest.raises(ConfigError, match="heartbeats"):
        validate_client_options(config, **GOOD, consumer=True)
    with pytest.raises(ConfigError, match="heartbeats"):
        Reader("t", "c", config=config, **GOOD)


def test_http_fallback_addresses_are_checked() -> None:
    with pytest.raises(ConfigError) as expected:
        Writer(http_fallback_addresses=["http://[::1"], config=Config(), **GOOD)
    with pytest.raises(ConfigError) as got:
        validate_client_options(Config(), http_fallback_addresses=["http://[::1"], **GOOD)
    assert str(got.value) == str(expected.value)


def test_the_facades_build_no_core_object_to_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a core object was built in the caller's thread")

    monkeypatch.setattr(Reader, "__init__", refuse)
    monkeypatch.setattr(Writer, "__init__", refuse)
    reader = SyncReader("t", "c", **GOOD)  # nothing connects before first use
    writer = SyncWriter(**GOOD)
    writer.close()
    monkeypatch.undo()
    reader.close()
    assert reader.is_closed and writer.is_closed
    assert reader.stats()["state"] == "closed"  # as before: a closed Reader's counters
    with pytest.raises(ConfigError):
        SyncReader("t", "c", nsqd_tcp_addresses=None)


def test_a_facade_checks_once_and_its_core_object_reuses_what_was_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nsqclient.aio import options as options_module
    from nsqclient.protocol.identify import IdentifyOptions  # imported where it is used

    identified: list[Config] = []
    contexts: list[Config] = []
    real_identify = IdentifyOptions.from_config
    real_context = options_module.make_ssl_context

    def identify(config: Config) -> Any:
        identified.append(config)
        return real_identify(config)

    def context(config: Config) -> Any:
        contexts.append(config)
        return real_context(config)

    monkeypatch.setattr(IdentifyOptions, "from_config", identify)
    monkeypatch.setattr(options_module, "make_ssl_context", context)
    reader = SyncReader("t", "c", **GOOD)
    writer = SyncWriter(**GOOD)
    try:
        core_reader, core_writer = reader.aio, writer.aio  # built on the loop thread now
        assert len(identified) == 2 and len(contexts) == 2  # once per facade, not twice
        assert core_reader._nodes.options is reader._checked
        assert core_writer._nodes.options is writer._checked
        # a SyncReader's messages sit in the thread bridge only: the core has no queue of its own
        assert core_reader._queue is None and core_reader._sink is not None
    finally:
        reader.close()
        writer.close()


def test_a_reader_given_a_sink_has_no_queue_of_its_own() -> None:
    from nsqclient.aio.delivery import MessageQueue

    sink = MessageQueue()
    reader = Reader("t", "c", sink=sink, **GOOD)
    assert reader._queue is None and reader._sink is sink
    with pytest.raises(ConfigError, match="sink"):
        reader.messages()
    with pytest.raises(ConfigError, match="sink"):
        reader.set_message_handler(lambda m: None)
    reader.set_message_handler(lambda m: None, direct=True)  # runs on the read path: fine
    assert reader.stats()["queued"] == 0
