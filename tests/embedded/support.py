"""Small async helpers shared by the embedded-server tests: HTTP calls, /stats lookups and
transcripts (:func:`transcript` turns what a server answers to a script into comparable tuples,
which is how the differential tests check the embedded nsqd against the real one). The raw
client is ``tests.rawconn_support.RawClient``; deadline waits are ``tests.support.wait_for``."""

from __future__ import annotations

from typing import Any

import httpx

from nsqclient.message import Message
from nsqclient.protocol import ErrorFrame, Event, Heartbeat, Response
from tests.rawconn_support import SYNC_TOPIC, Closed, RawClient, sized


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


def normalize(event: Event) -> tuple[Any, ...]:
    if isinstance(event, Heartbeat):
        return ("heartbeat",)
    if isinstance(event, ErrorFrame):
        return ("error", event.text)
    if isinstance(event, Message):
        return ("message", event.attempts, bytes(event.body))
    assert isinstance(event, Response)
    return ("response", event.data)


_REPLY_VERBS = (b"IDENTIFY", b"SUB ", b"PUB ", b"MPUB ", b"DPUB ", b"CLS", b"AUTH")


async def transcript(
    address: str, *chunks: bytes, sync: bool = True, replies: int | None = None
) -> list[tuple[Any, ...]]:
    """Send ``chunks`` (after the magic) and record every frame until the server closes the
    connection or, with ``sync``, answers a final sync PUB.

    The sync reply is the response after ``replies`` others (by default one per chunk that
    starts with a reply-producing command; each chunk should hold one command).
    """
    if replies is None:
        replies = sum(1 for c in chunks if c.startswith(_REPLY_VERBS))
    client = await RawClient.connect(address)
    for chunk in chunks:
        client.send(chunk)
    # The sync PUB leaves only once every reply-producing command has answered. Sent with the
    # script, it may still sit unread in the server's socket when a fatal error closes the
    # connection; a close with unread data is a TCP reset, and a reset can discard the error
    # frame before we read it (seen with real nsqd under CPU load).
    unsent_sync = sync
    answered = 0
    seen: list[tuple[Any, ...]] = []
    responses = 0
    try:
        while True:
            if unsent_sync and answered >= replies:
                client.send(sized(b"PUB " + SYNC_TOPIC + b"\n", b"x"))
                unsent_sync = False
            event = await client.event()
            if isinstance(event, Response | ErrorFrame):
                answered += 1
            if sync and isinstance(event, Response):
                if responses == replies:
                    seen.append(("sync", event.data))
                    break
                responses += 1
            seen.append(normalize(event))
    except Closed:
        seen.append(("closed",))
    await client.close()
    return seen
