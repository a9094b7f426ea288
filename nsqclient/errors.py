"""Every exception nsqclient raises, in one tree rooted at :class:`NSQError`.

Catch ``NSQError`` to catch everything from this library; catch a branch to handle one kind of
failure. Exceptions that also describe a builtin category inherit from that builtin too, so
``except ValueError`` around a bad option or ``except TimeoutError`` around a publish keeps working.
One rule for connectivity: every error that means nsqd could not be reached or the link to it
broke is a ``ConnectionError`` (ConnectError, ConnectionClosedError, NoConnectionsError,
HTTPConnectError), and every deadline a ``TimeoutError``, so ``except (ConnectionError,
TimeoutError)`` catches "nsqd is down or slow" from any client.

Every error has ``sent``: False when nothing reached nsqd (refused locally, no connection, timed
out before it was written: retrying cannot duplicate), True when the command was written, so nsqd
may have seen it (a ServerError: it saw and refused it; a lost connection or a timeout after the
write: it may or may not have been applied).

::

    NSQError
    ├── ConfigError (ValueError)              an option value is out of range or inconsistent
    ├── InvalidInputError                      refused locally, before anything was sent
    │   ├── InvalidTopicError (ValueError)
    │   ├── InvalidChannelError (ValueError)
    │   ├── InvalidBodyTypeError (TypeError)
    │   ├── MessageTooLargeError (ValueError)
    │   ├── EmptyMessageError (ValueError)     a body of zero bytes (nsqd refuses them)
    │   └── InvalidArgumentError (ValueError)  a delay, count or id out of range
    ├── ProtocolError                          nsqd sent bytes that break the protocol
    │   └── FrameTooLargeError
    ├── ServerError                            nsqd answered with an E_* error frame
    │   ├── InvalidError, BadBodyError, BadTopicError, BadChannelError, BadMessageError,
    │   │   BadProtocolError, IdentifyFailedError, SubscribeFailedError
    │   ├── PublishFailedError                 E_PUB_FAILED, E_MPUB_FAILED, E_DPUB_FAILED
    │   ├── ResponseFailedError                non-fatal: the connection stays open
    │   │   └── FinFailedError, ReqFailedError, TouchFailedError
    │   └── ServerAuthError (also AuthError)   E_AUTH_* and E_UNAUTHORIZED
    ├── AuthError                              authentication refused or impossible
    │   ├── AuthRequiredError                  nsqd requires AUTH and no secret was configured
    │   └── ServerAuthError ...
    ├── TransportError                         the link to one nsqd failed; carries ``address``
    │   ├── ConnectError (ConnectionError)     could not connect or handshake
    │   │   ├── TLSError                       TLS handshake or certificate verification failed
    │   │   └── WrongPortError                 the address answered, but not as nsqd's TCP port
    │   ├── ConnectionClosedError (ConnectionError)
    │   ├── NSQTimeoutError (TimeoutError)     dial, read, write or publish deadline passed
    │   │   └── NotSentTimeoutError            timed out before it was written: never sent
    │   └── NoConnectionsError (ConnectionError) no healthy nsqd to publish to in time
    ├── HTTPError                              an nsqd/nsqlookupd HTTP call failed; ``status_code``
    │   ├── HTTPConnectError (ConnectError)    no response: unreachable, or the connection broke
    │   ├── HTTPTimeoutError (NSQTimeoutError)
    │   └── HTTPProtocolError (ProtocolError)  a 2xx answer with an unexpected body
    ├── ClosedError                            the object was closed; create a new one
    └── WorkerError                            ``nsqclient worker`` gave up (children died at start)
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "AuthRequiredError",
    "BadBodyError",
    "BadChannelError",
    "BadMessageError",
    "BadProtocolError",
    "BadTopicError",
    "ClosedError",
    "ConfigError",
    "ConnectError",
    "ConnectionClosedError",
    "EmptyMessageError",
    "FinFailedError",
    "FrameTooLargeError",
    "HTTPConnectError",
    "HTTPError",
    "HTTPProtocolError",
    "HTTPTimeoutError",
    "IdentifyFailedError",
    "InvalidArgumentError",
    "InvalidBodyTypeError",
    "InvalidChannelError",
    "InvalidError",
    "InvalidInputError",
    "InvalidTopicError",
    "MessageTooLargeError",
    "NSQError",
    "NSQTimeoutError",
    "NoConnectionsError",
    "NotSentTimeoutError",
    "ProtocolError",
    "PublishFailedError",
    "ReqFailedError",
    "ResponseFailedError",
    "ServerAuthError",
    "ServerError",
    "SubscribeFailedError",
    "TLSError",
    "TouchFailedError",
    "TransportError",
    "WorkerError",
    "WrongPortError",
]


class NSQError(Exception):
    """Root of every exception raised by nsqclient.

    ``sent`` says whether the command may have reached nsqd: False means it never left this
    process (a publish: retrying is safe, it cannot duplicate), True that it was written (a
    publish: stored or not depends on the type; see the outcome table in docs/errors.md).
    """

    sent: bool = False


class ConfigError(NSQError, ValueError):
    """An option is out of range, of the wrong type, or conflicts with another option."""


class InvalidInputError(NSQError):
    """Input refused locally before anything was sent to nsqd."""


class InvalidTopicError(InvalidInputError, ValueError):
    """A topic name nsqd would reject: 1-64 of ``[.a-zA-Z0-9_-]``, optional ``#ephemeral``."""


