"""Misconfiguration is refused when the Config is built, naming the option and what to do."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nsqclient import Config, ConfigError


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("dial_timeout", 1, "dial_timeout=1000"),
        ("publish_timeout", 5, "publish_timeout=5000"),
        ("close_timeout", 30, "close_timeout=30000"),
        ("lookupd_poll_timeout", 2.5, "lookupd_poll_timeout=2500"),
        ("reconnect_delay", 1, "reconnect_delay=1000"),
        ("max_backoff_duration", 128, "max_backoff_duration=128000"),  # pynsq's seconds
        ("default_requeue_delay", 90, "default_requeue_delay=90000"),  # pynsq's requeue_delay
        ("max_requeue_delay", 900, "max_requeue_delay=900000"),
        ("lookupd_poll_interval", 15, "did you mean 15000"),
        ("read_timeout", 60, "did you mean 60000"),
    ],
)
def test_seconds_given_for_milliseconds_are_refused_with_the_fix(
    name: str, value: float, hint: str
) -> None:
    with pytest.raises(ConfigError, match=name) as info:
        Config(**{name: value})
    assert hint in str(info.value)
    assert isinstance(info.value, ValueError)


def test_plausible_milliseconds_and_timedeltas_are_accepted() -> None:
    config = Config(
        dial_timeout=250,
        publish_timeout=100,
        close_timeout=0,  # 0: do not wait
        reconnect_delay=50,
        max_backoff_duration=0,  # 0: no backoff
        lookupd_poll_interval=1000,
    )
    assert config.dial_timeout == 250
    # a timedelta says its unit: even a short one is taken at its word
    assert Config(dial_timeout=timedelta(milliseconds=20)).dial_timeout == 20


def test_a_lookupd_poll_interval_below_one_second_is_refused() -> None:
    with pytest.raises(ConfigError, match="lookupd_poll_interval=500"):
        Config(lookupd_poll_interval=500)


@pytest.mark.parametrize(
    "options",
    [
        {"tls_ca_file": "/ca.pem"},
        {"tls_cert_file": "/c.pem", "tls_key_file": "/k.pem"},
        {"tls_server_hostname": "nsqd.example"},
        {"tls_insecure_skip_verify": True},
        {"tls_min_version": "TLSv1.2"},
    ],
    ids=lambda o: next(iter(o)),
)
def test_tls_options_without_tls_v1_are_refused(options: dict[str, object]) -> None:
    """They would otherwise connect in plaintext without a word."""
    with pytest.raises(ConfigError, match="tls_v1") as info:
        Config(**options)  # type: ignore[arg-type]
    assert next(iter(options)) in str(info.value)
    Config(tls_v1=True, **options)  # type: ignore[arg-type]  # with tls_v1 they are fine


def test_durations_cover_every_duration_option_in_both_units() -> None:
    """``config.sec``/``config.msec`` are the typed access to durations: one attribute per
    duration option (a new option must be added to Durations), each the stored ms value."""
    import dataclasses

    from nsqclient.config import _DURATION_BOUNDS, _WIRE_DURATIONS, Durations

    names = {f.name for f in dataclasses.fields(Durations)}
    assert names == {*_DURATION_BOUNDS, *_WIRE_DURATIONS}
    config = Config(read_timeout=timedelta(seconds=2), msg_timeout=1_500)
    assert config.sec.read_timeout == 2.0 and config.msec.read_timeout == 2_000.0
    assert config.sec.msg_timeout == 1.5 and config.msec.msg_timeout == 1_500.0
    for name in names:
        assert getattr(config.msec, name) == getattr(config, name)
        assert getattr(config.sec, name) == getattr(config, name) / 1000
    assert config.replace(read_timeout=3_000).sec.read_timeout == 3.0
    assert config == Config(read_timeout=2_000, msg_timeout=1_500)  # the cache is not a field


@pytest.mark.parametrize(
    ("name", "points_to"),
    [
        ("requeue_delay", "default_requeue_delay=5000"),  # not max_requeue_delay, the closest
        ("max_tries", "max_attempts"),
        ("message_handler", "run(handler)"),
    ],
)
def test_other_clients_option_names_point_at_ours(name: str, points_to: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown option {name!r}") as info:
        Config.from_options(**{name: 5})
    assert points_to in str(info.value)
    assert "did you mean" not in str(info.value)


def test_a_sync_reader_given_message_handler_says_to_use_run() -> None:
    from nsqclient.sync import SyncReader

    with pytest.raises(ConfigError, match=r"reader.run\(handler\)"):
        SyncReader("t", "c", nsqd_tcp_addresses=["127.0.0.1:4150"], message_handler=print)


def test_every_declared_bound_and_type_is_enforced_from_its_declaration() -> None:
    """Each option is declared once (default, unit, bounds, doc on its field); validation reads
    those declarations, so a bound declared is a bound enforced, and every default is valid."""
    import dataclasses

    from nsqclient.config import Option

    Config()  # every declared default passes its own checks
    declared = [(f.name, f.metadata["option"]) for f in dataclasses.fields(Config) if f.metadata]
    assert declared, "no option declarations found"
    for name, opt in declared:
        assert isinstance(opt, Option)
        if opt.lo is not None:
            below = opt.lo - 1
            with pytest.raises(ConfigError, match=f"{name}={below!r} is out of range"):
                Config(**{name: below})
        if opt.hi is not None:
            with pytest.raises(ConfigError, match=f"{name}=.* is out of range"):
                Config(**{name: opt.hi + 1})
        if opt.kind is bool:
            with pytest.raises(ConfigError, match=f"{name} must be True or False"):
                Config(**{name: "yes"})
        if opt.kind is int:
            with pytest.raises(ConfigError, match=f"{name} must be an int"):
                Config(**{name: 1.5})
        if opt.seconds_below is not None:
            with pytest.raises(ConfigError, match=f"{name}=0.5 looks like seconds"):
                Config(**{name: 0.5})
