"""Address parsing: every accepted form, the defaults, and a clear ConfigError otherwise."""

from __future__ import annotations

import pytest

from nsqclient.addresses import (
    format_address,
    parse_address,
    parse_addresses,
    parse_http_address,
    parse_http_addresses,
)
from nsqclient.errors import ConfigError

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("127.0.0.1:4150", ("127.0.0.1", 4150)),
        ("tcp://example.com:4000", ("example.com", 4000)),
        ("example.com", ("example.com", 4150)),
        ("[::1]:4150", ("::1", 4150)),
        ("::1", ("::1", 4150)),
        (("h", 1), ("h", 1)),
        (["h", "2"], ("h", 2)),
    ],
)
def test_parse_address_forms(given: object, expected: tuple[str, int]) -> None:
    assert parse_address(given) == expected


@pytest.mark.parametrize("bad", ["", "h:0", "h:70000", "h:port", "[::1", ("h",), 4150, None])
def test_parse_address_refuses_with_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="address"):
        parse_address(bad)


@pytest.mark.parametrize("url", ["http://127.0.0.1:4150", "https://h:4150", " HTTP://h:4151/"])
def test_a_url_is_refused_as_a_tcp_address(url: str) -> None:
    """A TCP address written as a URL is usually an HTTP address in the wrong place."""
    with pytest.raises(ConfigError, match="host:port") as info:
        parse_addresses([url], 4150)
    assert "4150" in str(info.value) and "HTTP port" in str(info.value)
    assert parse_http_address(url.strip().lower()).startswith("http")  # fine as HTTP


def test_lists_dedupe_and_keep_order() -> None:
    assert parse_addresses("a:1, b:2,a:1", 4150) == [("a", 1), ("b", 2)]
    assert parse_addresses(("h", 5), 4150) == [("h", 5)]
    assert parse_addresses(None, 4150) == []
    assert parse_http_addresses(["b", "https://a:1", "b:4151"], 4151) == [
        "http://b:4151",
        "https://a:1",
    ]
    assert parse_http_addresses("lookupd", 4161) == ["http://lookupd:4161"]  # one address
    assert parse_http_addresses(None, 4161) == []
    assert parse_http_address("[::1]:4161") == "http://[::1]:4161"
    assert format_address("::1", 1) == "[::1]:1"