class InvalidChannelError(InvalidInputError, ValueError):
    """A channel name nsqd would reject (same rule as topics)."""


class InvalidBodyTypeError(InvalidInputError, TypeError):
    """A message body that is not bytes, bytearray, memoryview or str."""


class MessageTooLargeError(InvalidInputError, ValueError):
    """A body (or MPUB batch) larger than nsqd accepts: ``max_msg_size`` / ``max_body_size``,
    or the limit nsqd itself reported in an earlier E_BAD_MESSAGE."""


class EmptyMessageError(InvalidInputError, ValueError):
    """A message body of zero bytes: nsqd refuses empty messages. Send at least one byte."""


class InvalidArgumentError(InvalidInputError, ValueError):
    """A delay, RDY count, message id or similar argument outside what nsqd accepts."""


class ProtocolError(NSQError):
    """nsqd (or something pretending to be nsqd) sent bytes that violate the protocol.

    The connection cannot be trusted after this and is closed; a publish that gets it was sent
    and may or may not have been applied.
    """

    sent = True


class FrameTooLargeError(ProtocolError):
    """An incoming frame announced a size above the configured bound; it was not buffered.

    ``size`` is the size it announced.
    """

    def __init__(self, message: str, *, size: int | None = None) -> None:
        self.size = size
        super().__init__(message)


class AuthError(NSQError):
    """Authentication was refused, or nsqd requires it and no ``auth_secret`` was configured."""


class AuthRequiredError(AuthError):
    """nsqd requires AUTH (its IDENTIFY reply says ``auth_required``); set ``auth_secret``."""


