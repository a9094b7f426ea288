"""Small async helpers shared by the embedded-server tests: HTTP calls and /stats lookups
(deadline waits: ``tests.support.wait_for``)."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

T = TypeVar("T")


async def http(server: Any, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://{server.http_address}", timeout=10) as c:
        return await c.request(method, path, **kwargs)


async def stats(server: Any, topic: str | None = None, **params: str) -> dict[str, Any]:
    query = {"format": "json", **params}
    if topic is not None:
        query["topic"] = topic
    response = await http(server, "GET", "/stats", params=query)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def channel_stats(server: Any, topic: str, channel: str) -> Any:
    """The channel's /stats entry, or None."""
    for t in (await stats(server, topic))["topics"] or []:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return dict(c)
    return None


async def topic_stats(server: Any, topic: str) -> Any:
    """The topic's /stats entry, or None."""
    topics = (await stats(server, topic))["topics"] or []
    return dict(topics[0]) if topics else None
