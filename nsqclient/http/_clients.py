"""The public clients: nsqd and nsqlookupd, each async and blocking.

Every method is one line: build the :class:`~._core.Call` (which validates the arguments) and
send it through the flavour's transport. The sync classes mirror the async ones method for method
(a test keeps the signatures equal) and borrow their docstrings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, overload

import httpx

from ..protocol import commands
from ..protocol.names import Body, single_body_batch
from ._core import LookupdCalls, NsqdCalls, info_call, ping_call
from ._models import LookupResult, Node, Producer
from ._transport import AsyncTransport, SyncTransport, Verify

__all__ = [
    "LookupdHTTPClient",
    "NsqdHTTPClient",
    "SyncLookupdHTTPClient",
    "SyncNsqdHTTPClient",
]

_LOOKUPD = LookupdCalls()


class NsqdHTTPClient(AsyncTransport):
    """nsqd's HTTP API (default port 4151) for asyncio: publish, stats, topic/channel admin.

    ``max_msg_size``, ``max_body_size`` and ``max_defer_ms`` should match nsqd's
    ``--max-msg-size``, ``--max-body-size`` and ``--max-req-timeout`` (defaults: nsqd's), so that
    input nsqd would refuse is refused here first with a typed error. ``timeout`` (seconds) bounds
    each whole request (connect, send, answer), however slowly the server answers; with a
    ``client`` of your own the blocking client's is httpx's per-phase timeout. ``headers`` are
    added to every request (``Accept`` is always nsqclient's). Pass ``client`` to share an
    ``httpx.AsyncClient`` (it is not closed here, and every call, publishing too, then goes
    through it); otherwise the publish calls use the client's own kept-alive
    HTTP/1.1 connections, about ten times cheaper than an httpx request. Use an ``https://``
    address and ``verify`` (an ``ssl.SSLContext``, a CA file path, or False) for HTTPS.
    """

    default_port = 4151

    def __init__(
        self,
        address: str | tuple[str, int] = "127.0.0.1:4151",
        *,
        timeout: float = 5.0,
        verify: Verify = True,
        client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        max_msg_size: int = commands.DEFAULT_MAX_MSG_SIZE,
        max_body_size: int = commands.DEFAULT_MAX_BODY_SIZE,
        max_defer_ms: int = commands.DEFAULT_MAX_REQ_TIMEOUT_MS,
    ) -> None:
        self._calls = NsqdCalls(
            max_msg_size=max_msg_size, max_body_size=max_body_size, max_defer_ms=max_defer_ms
        )
        super().__init__(address, timeout=timeout, verify=verify, client=client, headers=headers)

    async def ping(self) -> None:
        """Return if nsqd is up and healthy; raise :class:`HTTPError` otherwise.

        An unhealthy nsqd (a failed disk write) answers HTTP 500 ``NOK - <reason>``.
        """
        return await self._send(ping_call())

    async def info(self) -> dict[str, Any]:
        """``/info``: version, broadcast address, ports, limits (durations in nanoseconds)."""
        return await self._send(info_call())

    async def stats(
        self,
        *,
        topic: str | None = None,
        channel: str | None = None,
        include_clients: bool = True,
        include_mem: bool = True,
    ) -> dict[str, Any]:
        """``/stats?format=json``, optionally filtered to one topic and/or channel.

        nsqd's ``null`` lists (``topics``, ``channels``, ``clients``, ``producers``) become ``[]``;
        with ``include_clients=False`` ``clients`` is empty while ``client_count`` stays exact.
        """
        return await self._send(self._calls.stats(topic, channel, include_clients, include_mem))

    async def pub(
        self, topic: str, body: Body, *, defer_ms: int | None = None, timeout: float | None = None
    ) -> None:
        """Publish one message; with ``defer_ms`` nsqd holds it that long before delivery.

        ``timeout`` (seconds) replaces the client's for this request."""
        commands.check_timeout(timeout)
        return await self._send(self._calls.pub(topic, body, defer_ms), timeout)

    @overload
    @single_body_batch("mpub takes a list of bodies: wrap a single body in a list")
    async def mpub(
        self, topic: str, bodies: Body, *, binary: bool = True, timeout: float | None = None
    ) -> None: ...
    @overload
    async def mpub(
        self,
        topic: str,
        bodies: Iterable[Body],
        *,
        binary: bool = True,
        timeout: float | None = None,
    ) -> None: ...
    async def mpub(
        self,
        topic: str,
        bodies: Iterable[Body] | Body,
        *,
        binary: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Publish several messages, ``mpub(topic, [a, b])``, in one request (all or none).

        Binary framing carries any bytes; text mode (``binary=False``) joins bodies with
        newlines, so a body containing ``b"\\n"`` is refused. A single body instead of a list
        raises InvalidInputError before sending. ``timeout`` as in :meth:`pub`.
        """
        commands.check_timeout(timeout)
        return await self._send(self._calls.mpub(topic, bodies, binary), timeout)

    async def publish_command(self, data: bytes) -> None:
        """Send an already encoded PUB, DPUB or MPUB (``nsqclient.protocol.commands``) over
        HTTP: the Writer's fallback when no TCP connection is up."""
        return await self._send(self._calls.publish_command(data))

    async def create_topic(self, topic: str) -> None:
        """Create the topic (idempotent)."""
        return await self._send(self._calls.topic("create", topic))

    async def delete_topic(self, topic: str) -> None:
        """Delete the topic with its channels and messages; its consumers are disconnected."""
        return await self._send(self._calls.topic("delete", topic))

    async def empty_topic(self, topic: str) -> None:
        """Drop the messages queued at the topic (not those already copied to channels)."""
        return await self._send(self._calls.topic("empty", topic))

    async def pause_topic(self, topic: str) -> None:
        """Stop copying new messages to the topic's channels; they queue at the topic."""
        return await self._send(self._calls.topic("pause", topic))

    async def unpause_topic(self, topic: str) -> None:
        """Resume copying messages to the topic's channels (undo :meth:`pause_topic`)."""
        return await self._send(self._calls.topic("unpause", topic))

    async def create_channel(self, topic: str, channel: str) -> None:
        """Create the channel (idempotent); the topic must exist."""
        return await self._send(self._calls.channel("create", topic, channel))

    async def delete_channel(self, topic: str, channel: str) -> None:
        """Delete the channel and its messages; its consumers are disconnected."""
        return await self._send(self._calls.channel("delete", topic, channel))

    async def empty_channel(self, topic: str, channel: str) -> None:
        """Drop the channel's queued, in-flight and deferred messages."""
        return await self._send(self._calls.channel("empty", topic, channel))

    async def pause_channel(self, topic: str, channel: str) -> None:
        """Stop delivering to the channel's consumers; messages queue at the channel."""
        return await self._send(self._calls.channel("pause", topic, channel))

    async def unpause_channel(self, topic: str, channel: str) -> None:
        """Resume delivering to the channel's consumers (undo :meth:`pause_channel`)."""
        return await self._send(self._calls.channel("unpause", topic, channel))

    async def config(self, option: str) -> Any:
        """``GET /config/<option>``: an nsqd option by flag name with ``_`` (durations in ns)."""
        return await self._send(self._calls.config(option))

    async def set_config(self, option: str, value: str | Sequence[str]) -> Any:
        """``PUT /config/<option>``; nsqd allows only ``nsqlookupd_tcp_addresses`` (a list of
        ``host:port``) and ``log_level`` (a name). Returns the new value as nsqd reports it."""
        return await self._send(self._calls.set_config(option, value))


class SyncNsqdHTTPClient(SyncTransport):
    """Blocking twin of :class:`NsqdHTTPClient` on ``httpx.Client``; same arguments and methods."""

    default_port = 4151

    def __init__(
        self,
        address: str | tuple[str, int] = "127.0.0.1:4151",
        *,
        timeout: float = 5.0,
        verify: Verify = True,
        client: httpx.Client | None = None,
        headers: Mapping[str, str] | None = None,
        max_msg_size: int = commands.DEFAULT_MAX_MSG_SIZE,
        max_body_size: int = commands.DEFAULT_MAX_BODY_SIZE,
        max_defer_ms: int = commands.DEFAULT_MAX_REQ_TIMEOUT_MS,
    ) -> None:
        self._calls = NsqdCalls(
            max_msg_size=max_msg_size, max_body_size=max_body_size, max_defer_ms=max_defer_ms
        )
        super().__init__(address, timeout=timeout, verify=verify, client=client, headers=headers)

    def ping(self) -> None:
        """Return if nsqd is up and healthy; raise :class:`HTTPError` otherwise.

        An unhealthy nsqd (a failed disk write) answers HTTP 500 ``NOK - <reason>``.
        """
        return self._send(ping_call())

    def info(self) -> dict[str, Any]:
        """``/info``: version, broadcast address, ports, limits (durations in nanoseconds)."""
        return self._send(info_call())

    def stats(
        self,
        *,
        topic: str | None = None,
        channel: str | None = None,
        include_clients: bool = True,
        include_mem: bool = True,
    ) -> dict[str, Any]:
        """``/stats?format=json``, optionally filtered to one topic and/or channel.

        nsqd's ``null`` lists (``topics``, ``channels``, ``clients``, ``producers``) become ``[]``;
        with ``include_clients=False`` ``clients`` is empty while ``client_count`` stays exact.
        """
        return self._send(self._calls.stats(topic, channel, include_clients, include_mem))

    def pub(
        self, topic: str, body: Body, *, defer_ms: int | None = None, timeout: float | None = None
    ) -> None:
        """Publish one message; with ``defer_ms`` nsqd holds it that long before delivery.

        ``timeout`` (seconds) replaces the client's for this request."""
        commands.check_timeout(timeout)
        return self._send(self._calls.pub(topic, body, defer_ms), timeout)

    @overload
    @single_body_batch("mpub takes a list of bodies: wrap a single body in a list")
    def mpub(
        self, topic: str, bodies: Body, *, binary: bool = True, timeout: float | None = None
    ) -> None: ...
    @overload
    def mpub(
        self,
        topic: str,
        bodies: Iterable[Body],
        *,
        binary: bool = True,
        timeout: float | None = None,
    ) -> None: ...
    def mpub(
        self,
        topic: str,
        bodies: Iterable[Body] | Body,
        *,
        binary: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Publish several messages, ``mpub(topic, [a, b])``, in one request (all or none).

        Binary framing carries any bytes; text mode (``binary=False``) joins bodies with
        newlines, so a body containing ``b"\\n"`` is refused. A single body instead of a list
        raises InvalidInputError before sending. ``timeout`` as in :meth:`pub`.
        """
        commands.check_timeout(timeout)
        return self._send(self._calls.mpub(topic, bodies, binary), timeout)

    def publish_command(self, data: bytes) -> None:
        """Send an already encoded PUB, DPUB or MPUB (``nsqclient.protocol.commands``) over
        HTTP: the Writer's fallback when no TCP connection is up."""
        return self._send(self._calls.publish_command(data))

    def create_topic(self, topic: str) -> None:
        """Create the topic (idempotent)."""
        return self._send(self._calls.topic("create", topic))

    def delete_topic(self, topic: str) -> None:
        """Delete the topic with its channels and messages; its consumers are disconnected."""
        return self._send(self._calls.topic("delete", topic))

    def empty_topic(self, topic: str) -> None:
        """Drop the messages queued at the topic (not those already copied to channels)."""
        return self._send(self._calls.topic("empty", topic))

    def pause_topic(self, topic: str) -> None:
        """Stop copying new messages to the topic's channels; they queue at the topic."""
        return self._send(self._calls.topic("pause", topic))

    def unpause_topic(self, topic: str) -> None:
        """Resume copying messages to the topic's channels (undo :meth:`pause_topic`)."""
        return self._send(self._calls.topic("unpause", topic))

    def create_channel(self, topic: str, channel: str) -> None:
        """Create the channel (idempotent); the topic must exist."""
        return self._send(self._calls.channel("create", topic, channel))

    def delete_channel(self, topic: str, channel: str) -> None:
        """Delete the channel and its messages; its consumers are disconnected."""
        return self._send(self._calls.channel("delete", topic, channel))

    def empty_channel(self, topic: str, channel: str) -> None:
        """Drop the channel's queued, in-flight and deferred messages."""
        return self._send(self._calls.channel("empty", topic, channel))

    def pause_channel(self, topic: str, channel: str) -> None:
        """Stop delivering to the channel's consumers; messages queue at the channel."""
        return self._send(self._calls.channel("pause", topic, channel))

    def unpause_channel(self, topic: str, channel: str) -> None:
        """Resume delivering to the channel's consumers (undo :meth:`pause_channel`)."""
        return self._send(self._calls.channel("unpause", topic, channel))

    def config(self, option: str) -> Any:
        """``GET /config/<option>``: an nsqd option by flag name with ``_`` (durations in ns)."""
        return self._send(self._calls.config(option))

    def set_config(self, option: str, value: str | Sequence[str]) -> Any:
        """``PUT /config/<option>``; nsqd allows only ``nsqlookupd_tcp_addresses`` (a list of
        ``host:port``) and ``log_level`` (a name). Returns the new value as nsqd reports it."""
        return self._send(self._calls.set_config(option, value))


class LookupdHTTPClient(AsyncTransport):
    """nsqlookupd's HTTP API (default port 4161) for asyncio: discovery and registry admin.

    The registry endpoints edit lookupd only; they do not touch any nsqd. Arguments as for
    :class:`NsqdHTTPClient` (``headers`` can carry ``Authorization`` for a lookupd behind a proxy).
    """

    default_port = 4161

    def __init__(
        self,
        address: str | tuple[str, int] = "127.0.0.1:4161",
        *,
        timeout: float = 5.0,
        verify: Verify = True,
        client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(address, timeout=timeout, verify=verify, client=client, headers=headers)

    async def ping(self) -> None:
        """Return if lookupd answers ``OK``; raise :class:`HTTPError` otherwise."""
        return await self._send(ping_call())

    async def info(self) -> dict[str, Any]:
        """``/info``: ``{"version": ...}``."""
        return await self._send(info_call())

    async def lookup(self, topic: str) -> LookupResult:
        """The topic's channels and live, non-tombstoned producers.

        A topic lookupd has never heard of gives an empty result, not an error, so a Reader can
        poll for a topic before anyone publishes to it.
        """
        return await self._send(_LOOKUPD.lookup(topic))

    async def topics(self) -> list[str]:
        """Every topic lookupd has registered (registrations outlive their producers)."""
        return await self._send(_LOOKUPD.topics())

    async def channels(self, topic: str) -> list[str]:
        """The topic's registered channels (empty for an unknown topic)."""
        return await self._send(_LOOKUPD.channels(topic))

    async def nodes(self) -> list[Node]:
        """Every live nsqd registered with lookupd, with its topics and tombstones."""
        return await self._send(_LOOKUPD.nodes())

    async def create_topic(self, topic: str) -> None:
        """Register the topic in lookupd (no nsqd is told)."""
        return await self._send(_LOOKUPD.topic("create", topic))

    async def delete_topic(self, topic: str) -> None:
        """Remove the topic and its channels from lookupd (no nsqd is told; idempotent)."""
        return await self._send(_LOOKUPD.topic("delete", topic))

    async def create_channel(self, topic: str, channel: str) -> None:
        """Register the channel (and its topic) in lookupd."""
        return await self._send(_LOOKUPD.channel("create", topic, channel))

    async def delete_channel(self, topic: str, channel: str) -> None:
        """Remove the channel from lookupd; 404 CHANNEL_NOT_FOUND if it is not registered."""
        return await self._send(_LOOKUPD.channel("delete", topic, channel))

    async def tombstone_topic_producer(self, topic: str, node: str | Producer) -> None:
        """Hide one nsqd from ``/lookup`` for this topic (for ``--tombstone-lifetime``, 45s).

        Do this before deleting the topic on that nsqd, so consumers do not rediscover it.
        ``node`` is a :class:`Producer` or ``"broadcast_address:http_port"``.
        """
        return await self._send(_LOOKUPD.tombstone(topic, node))


class SyncLookupdHTTPClient(SyncTransport):
    """Blocking twin of :class:`LookupdHTTPClient` on ``httpx.Client``; same methods."""

    default_port = 4161

    def __init__(
        self,
        address: str | tuple[str, int] = "127.0.0.1:4161",
        *,
        timeout: float = 5.0,
        verify: Verify = True,
        client: httpx.Client | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(address, timeout=timeout, verify=verify, client=client, headers=headers)

    def ping(self) -> None:
        """Return if lookupd answers ``OK``; raise :class:`HTTPError` otherwise."""
        return self._send(ping_call())

    def info(self) -> dict[str, Any]:
        """``/info``: ``{"version": ...}``."""
        return self._send(info_call())

    def lookup(self, topic: str) -> LookupResult:
        """The topic's channels and live, non-tombstoned producers.

        A topic lookupd has never heard of gives an empty result, not an error, so a Reader can
        poll for a topic before anyone publishes to it.
        """
        return self._send(_LOOKUPD.lookup(topic))

    def topics(self) -> list[str]:
        """Every topic lookupd has registered (registrations outlive their producers)."""
        return self._send(_LOOKUPD.topics())

    def channels(self, topic: str) -> list[str]:
        """The topic's registered channels (empty for an unknown topic)."""
        return self._send(_LOOKUPD.channels(topic))

    def nodes(self) -> list[Node]:
        """Every live nsqd registered with lookupd, with its topics and tombstones."""
        return self._send(_LOOKUPD.nodes())

    def create_topic(self, topic: str) -> None:
        """Register the topic in lookupd (no nsqd is told)."""
        return self._send(_LOOKUPD.topic("create", topic))

    def delete_topic(self, topic: str) -> None:
        """Remove the topic and its channels from lookupd (no nsqd is told; idempotent)."""
        return self._send(_LOOKUPD.topic("delete", topic))

    def create_channel(self, topic: str, channel: str) -> None:
        """Register the channel (and its topic) in lookupd."""
        return self._send(_LOOKUPD.channel("create", topic, channel))

    def delete_channel(self, topic: str, channel: str) -> None:
        """Remove the channel from lookupd; 404 CHANNEL_NOT_FOUND if it is not registered."""
        return self._send(_LOOKUPD.channel("delete", topic, channel))

    def tombstone_topic_producer(self, topic: str, node: str | Producer) -> None:
        """Hide one nsqd from ``/lookup`` for this topic (for ``--tombstone-lifetime``, 45s).

        Do this before deleting the topic on that nsqd, so consumers do not rediscover it.
        ``node`` is a :class:`Producer` or ``"broadcast_address:http_port"``.
        """
        return self._send(_LOOKUPD.tombstone(topic, node))
