"""Exceptions for the HTTP helpers; mapping httpx failures and nsqd error codes to them.

Every failure of an HTTP call is an :class:`~nsqclient.errors.HTTPError`, so one ``except`` covers
a helper call.
Transport failures also join the library's transport branch (``ConnectError``,
``NSQTimeoutError``) and protocol branch, so code already catching those, or ``ConnectionError`` /
``TimeoutError``, keeps working for HTTP too.
"""

from __future__ import annotations

import ssl

import httpx

from ..errors import HTTPConnectError, HTTPError, HTTPProtocolError, HTTPTimeoutError

__all__ = [
    "HTTPConnectError",
    "HTTPError",
    "HTTPProtocolError",
    "HTTPTimeoutError",
    "error_from_transport",
]


def error_from_transport(exc: httpx.TransportError, url: str) -> HTTPError:
    """The typed error for an httpx failure that produced no response."""
    try:
        address: str | None = f"{exc.request.url.host}:{exc.request.url.port}"
    except RuntimeError:  # no request attached (not raised by httpx's own transports)
        address = None
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return HTTPTimeoutError(f"timed out ({detail})", url=url, address=address)
    if _caused_by(exc, ssl.SSLCertVerificationError):
        detail += (
            "; the server certificate was not verified: pass verify=ssl.create_default_context("
            "cafile=...) for a private CA"
        )
    elif isinstance(exc, httpx.ConnectError):
        detail += "; is the daemon running and is this its HTTP address?"
        return HTTPConnectError(f"no response ({detail})", url=url, address=address, sent=False)
    elif isinstance(exc, httpx.RemoteProtocolError):
        detail += NOT_HTTP_HINT
    return HTTPConnectError(f"no response ({detail}); {_outcome(exc)}", url=url, address=address)


#: said when a server hung up without an HTTP answer
NOT_HTTP_HINT = (
    "; the server did not answer in HTTP: is this a TCP port? (nsqlookupd's TCP port is "
    "usually 4160 and its HTTP port 4161; nsqd's are 4150 and 4151)"
)


def _outcome(exc: httpx.TransportError) -> str:
    try:
        method = exc.request.method
    except RuntimeError:
        method = ""
    return outcome(method)


def outcome(method: str) -> str:
    """What a broken exchange means for the request: a query changed nothing either way."""
    if method in ("GET", "HEAD"):
        return f"the request was a {method}, which changes nothing: safe to repeat"
    return "the request was sent, so it may or may not have been applied"


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # bounded: cause chains can loop
        if seen is None:
            return False
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
