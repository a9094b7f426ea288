"""The two transport shims: send a :class:`~._core.Call` with httpx, async or blocking.

They own the httpx client (unless one is passed in), the base URL, the timeout, closing, and the
mapping of httpx failures to typed errors. They know nothing of any endpoint. Publish calls
(``Call.wire``) go over the transport's own keep-alive connections (``_wire``) when it created
its client itself: httpx costs near 1 ms of CPU a request, which capped HTTP publishing. The
blocking transport sends every call there (its own client only): ``timeout`` then bounds the
whole call, as the asyncio one's deadline does; with a caller's httpx client it is httpx's
per-phase timeout.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

import httpx

from ..addresses import parse_http_address
from ..config import default_user_agent
from ..errors import ClosedError, ConfigError, HTTPTimeoutError
from ._core import ACCEPT, Call
from ._errors import error_from_transport
from ._wire import AsyncWire, SyncWire, request_target

__all__ = ["AsyncTransport", "SyncTransport", "Verify"]

T = TypeVar("T")
Verify = ssl.SSLContext | str | bool


class _Base:
    """Settings both flavours share; ``default_port`` is the daemon's HTTP port."""

    default_port: ClassVar[int]

    def __init__(
        self,
        address: str | tuple[str, int],
        timeout: float,
        verify: Verify,
        client_given: bool,
        headers: Mapping[str, str] | None,
    ) -> None:
        self.base_url = parse_http_address(address, self.default_port)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        if client_given and verify is not True:
            raise ConfigError(
                "verify applies to the client nsqclient creates; "
                "configure TLS on the httpx client you pass instead"
            )
        self._closed = False
        # Accept always wins: it selects the response format on pre-1.0 servers.
        extra = {k: v for k, v in (headers or {}).items() if k.lower() != "accept"}
        self._headers = {"User-Agent": default_user_agent(), **extra, "Accept": ACCEPT}
        # resolved once: the wire and the httpx client share it (a CA file is read once)
        self._verify = _ssl_context(verify)

    def _client_options(self) -> dict[str, Any]:
        # trust_env=False: like go-nsq, never send nsqd traffic through an HTTP(S)_PROXY.
        # Plain http (every call goes to base_url, redirects are not followed) never uses TLS:
        # verify=False spares httpx loading the CA bundle, most of a Reader's first lookupd query.
        plain = self.base_url.startswith("http://")
        verify = False if plain and self._verify is True else self._verify
        return {"verify": verify, "trust_env": False, "timeout": self.timeout}

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"this {type(self).__name__} was closed; create a new one")

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self.base_url}{state}>"


def _ssl_context(verify: Verify) -> ssl.SSLContext | bool:
    if not isinstance(verify, str):
        return verify
    try:  # httpx 0.28 deprecates verify=<path>; build the context it would have built
        return ssl.create_default_context(cafile=verify)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load CA file verify={verify!r}: {exc}") from exc


class AsyncTransport(_Base):
    """Sends calls on an ``httpx.AsyncClient``. Closes the client only if it created it."""

    def __init__(
        self,
        address: str | tuple[str, int],
        *,
        timeout: float,
        verify: Verify,
        client: httpx.AsyncClient | None,
        headers: Mapping[str, str] | None,
    ) -> None:
        super().__init__(address, timeout, verify, client is not None, headers)
        self._owns_client = client is None
        # the wire first: it checks the headers, and may refuse them before httpx opens anything
        self._wire = (
            AsyncWire(self.base_url, self._headers, self._verify) if client is None else None
        )
        self._client = client if client is not None else httpx.AsyncClient(**self._client_options())

    async def _send(self, call: Call[T], timeout: float | None = None) -> T:
        self._check_open()
        limit = self.timeout if timeout is None else timeout
        if call.wire and self._wire is not None:
            target = request_target(call.path, call.params)
            try:
                async with asyncio.timeout(limit):
                    answer = await self._wire.request(call.method, target, call.content)
            except TimeoutError:
                raise HTTPTimeoutError(
                    f"timed out (no answer within {limit:g} s)",
                    url=self.base_url + target,
                    address=self._wire.address,
                ) from None
            return call.result(answer.status, answer.headers, answer.body, self.base_url + target)
        url = self.base_url + call.path
        try:
            # httpx's timeout is per phase (each read may take all of it): the deadline here
            # bounds the whole call, however slowly the server trickles its answer
            async with asyncio.timeout(limit):
                response = await self._client.request(
                    call.method,
                    url,
                    params=call.params,
                    content=call.content,
                    headers=self._headers,
                    timeout=limit,
                )
        except httpx.TransportError as exc:
            raise error_from_transport(exc, url) from exc
        except TimeoutError:
            raise HTTPTimeoutError(
                f"timed out (no complete answer within {limit:g} s)", url=url, address=None
            ) from None
        return call.result(
            response.status_code, response.headers, response.content, str(response.url)
        )

    async def aclose(self) -> None:
        """Close the connection pool (if this object created it). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._wire is not None:
            await self._wire.aclose()
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class SyncTransport(_Base):
    """Sends calls on an ``httpx.Client``: blocking, no event loop or thread involved."""

    def __init__(
        self,
        address: str | tuple[str, int],
        *,
        timeout: float,
        verify: Verify,
        client: httpx.Client | None,
        headers: Mapping[str, str] | None,
    ) -> None:
        super().__init__(address, timeout, verify, client is not None, headers)
        self._owns_client = client is None
        self._wire = (
            SyncWire(self.base_url, self._headers, self._verify) if client is None else None
        )
        self._client = client if client is not None else httpx.Client(**self._client_options())

    def _send(self, call: Call[T], timeout: float | None = None) -> T:
        self._check_open()
        limit = self.timeout if timeout is None else timeout
        if self._wire is not None:
            # every call of a client made here goes on the wire: its timeout bounds the whole
            # call, where httpx's (per phase) would let a trickling server stretch it forever
            target = request_target(call.path, call.params)
            answer = self._wire.request(call.method, target, call.content, limit)
            return call.result(answer.status, answer.headers, answer.body, self.base_url + target)
        url = self.base_url + call.path
        try:
            response = self._client.request(
                call.method,
                url,
                params=call.params,
                content=call.content,
                headers=self._headers,
                timeout=limit,
            )
        except httpx.TransportError as exc:
            raise error_from_transport(exc, url) from exc
        return call.result(
            response.status_code, response.headers, response.content, str(response.url)
        )

    def close(self) -> None:
        """Close the connection pool (if this object created it). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._wire is not None:
            self._wire.close()
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
