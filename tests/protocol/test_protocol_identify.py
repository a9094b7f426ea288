"""IdentifyOptions (nsqd's ranges, field by field), IdentifyResponse and AuthResponse parsing."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqclient import Config, __version__
from nsqclient.config import default_client_id
from nsqclient.errors import ConfigError, ProtocolError
from nsqclient.protocol import AuthResponse, IdentifyOptions, IdentifyResponse, ServerLimits

# field -> (special values accepted, lowest, highest), with nsqd's default limits
RANGES: dict[str, tuple[tuple[int, ...], int, int]] = {
    "heartbeat_interval": ((-1, 0), 1_000, 60_000),
    "output_buffer_timeout": ((-1, 0), 25, 30_000),
    "output_buffer_size": ((-1, 0), 64, 65_536),
    "sample_rate": ((), 0, 99),
    "msg_timeout": ((0,), 1_000, 900_000),
    "deflate_level": ((0,), 1, 9),  # 0: nsqd's default (6); nsqd caps at --max-deflate-level
}


def accepted_cases() -> list[tuple[str, int]]:
    return sorted(
        (field, value)
        for field, (specials, lo, hi) in RANGES.items()
        for value in {*specials, lo, lo + 1, hi - 1, hi}
    )


def refused_cases() -> list[tuple[str, int]]:
    cases = []
    for field, (specials, lo, hi) in RANGES.items():
        below = lo - 1
        candidates = {hi + 1, -2, -1000}
        if below not in specials:
            candidates.add(below)
        cases.extend((field, value) for value in candidates if value not in specials)
    return sorted(cases)


@pytest.mark.parametrize(("field", "value"), accepted_cases())
def test_accepted_at_the_bounds(field: str, value: int) -> None:
    opts = IdentifyOptions(**{field: value})
    assert getattr(opts, field) == value
    assert json.loads(opts.to_json())[field] == value


@pytest.mark.parametrize(("field", "value"), refused_cases())
def test_refused_just_outside(field: str, value: int) -> None:
    specials, lo, hi = RANGES[field]
    with pytest.raises(ConfigError) as info:
        IdentifyOptions(**{field: value})
    message = str(info.value)
    assert message.startswith(f"{field}={value} is invalid")
    assert f"{lo}..{hi}" in message
    for special in specials:
        assert f"{special} or " in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("field", "value", "suggestion"),
    [
        ("heartbeat_interval", 30, 30_000),
        ("heartbeat_interval", 1, 1_000),
        ("output_buffer_timeout", 5, 5_000),
        ("msg_timeout", 60, 60_000),
        ("msg_timeout", 900, 900_000),
    ],
)
def test_seconds_instead_of_milliseconds_gets_a_hint(
    field: str, value: int, suggestion: int
) -> None:
    with pytest.raises(ConfigError, match=f"durations are milliseconds: did you mean {suggestion}"):
        IdentifyOptions(**{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("heartbeat_interval", 999),
        ("msg_timeout", 901),
        ("output_buffer_size", 10),
        ("sample_rate", 100),
    ],
)
def test_no_hint_when_it_would_not_help(field: str, value: int) -> None:
    with pytest.raises(ConfigError) as info:
        IdentifyOptions(**{field: value})
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("field", sorted(RANGES))
@pytest.mark.parametrize("value", [True, False, 1.5, "1000", None, [1000]])
def test_wrong_types_are_refused(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"{field} must be an int"):
        IdentifyOptions(**{field: value})


def test_integral_floats_become_ints() -> None:
    opts = IdentifyOptions(heartbeat_interval=5000.0, msg_timeout=2000.0)  # type: ignore[arg-type]
    assert opts.heartbeat_interval == 5000 and type(opts.heartbeat_interval) is int
    assert json.loads(opts.to_json())["msg_timeout"] == 2000


@pytest.mark.parametrize("field", ["client_id", "hostname", "user_agent"])
def test_string_fields_must_be_strings(field: str) -> None:
    with pytest.raises(ConfigError, match=f"{field} must be a str"):
        IdentifyOptions(**{field: b"bytes"})


def test_snappy_and_deflate_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="snappy and deflate"):
        IdentifyOptions(snappy=True, deflate=True)


def test_server_limits_move_the_bounds() -> None:
    limits = ServerLimits(
        max_heartbeat_interval=120_000,
        min_output_buffer_timeout=1,
        max_output_buffer_timeout=60_000,
        max_output_buffer_size=1 << 20,
        max_msg_timeout=3_600_000,
    )
    opts = IdentifyOptions(
        heartbeat_interval=120_000,
        output_buffer_timeout=1,
        output_buffer_size=1 << 20,
        msg_timeout=3_600_000,
        limits=limits,
    )
    assert opts.heartbeat_interval == 120_000
    with pytest.raises(ConfigError, match=r"1000\.\.120000"):
        IdentifyOptions(heartbeat_interval=120_001, limits=limits)
    # limits are not part of equality: two identical requests compare equal
    assert IdentifyOptions(client_id="a", hostname="h", limits=limits) == IdentifyOptions(
        client_id="a", hostname="h"
    )


def test_defaults_and_wire_form() -> None:
    opts = IdentifyOptions()
    body = json.loads(opts.to_json())
    assert body == {
        "client_id": default_client_id(),
        "hostname": opts.hostname,
        "user_agent": f"nsqclient/{__version__}",
        "feature_negotiation": True,
        "heartbeat_interval": 30_000,
        "output_buffer_size": 0,
        "output_buffer_timeout": 0,
        "tls_v1": False,
        "snappy": False,
        "deflate": False,
        "deflate_level": 6,
        "sample_rate": 0,
        "msg_timeout": 0,
    }
    assert opts.to_dict() == body
    assert b" " not in opts.to_json()  # compact
    assert opts.hostname


def test_from_config_defaults() -> None:
    opts = IdentifyOptions.from_config(Config())
    # the Config asks for nsqd's minimum flush interval; the bare wire body leaves nsqd's own
    assert opts == IdentifyOptions(output_buffer_timeout=25)


def test_from_config_copies_every_field_and_converts_units() -> None:
    config = Config(
        client_id="worker-1",
        hostname="box.example",
        user_agent="app/2.0",
        feature_negotiation=False,
        heartbeat_interval=timedelta(seconds=5),
        output_buffer_size=-1,
        output_buffer_timeout=timedelta(milliseconds=100),
        tls_v1=True,
        deflate=True,
        deflate_level=3,
        sample_rate=12,
        msg_timeout=1500.4,
    )
    opts = IdentifyOptions.from_config(config)
    assert opts.to_dict() == {
        "client_id": "worker-1",
        "hostname": "box.example",
        "user_agent": "app/2.0",
        "feature_negotiation": False,
        "heartbeat_interval": 5000,
        "output_buffer_size": -1,
        "output_buffer_timeout": 100,
        "tls_v1": True,
        "snappy": False,
        "deflate": True,
        "deflate_level": 3,
        "sample_rate": 12,
        "msg_timeout": 1500,
    }
    assert all(
        type(v) is int for k, v in opts.to_dict().items() if k.endswith(("interval", "timeout"))
    )
    assert IdentifyOptions.from_config(Config(snappy=True)).snappy


def test_from_config_checks_nsqd_ranges_and_passes_limits() -> None:
    with pytest.raises(ConfigError, match="heartbeat_interval=999"):
        IdentifyOptions.from_config(Config(heartbeat_interval=999))
    with pytest.raises(ConfigError, match="did you mean 30000"):
        IdentifyOptions.from_config(Config(heartbeat_interval=30))
    limits = ServerLimits(max_heartbeat_interval=90_000)
    opts = IdentifyOptions.from_config(Config(heartbeat_interval=90_000), limits)
    assert opts.heartbeat_interval == 90_000 and opts.limits is limits


# -- IdentifyResponse --

NSQD_EXAMPLE = (
    b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,'
    b'"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,'
    b'"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}'
)


def test_parse_nsqd_example() -> None:
    resp = IdentifyResponse.parse(NSQD_EXAMPLE)
    assert resp == IdentifyResponse(version="1.3.0")
    assert resp.negotiated


def test_parse_every_field() -> None:
    doc = {
        "max_rdy_count": 100,
        "version": "9.9.9",
        "max_msg_timeout": 1000,
        "msg_timeout": 5000,
        "tls_v1": True,
        "deflate": True,
        "deflate_level": 3,
        "max_deflate_level": 9,
        "snappy": True,
        "sample_rate": 42,
        "auth_required": True,
        "output_buffer_size": 64,
        "output_buffer_timeout": 0,
        "some_future_field": {"nested": [1, 2]},  # ignored
        "negotiated": False,  # not a field nsqd sends: ignored, the reply was negotiated
    }
    resp = IdentifyResponse.parse(json.dumps(doc).encode())
    for field in dataclasses.fields(IdentifyResponse):
        if field.name == "negotiated":
            assert resp.negotiated is True
        else:
            assert getattr(resp, field.name) == doc[field.name], field.name


def test_plain_ok_means_no_negotiation() -> None:
    resp = IdentifyResponse.parse(b"OK")
    assert resp.negotiated is False
    assert resp.max_rdy_count == 2500  # the documented assumption for old servers
    assert not (resp.tls_v1 or resp.snappy or resp.deflate or resp.auth_required)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"ok",
        b"OK ",
        b"E_INVALID something",
        b"[1,2]",
        b"{",
        b'{"max_rdy_count":',
        b"{}}",
        b'{"\xff":1}',
        b'{"max_rdy_count":"2500"}',
        b'{"max_rdy_count":true}',
        b'{"max_rdy_count":null}',
        b'{"max_rdy_count":2.5}',
        b'{"max_rdy_count":1e400}',
        b'{"max_rdy_count":NaN}',
        b'{"tls_v1":1}',
        b'{"tls_v1":"true"}',
        b'{"version":1}',
        b'{"a":' + b"[" * 100_000,
    ],
)
def test_garbage_replies_are_protocol_errors(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        IdentifyResponse.parse(data)


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_random_replies_parse_or_raise_protocol_error(data: bytes) -> None:
    for candidate in (data, b"{" + data):
        try:
            IdentifyResponse.parse(candidate)
        except ProtocolError:
            pass


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.dictionaries(
        st.sampled_from([f.name for f in dataclasses.fields(IdentifyResponse)] + ["x"]),
        _json_values,
    )
)
@settings(max_examples=300, deadline=None)
def test_random_json_objects_parse_or_raise_protocol_error(doc: dict[str, Any]) -> None:
    try:
        resp = IdentifyResponse.parse(json.dumps(doc).encode())
    except ProtocolError:
        return
    for name, value in doc.items():
        if name in ("x", "negotiated"):
            continue
        assert getattr(resp, name) == value


# -- AuthResponse --


def test_auth_response() -> None:
    resp = AuthResponse.parse(
        b'{"identity":"bob","identity_url":"https://id.example/bob","permission_count":2}'
    )
    assert resp == AuthResponse("bob", "https://id.example/bob", 2)
    assert AuthResponse.parse(b"{}") == AuthResponse("", "", 0)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"OK",
        b"[]",
        b'"bob"',
        b"{",
        b'{"permission_count":"2"}',
        b'{"permission_count":null}',
        b'{"permission_count":true}',
        b'{"permission_count":1.5}',
        b"[" * 100_000,
    ],
)
def test_auth_response_garbage(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        AuthResponse.parse(data)