class ServerError(NSQError):
    """nsqd replied with an error frame.

    ``code`` is the ``E_*`` code, ``text`` the full frame text as nsqd sent it, and ``fatal`` says
    whether nsqd closes the connection after sending it (every code but E_FIN_FAILED,
    E_REQ_FAILED and E_TOUCH_FAILED).
    """

    code: str = ""
    fatal: bool = True
    sent = True  # nsqd saw the command (and refused it: a refused publish is not stored)

    def __init__(self, text: str, *, code: str | None = None, address: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.text = text
        self.address = address
        where = f" (from nsqd {address})" if address else ""
        hint = _server_hint(self.code, text)
        super().__init__(f"{text}{where}" + (f": {hint}" if hint else ""))

    @property
    def description(self) -> str:
        """The human part of the frame text, after the code."""
        head, _, rest = self.text.partition(" ")
        return rest if head == self.code else self.text


class InvalidError(ServerError):
    """E_INVALID: wrong state, unknown command, bad parameter. Usually a bug on our side."""

    code = "E_INVALID"


class BadProtocolError(ServerError):
    """E_BAD_PROTOCOL: the magic was wrong; this is not an NSQ V2 server conversation."""

    code = "E_BAD_PROTOCOL"


class BadBodyError(ServerError):
    """E_BAD_BODY: an IDENTIFY, AUTH or MPUB body was refused."""

    code = "E_BAD_BODY"


class BadTopicError(ServerError):
    """E_BAD_TOPIC: nsqd refused the topic name."""

    code = "E_BAD_TOPIC"


class BadChannelError(ServerError):
    """E_BAD_CHANNEL: nsqd refused the channel name."""

    code = "E_BAD_CHANNEL"


class BadMessageError(ServerError):
    """E_BAD_MESSAGE: a message body was empty or larger than nsqd's ``--max-msg-size``."""

    code = "E_BAD_MESSAGE"


class IdentifyFailedError(ServerError):
    """E_IDENTIFY_FAILED: feature negotiation failed (for example snappy and deflate together)."""

    code = "E_IDENTIFY_FAILED"


class SubscribeFailedError(ServerError):
    """E_SUB_FAILED: nsqd could not add the subscription (exiting, or consumer limit reached)."""

    code = "E_SUB_FAILED"


class PublishFailedError(ServerError):
    """E_PUB_FAILED, E_MPUB_FAILED or E_DPUB_FAILED: nsqd could not store the message(s)."""

    code = "E_PUB_FAILED"


class ResponseFailedError(ServerError):
    """A FIN, REQ or TOUCH named a message this connection no longer owns. Not fatal.

    Usually the message timed out on nsqd (raise ``msg_timeout`` or touch it) and will be
    redelivered.
    """

    fatal = False


class FinFailedError(ResponseFailedError):
    """E_FIN_FAILED: the message was not in flight for this connection."""

    code = "E_FIN_FAILED"


class ReqFailedError(ResponseFailedError):
    """E_REQ_FAILED: the message was not in flight for this connection."""

    code = "E_REQ_FAILED"


class TouchFailedError(ResponseFailedError):
    """E_TOUCH_FAILED: the message was not in flight for this connection."""

    code = "E_TOUCH_FAILED"


class ServerAuthError(ServerError, AuthError):
    """nsqd refused authentication or authorization (E_AUTH_* or E_UNAUTHORIZED).

    Check ``auth_secret`` and the permissions the auth server grants for this topic/channel.
    """

    code = "E_AUTH_FAILED"


class TransportError(NSQError):
    """The connection to one nsqd failed. ``address`` is that nsqd's ``host:port``.

    ``sent`` (see :class:`NSQError`) is the class's unless given.
    """

    sent = True

    def __init__(
        self, message: str, *, address: str | None = None, sent: bool | None = None
    ) -> None:
        self.address = address
        if sent is not None:
            self.sent = sent
        where = f" [nsqd {address}]" if address else ""
        super().__init__(f"{message}{where}")


class ConnectError(TransportError, ConnectionError):
    """Could not connect to nsqd, or the handshake (magic, IDENTIFY, upgrades, AUTH) failed."""

    sent = False


class TLSError(ConnectError):
    """The TLS handshake failed, for example because the certificate could not be verified.

    Pass ``tls_ca_file`` for a private CA; ``tls_insecure_skip_verify`` exists for development only.
    """


class WrongPortError(ConnectError):
    """The address answered, but not as nsqd's TCP protocol (for example nsqd's HTTP port,
    4151, or nsqlookupd's TCP port, 4160, instead of nsqd's TCP port, 4150). Retrying cannot
    help: fix the address."""


class ConnectionClosedError(TransportError, ConnectionError):
    """The connection closed while a command was pending; it may or may not have been applied."""


class NSQTimeoutError(TransportError, TimeoutError):
    """A dial, read, write or publish deadline passed.

    For a publish: it was written, and nsqd did not answer in time, so it may or may not have
    been stored (``sent`` True); :class:`NotSentTimeoutError` when it was never written.
    """


class NotSentTimeoutError(NSQTimeoutError):
    """A publish timed out before it was written to nsqd (waiting in the SyncWriter's queue or
    for a free ``max_pending_publishes`` slot): never sent, so retrying is safe (``sent`` False)."""

    sent = False


class NoConnectionsError(TransportError, ConnectionError):
    """No nsqd connection was usable within the timeout, so nothing was sent (a
    ``ConnectionError``, as the other "nsqd cannot be reached" errors).

    Check the addresses and that nsqd runs; the Writer keeps reconnecting in the background, so
    retrying the publish later is safe (it was never sent).
    """

    sent = False


# What to do about each error code nsqd / nsqlookupd put in {"message": CODE}.
_HTTP_HINTS: dict[str, str] = {
    "MSG_TOO_BIG": "a message is above nsqd's --max-msg-size; raise that flag on nsqd, "
    "or set max_msg_size here to nsqd's value so such bodies are refused locally",
    "BODY_TOO_BIG": "the request body is above nsqd's --max-body-size; publish smaller batches, "
    "or set max_body_size here to nsqd's value so they are refused locally",
    "BAD_MESSAGE": "an /mpub item is empty or above nsqd's --max-msg-size; "
    "set max_msg_size here to nsqd's value so such items are refused locally",
    "BAD_BODY": "nsqd could not parse the /mpub body (message count); please report this bug",
    "MSG_EMPTY": "nsqd refuses empty messages",
    "INVALID_DEFER": "defer is above nsqd's --max-req-timeout; "
    "lower defer_ms, or set max_defer_ms here to nsqd's value",
    "TOPIC_NOT_FOUND": "the topic does not exist (create it first, or it was already deleted)",
    "CHANNEL_NOT_FOUND": "the channel does not exist (create it first, or it was already deleted)",
    "INVALID_OPTION": "not an nsqd option (use the flag name with '-' replaced by '_'); "
    "only nsqlookupd_tcp_addresses and log_level can be changed at runtime",
    "INVALID_VALUE": "nsqd refused the value (nsqlookupd_tcp_addresses takes a list of "
    "'host:port', log_level a level name such as 'info')",
    "NOT_FOUND": "no such endpoint: check the address points at the right daemon "
    "(nsqd HTTP is 4151, nsqlookupd HTTP 4161) and that it runs NSQ 1.0 or later",
    "METHOD_NOT_ALLOWED": "the server does not accept this method here; is it NSQ 1.0 or later?",
    "EXITING": "nsqd is shutting down; publish to another nsqd",
    "INTERNAL_ERROR": "the server failed internally; see its log",
    "TLS_REQUIRED": "this nsqd requires TLS; use its https:// address (--https-address)",
}


class HTTPError(NSQError):
    """An nsqd or nsqlookupd HTTP call failed.

    ``status_code`` is the HTTP status (None when no response arrived), ``message`` the server's
    error code (``"TOPIC_NOT_FOUND"``) or the transport failure, and ``url`` the request URL.
    ``sent`` is True: the server answered (it saw the request), except for an
    :class:`HTTPConnectError` that failed before connecting.
    """

    sent = True

    def __init__(
        self, message: str, *, url: str, status_code: int | None = None, detail: str = ""
    ) -> None:
        self.status_code = status_code
        self.message = message
        self.url = url
        hint = _HTTP_HINTS.get(message)
        status = f"HTTP {status_code} " if status_code is not None else ""
        extra = f" ({detail})" if detail else ""
        text = f"{status}{message}{extra} from {url}" + (f": {hint}" if hint else "")
        super().__init__(text)


class HTTPConnectError(HTTPError, ConnectError):
    """No response: the server could not be reached, or the connection broke mid-request.

    In the second case the request may or may not have been applied (a publish may be duplicated
    by a retry, which NSQ's at-least-once delivery allows anyway).
    """

    def __init__(
        self, message: str, *, url: str, address: str | None = None, sent: bool = True
    ) -> None:
        super().__init__(message, url=url)
        self.address = address  # TransportError's field: the daemon's host:port
        #: False when no connection was made, so nothing reached the server (safe to send
        #: elsewhere); True when it broke after the request may have gone out
        self.sent = sent


class HTTPTimeoutError(HTTPError, NSQTimeoutError):
    """The request did not complete within ``timeout`` seconds."""

    def __init__(self, message: str, *, url: str, address: str | None = None) -> None:
        super().__init__(message, url=url)
        self.address = address


class HTTPProtocolError(HTTPError, ProtocolError):
    """The server answered 2xx with a body that is not what this endpoint returns."""


class ClosedError(NSQError):
    """The Reader, Writer or connection was closed; create a new one.

    ``sent`` is False unless the close interrupted a publish already sent (the message says so).
    """

    def __init__(self, *args: object, sent: bool = False) -> None:
        super().__init__(*args)
        self.sent = sent


class WorkerError(NSQError):
    """``nsqclient worker`` (:func:`nsqclient.worker.run`) gave up: its child processes kept
    dying during start-up (``max_start_failures`` in a row), or it could not run at all. The log
    lines before it say why each child died; fix that and start it again."""


_BY_CODE: dict[str, type[ServerError]] = {
    cls.code: cls
    for cls in (
        InvalidError,
        BadProtocolError,
        BadBodyError,
        BadTopicError,
        BadChannelError,
        BadMessageError,
        IdentifyFailedError,
        SubscribeFailedError,
        PublishFailedError,
        FinFailedError,
        ReqFailedError,
        TouchFailedError,
    )
}
for _code in ("E_MPUB_FAILED", "E_DPUB_FAILED"):
    _BY_CODE[_code] = PublishFailedError
for _code in ("E_AUTH_DISABLED", "E_AUTH_FIRST", "E_AUTH_FAILED", "E_UNAUTHORIZED", "E_AUTH_ERROR"):
    _BY_CODE[_code] = ServerAuthError


def _server_hint(code: str, text: str) -> str:
    """What to do about an error frame, where the frame's own text does not say it."""
    if code == "E_INVALID" and "TLS required" in text:
        return "this nsqd requires TLS; set tls_v1=True (and tls_ca_file for a private CA)"
    if code == "E_AUTH_FAILED":
        return (
            "nsqd could not confirm the secret: its auth server (--auth-http-address) may be "
            "unreachable from nsqd, or it refused auth_secret"
        )
    if code == "E_UNAUTHORIZED":
        return "the auth server grants this secret no permission for this topic/channel"
    if code == "E_BAD_BODY" and "output buffer timeout" in text:
        return (
            "this nsqd's --min/--max-output-buffer-timeout do not allow output_buffer_timeout "
            "(nsqclient's default is 25 ms); set a value within them, or 0 for nsqd's own default"
        )
    return ""


#: codes after which nsqd keeps the connection open: those of the non-fatal classes (the
#: :class:`ResponseFailedError` family), so the list has one source
NON_FATAL_CODES: frozenset[str] = frozenset(code for code, cls in _BY_CODE.items() if not cls.fatal)


def error_from_frame(text: str, *, address: str | None = None) -> ServerError:
    """Build the typed exception for an error frame's text (``"E_CODE description"``).

    Unknown codes become a plain :class:`ServerError` that is treated as fatal, which is what
    nsqd does for every code but the three response failures.
    """
    code = text.partition(" ")[0]
    return _BY_CODE.get(code, ServerError)(text, code=code, address=address)
