"""A lookupd-driven start does not pay for TLS it never uses (issue 21: the first lookupd query
came ~0.44 s after start(), mostly the HTTP stack's start-up; loading the CA bundle for a plain
http lookupd was a third of it on a quiet machine)."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from nsqclient.http import LookupdHTTPClient

pytestmark = pytest.mark.timeout(10)


def _verify(client: LookupdHTTPClient) -> Any:
    return client._client_options()["verify"]


async def test_a_plain_http_lookupd_client_loads_no_ca_bundle_and_https_still_verifies() -> None:
    plain = LookupdHTTPClient("127.0.0.1:4161", timeout=1)
    secure = LookupdHTTPClient("https://127.0.0.1:4161", timeout=1)
    context = ssl.create_default_context()
    given = LookupdHTTPClient("https://127.0.0.1:4161", timeout=1, verify=context)
    try:
        assert _verify(plain) is False  # nothing is ever sent over TLS to an http:// base URL
        assert _verify(secure) is True  # https keeps httpx's verified default
        assert _verify(given) is context
    finally:
        for client in (plain, secure, given):
            await client.aclose()
