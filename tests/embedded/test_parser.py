"""The embedded server's incremental parser and its Go-compatible helpers.

However a command stream is cut into TCP reads, the answers must be the same as for the whole
stream (property test); the helpers must reproduce Go's parsing, quoting and JSON.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqclient.testing.embedded import ThreadedEmbeddedNsqd
from nsqclient.testing.embedded.wire import go_json, go_quote, parse_base10, parse_query, to_int64
from tests.rawconn_support import RawClient, identify_body, mpub_body, sized

from .support import normalize

pytestmark = pytest.mark.timeout(120)

STREAM = b"".join(
    [
        identify_body(heartbeat_interval=5000, client_id="frag"),
        b"SUB frag c\r\n",
        sized(b"PUB frag\n", b"first"),
        b"MPUB frag\n" + mpub_body(b"a", b"bb", b"c" * 300),
        sized(b"DPUB frag 0\n", b"deferred"),
        b"RDY 10\n",
        b"NOP\n",
        b"FIN 0123456789abcdef\n",
        sized(b"PUB frag\n", b"last"),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedEmbeddedNsqd]:
    with ThreadedEmbeddedNsqd() as nsqd:
        yield nsqd


async def answers(address: str, pieces: list[bytes]) -> list[tuple[object, ...]]:
    client = await RawClient.connect(address)
    for piece in pieces:
        client.send(piece)
        await client.writer.drain()
        await asyncio.sleep(0)
    # 6 OKs (IDENTIFY, SUB, 4 publishes), 1 error, 6 messages; interleaving may vary
    seen = [normalize(await client.event()) for _ in range(13)]
    await client.close()
    return sorted(seen)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=30))
def test_fragmentation_does_not_change_the_answers(
    server: ThreadedEmbeddedNsqd, cuts: list[int]
) -> None:
    points = [0, *sorted(set(cuts)), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    whole = asyncio.run(answers(server.tcp_address, [STREAM]))
    split = asyncio.run(answers(server.tcp_address, pieces))
    assert split == whole
    assert ("error", "E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight") in whole


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (b"", 0),
        (b"0", 0),
        (b"42", 42),
        (b"-1", None),
        (b"+1", None),
        (b"1x", None),
        (b"\xd9\xa1", None),
        (b"18446744073709551616", 0),
        (b"18446744073709551617", 1),
    ],
)
def test_parse_base10_is_gos_byte_to_base10(text: bytes, value: int | None) -> None:
    assert parse_base10(text) == value


def test_to_int64_wraps() -> None:
    assert to_int64(2**63) == -(2**63)
    assert to_int64(2**64 + 5) == 5


@pytest.mark.parametrize(
    ("raw", "quoted"),
    [
        (b"plain", b'"plain"'),
        (b'a"b\\c', b'"a\\"b\\\\c"'),
        (b"\x00\x07\n\x7f", b'"\\x00\\a\\n\\x7f"'),
        ("é€".encode(), '"é€"'.encode()),
        (b"\xff\xfe", b'"\\xff\\xfe"'),
        ("\u200b".encode(), b'"\\u200b"'),
    ],
)
def test_go_quote(raw: bytes, quoted: bytes) -> None:
    assert go_quote(raw) == quoted


def test_go_json_escapes_html() -> None:
    assert go_json({"a": "<&>", "b": [1, True, None]}) == (
        b'{"a":"\\u003c\\u0026\\u003e","b":[1,true,null]}'
    )


def test_parse_query_is_strict() -> None:
    assert parse_query("topic=a+b&topic=c&x=%41&&flag") == {
        "topic": ["a b", "c"],
        "x": ["A"],
        "flag": [""],
    }
    for bad in ("a=%zz", "a=%4", "a=1;b=2"):
        with pytest.raises(ValueError):
            parse_query(bad)
