"""The CLI's pure parts: argument types, address resolution, stat aggregation, tail formatting."""

from __future__ import annotations

import argparse
import base64
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqclient.cli import _common, stat, tail
from nsqclient.errors import ConfigError
from nsqclient.message import Message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\n", b"\n"),
        ("\\0", b"\0"),
        ("\\x1e", b"\x1e"),
        (",", b","),
        ("--", b"--"),
        ("é", "é".encode()),
    ],
)
def test_delimiter_escapes(text: str, expected: bytes) -> None:
    assert _common.delimiter(text) == expected


def test_empty_delimiter_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _common.delimiter("")


def ns(**values: object) -> argparse.Namespace:
    return argparse.Namespace(**values)


KINDS = ["nsqd_tcp", "lookupd_http"]


def test_flags_win_over_the_environment_entirely() -> None:
    env = {"NSQD_TCP_ADDRESSES": "a:1,b:2", "NSQLOOKUPD_HTTP_ADDRESSES": "l:4161"}
    args = ns(nsqd_tcp=["x:1,y:2", "z:3"], lookupd_http=None)
    got = _common.resolve_addresses(args, KINDS, default="nsqd_tcp", environ=env)
    assert got == {"nsqd_tcp": ["x:1", "y:2", "z:3"], "lookupd_http": []}


def test_environment_then_default() -> None:
    args = ns(nsqd_tcp=None, lookupd_http=None)
    env = {"NSQD_TCP_ADDRESSES": " a:1 , b:2 ", "NSQLOOKUPD_HTTP_ADDRESSES": "l:4161"}
    got = _common.resolve_addresses(args, KINDS, default="nsqd_tcp", environ=env)
    assert got == {"nsqd_tcp": ["a:1", "b:2"], "lookupd_http": ["l:4161"]}
    got = _common.resolve_addresses(args, KINDS, default="nsqd_tcp", environ={})
    assert got == {"nsqd_tcp": ["127.0.0.1:4150"], "lookupd_http": []}


def test_config_from_args_maps_flags_and_opts() -> None:
    args = ns(snappy=True, deflate=False, tls_v1=False, auth_secret=None,
              opt=["dial_timeout=2500", "feature-negotiation=true", "client_id=me"])  # fmt: skip
    config = _common.config_from_args(args, environ={"NSQ_AUTH_SECRET": "s"})
    assert config.snappy and not config.deflate and config.auth_secret == "s"
    assert config.dial_timeout == 2500 and config.client_id == "me"
    with pytest.raises(ConfigError, match="did you mean"):
        _common.config_from_args(ns(opt=["dial_timout=1"]), environ={})
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        _common.config_from_args(ns(opt=["oops"]), environ={})


def channel(name: str, **counts: int) -> dict[str, object]:
    return {"channel_name": name, "client_count": 1, "paused": False, **counts}


def test_summarize_sums_over_nsqd_and_rates_against_the_previous_poll() -> None:
    one = {
        "topics": [
            {
                "topic_name": "t",
                "depth": 1,
                "message_count": 10,
                "channels": [channel("c", depth=2, in_flight_count=1, message_count=10)],
            }
        ]
    }
    two = {"topics": [{"topic_name": "t", "depth": 3, "message_count": 5, "paused": True,
                       "channels": [channel("c", depth=4, deferred_count=2, message_count=5),
                                    channel("d", message_count=5)]}]}  # fmt: skip
    first = stat.summarize([one, two], None, None)
    [row] = first
    assert (row["depth"], row["messages"], row["paused"], row["msgs_per_sec"]) == (
        4,
        15,
        True,
        None,
    )
    c = row["channels"][0]
    assert (c["channel"], c["depth"], c["in_flight"], c["deferred"], c["clients"]) == (
        "c",
        6,
        1,
        2,
        2,
    )
    later = json.loads(json.dumps({"topics": first}))  # the previous poll, 2 s ago
    later["topics"][0]["messages"] -= 10
    later["topics"][0]["channels"][0]["messages"] -= 4
    again = stat.summarize([one, two], later, 2.0)
    assert again[0]["msgs_per_sec"] == 5.0 and again[0]["channels"][0]["msgs_per_sec"] == 2.0
    only_d = stat.summarize([one, two], None, None, channel="d")
    assert [c["channel"] for c in only_d[0]["channels"]] == ["d"]
    assert "TOPIC / CHANNEL" in stat.table(
        {"time": 0, "nsqd": ["x"], "topics": first, "errors": []}
    )


def printer(**flags: object) -> tuple[tail.Printer, io.BytesIO]:
    args = ns(json=False, pretty=False, print_topic=False, delimiter=b"\n", requeue=False)
    vars(args).update(flags)
    out = io.BytesIO()
    done: list[bool] = []
    return tail.Printer(args, out, 2, lambda: done.append(True)), out


@given(st.binary(min_size=1, max_size=200))
def test_json_lines_carry_any_body_exactly(body: bytes) -> None:
    p, out = printer(
        json=True,
    )
    p.show("t", [Message(123, 1, b"0123456789abcdef", body)])
    record = json.loads(out.getvalue())
    if record["encoding"] == "base64":
        assert base64.b64decode(record["body"]) == body
    else:
        assert record["body"].encode("utf-8") == body


def test_printer_fins_what_it_printed_and_leaves_the_rest_for_the_close() -> None:
    p, out = printer(print_topic=True)
    messages = [Message(1, 1, b"%016d" % i, b"m%d" % i) for i in range(3)]
    p.show("t", messages)
    assert out.getvalue() == b"t | m0\nt | m1\n"
    assert [m.has_responded for m in messages] == [True, True, False]
    assert p.closed  # -n 2 reached


def test_pretty_indents_json_and_leaves_other_bodies_alone() -> None:
    p, out = printer(pretty=True, delimiter=b"\0")
    p.show("t", [Message(1, 1, b"0" * 16, b'{"a":1}'), Message(1, 1, b"1" * 16, b"\xff{")])
    assert out.getvalue() == b'{\n  "a": 1\n}\0\xff{\0'
