"""The I/O-free core of the HTTP helpers: each API call as a :class:`Call`, and reading answers.

A ``Call`` is what the async and the sync clients both need: the request (method, path, query
parameters, raw body) and how to turn the answer into a result. Builders check every argument
first, so bad input raises the library's ``InvalidInputError`` family before any request.
The clients only move bytes; everything testable without a server lives here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from ..errors import ConfigError, InvalidArgumentError, MessageTooLargeError
from ..protocol import commands
from ..protocol.names import check_body, validate_channel, validate_topic
from ._errors import HTTPError, HTTPProtocolError
from ._models import LookupResult, Node, Producer

__all__ = [
    "ACCEPT",
    "Call",
    "LookupdCalls",
    "NsqdCalls",
    "decode_response",
]

T = TypeVar("T")

#: Asks pre-1.0 servers for the V1 format (1.x always answers V1 and ignores it).
ACCEPT = "application/vnd.nsq; version=1.0"
_V1 = "nsq; version=1.0"
_OPTION = re.compile(r"[a-z0-9_]+")

TopicAction = Literal["create", "delete", "empty", "pause", "unpause"]
LookupdAction = Literal["create", "delete"]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request, and how to read its answer into a ``T``.

    ``recover`` turns selected server errors into a result (``/lookup`` of an unknown topic is an
    empty result, not a failure); it re-raises everything else.
    """

    method: str
    path: str
    parse: Callable[[Any], T]
    params: tuple[tuple[str, str], ...] = ()
    content: bytes | None = None
    recover: Callable[[HTTPError], T] | None = None
    #: a publish: sent on the transport's own keep-alive connections (``_wire``), not httpx
    wire: bool = False

    def result(self, status_code: int, headers: Mapping[str, str], content: bytes, url: str) -> T:
        """Interpret a complete response: the parsed result, or a typed error."""
        try:
            body = decode_response(status_code, headers, content, url)
        except HTTPError as exc:
            if self.recover is None:
                raise
            return self.recover(exc)
        try:
            return self.parse(body)
        except (ValueError, TypeError, KeyError) as exc:
            raise HTTPProtocolError(
                f"unexpected response body ({exc})", url=url, status_code=status_code
            ) from exc


def decode_response(status_code: int, headers: Mapping[str, str], content: bytes, url: str) -> Any:
    """The payload of a response in either format, or :class:`HTTPError` for a failure.

    V1 (``X-NSQ-Content-Type: nsq; version=1.0``): the body is the payload; errors are
    ``{"message": CODE}`` with the HTTP status. Pre-1.0: ``{"status_code", "status_txt", "data"}``
    wraps the payload and the error code. Plain-text answers (``/ping``) pass through as ``str``;
    an empty body is ``{}``. ``headers``: ``httpx.Headers`` or any mapping with lowercase names.
    """
    ok = 200 <= status_code < 300
    v1 = headers.get("x-nsq-content-type", "").strip().lower() == _V1
    body: Any = None
    if content:
        if "json" in headers.get("content-type", "").lower() or (not v1 and content[:1] == b"{"):
            try:
                body = json.loads(content)
            except ValueError:
                if ok:
                    raise HTTPProtocolError(
                        "response is not valid JSON", url=url, status_code=status_code
                    ) from None
                body = content.decode("utf-8", "replace")
        else:
            body = content.decode("utf-8", "replace")
    if not v1 and isinstance(body, dict) and "status_code" in body and "data" in body:
        inner = body["status_code"]
        if inner != 200 or not ok:
            usable = isinstance(inner, int) and not isinstance(inner, bool) and inner != 200
            code = inner if usable else status_code
            raise HTTPError(_message(body.get("status_txt")), url=url, status_code=code)
        body = body["data"]
    elif not ok:
        if isinstance(body, dict):  # {"message": CODE, ...}; TLS_REQUIRED adds "https_port"
            detail = ", ".join(f"{k}={v}" for k, v in body.items() if k != "message")
            raise HTTPError(
                _message(body.get("message")), url=url, status_code=status_code, detail=detail
            )
        raise HTTPError(_message(body), url=url, status_code=status_code)
    return {} if body is None else body


def _message(value: object) -> str:
    return value.strip() if isinstance(value, str) and value.strip() else "UNKNOWN_ERROR"


# -- parsers -------------------------------------------------------------------------------------


def _ignore(body: Any) -> None:
    return None


def _expect_ok(body: Any) -> None:
    if body != "OK":
        raise ValueError(f"expected 'OK', got {body!r}")


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {body!r}")
    return body


def _any(body: Any) -> Any:
    return body


def _stats(body: Any) -> dict[str, Any]:
    # nsqd writes null for "none" and for "not requested" (include_clients=false); [] is easier.
    stats = _object(body)
    topics = stats["topics"] = stats.get("topics") or []
    for topic in topics:
        channels = topic["channels"] = topic.get("channels") or []
        for channel in channels:
            channel["clients"] = channel.get("clients") or []
    stats["producers"] = stats.get("producers") or []
    return stats


def _key_list(key: str) -> Callable[[Any], list[str]]:
    def parse(body: Any) -> list[str]:
        value = _object(body).get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"'{key}' must be a list of strings, got {value!r}")
        return value

    return parse


def _nodes(body: Any) -> list[Node]:
    producers = _object(body).get("producers") or []
    if not isinstance(producers, list):
        raise ValueError(f"'producers' must be a list, got {producers!r}")
    return [Node.from_json(p) for p in producers]


def _empty_if_unknown_topic(exc: HTTPError) -> LookupResult:
    # 1.x: 404 TOPIC_NOT_FOUND; pre-1.0: 500 with status_txt TOPIC_NOT_FOUND.
    if exc.message == "TOPIC_NOT_FOUND":
        return LookupResult()
    raise exc


# -- builders ------------------------------------------------------------------------------------


def _name(value: bytes) -> str:
    return value.decode("ascii")


def _flag(value: bool) -> str:
    return "true" if value else "false"


def ping_call() -> Call[None]:
    """``GET /ping``: plain ``OK``; nsqd answers 500 ``NOK - <error>`` when unhealthy."""
    return Call("GET", "/ping", _expect_ok)


def info_call() -> Call[dict[str, Any]]:
    return Call("GET", "/info", _object)


class NsqdCalls:
    """Builds nsqd's calls, checking input against the limits the caller says nsqd has."""

    def __init__(
        self,
        *,
        max_msg_size: int = commands.DEFAULT_MAX_MSG_SIZE,
        max_body_size: int = commands.DEFAULT_MAX_BODY_SIZE,
        max_defer_ms: int = commands.DEFAULT_MAX_REQ_TIMEOUT_MS,
    ) -> None:
        for name, value in (
            ("max_msg_size", max_msg_size),
            ("max_body_size", max_body_size),
            ("max_defer_ms", max_defer_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.max_defer_ms = max_defer_ms

    def stats(
        self,
        topic: str | None,
        channel: str | None,
        include_clients: bool,
        include_mem: bool,
    ) -> Call[dict[str, Any]]:
        params = [("format", "json")]
        if topic is not None:
            params.append(("topic", _name(validate_topic(topic))))
        if channel is not None:
            params.append(("channel", _name(validate_channel(channel))))
        params += [("include_clients", _flag(include_clients)), ("include_mem", _flag(include_mem))]
        return Call("GET", "/stats", _stats, tuple(params))

    def pub(self, topic: str, body: object, defer_ms: int | None) -> Call[None]:
        params = [("topic", _name(validate_topic(topic)))]
        if defer_ms is not None:
            if isinstance(defer_ms, bool) or not isinstance(defer_ms, int) or defer_ms < 0:
                raise InvalidArgumentError(
                    f"defer_ms must be a non-negative int of milliseconds, got {defer_ms!r}"
                )
            if defer_ms > self.max_defer_ms:
                raise InvalidArgumentError(
                    f"defer_ms={defer_ms} is above max_defer_ms={self.max_defer_ms} "
                    "(nsqd's --max-req-timeout)"
                )
            params.append(("defer", str(defer_ms)))
        data = bytes(check_body(body, self.max_msg_size))
        return Call("POST", "/pub", _ignore, tuple(params), data, wire=True)

    def publish_command(self, data: bytes) -> Call[None]:
        """The HTTP twin of an encoded PUB, DPUB or MPUB (``nsqclient.protocol.commands``).

        Every TCP publish command carries, after its line and a u32 size, exactly the body
        nsqd's ``/pub`` (``/mpub?binary=true``) takes, so a Writer can fall back to HTTP with the
        bytes it already encoded and checked: no second encoding, no second set of rules.
        """
        newline = data.find(b"\n")
        parts = data[:newline].split(b" ") if newline > 0 else []
        verb = parts[0] if parts else b""
        if (
            not (
                (verb in (b"PUB", b"MPUB") and len(parts) == 2)
                or (verb == b"DPUB" and len(parts) == 3 and parts[2].isdigit())
            )
            or len(data) < newline + 5
        ):
            raise InvalidArgumentError(
                f"not an encoded PUB, DPUB or MPUB command: {bytes(data[:40])!r}"
            )
        params = [("topic", _name(validate_topic(parts[1].decode("ascii", "replace"))))]
        if verb == b"MPUB":
            params.append(("binary", "true"))
        elif verb == b"DPUB":
            params.append(("defer", parts[2].decode("ascii")))
        content = bytes(data[newline + 5 :])
        path = "/mpub" if verb == b"MPUB" else "/pub"
        return Call("POST", path, _ignore, tuple(params), content, wire=True)

    def mpub(self, topic: str, bodies: Iterable[object], binary: bool) -> Call[None]:
        """Binary: ``[u32 count]([u32 size][bytes])*``; text: bodies joined by newlines."""
        bodies = commands.batch_bodies(bodies)  # a single body is refused, in either mode
        if binary:
            # The TCP MPUB frame holds exactly the HTTP body after its header and size field;
            # building it reuses every MPUB check (names, bodies, count, --max-body-size).
            topic_b = validate_topic(topic)
            frame = commands.mpub(
                topic, bodies, max_msg_size=self.max_msg_size, max_body_size=self.max_body_size
            )
            content = frame[len(b"MPUB \n") + len(topic_b) + 4 :]
            binary_params = (("topic", _name(topic_b)), ("binary", "true"))
            return Call("POST", "/mpub", _ignore, binary_params, content, wire=True)
        text_params = (("topic", _name(validate_topic(topic))),)
        return Call("POST", "/mpub", _ignore, text_params, self._text(bodies), wire=True)

    def _text(self, bodies: Iterable[object]) -> bytes:
        parts = []
        for body in bodies:
            data = check_body(body, self.max_msg_size)
            if b"\n" in (data if not isinstance(data, memoryview) else data.tobytes()):
                raise InvalidArgumentError(
                    "a body contains a newline, which text-mode /mpub would split into two "
                    "messages; use binary=True"
                )
            parts.append(data)
        if not parts:
            raise InvalidArgumentError("mpub needs at least one message")
        content = b"\n".join(parts)
        if len(content) > self.max_body_size:
            raise MessageTooLargeError(
                f"/mpub body is {len(content)} bytes, above max_body_size={self.max_body_size} "
                "(nsqd's --max-body-size); publish in smaller batches"
            )
        return content

    def topic(self, action: TopicAction, topic: str) -> Call[None]:
        return Call("POST", f"/topic/{action}", _ignore, (("topic", _name(validate_topic(topic))),))

    def channel(self, action: TopicAction, topic: str, channel: str) -> Call[None]:
        params = (
            ("topic", _name(validate_topic(topic))),
            ("channel", _name(validate_channel(channel))),
        )
        return Call("POST", f"/channel/{action}", _ignore, params)

    def config(self, option: str) -> Call[Any]:
        return Call("GET", f"/config/{_option(option)}", _any)

    def set_config(self, option: str, value: str | Sequence[str]) -> Call[Any]:
        if isinstance(value, str):
            content = value.encode("utf-8")
        elif isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
            content = json.dumps(list(value)).encode("utf-8")
        else:
            raise InvalidArgumentError(
                f"config value must be a str or a list of str, got {type(value).__name__}"
            )
        if not content:
            raise InvalidArgumentError("config value must not be empty")
        return Call("PUT", f"/config/{_option(option)}", _any, content=content)


def _option(option: object) -> str:
    if not isinstance(option, str) or _OPTION.fullmatch(option) is None:
        raise InvalidArgumentError(
            f"config option must be an nsqd option name such as 'max_msg_size', got {option!r}"
        )
    return option


class LookupdCalls:
    """Builds nsqlookupd's calls."""

    def lookup(self, topic: str) -> Call[LookupResult]:
        params = (("topic", _name(validate_topic(topic))),)
        return Call("GET", "/lookup", LookupResult.from_json, params, None, _empty_if_unknown_topic)

    def topics(self) -> Call[list[str]]:
        return Call("GET", "/topics", _key_list("topics"))

    def channels(self, topic: str) -> Call[list[str]]:
        return Call(
            "GET", "/channels", _key_list("channels"), (("topic", _name(validate_topic(topic))),)
        )

    def nodes(self) -> Call[list[Node]]:
        return Call("GET", "/nodes", _nodes)

    def topic(self, action: LookupdAction, topic: str) -> Call[None]:
        return Call("POST", f"/topic/{action}", _ignore, (("topic", _name(validate_topic(topic))),))

    def channel(self, action: LookupdAction, topic: str, channel: str) -> Call[None]:
        params = (
            ("topic", _name(validate_topic(topic))),
            ("channel", _name(validate_channel(channel))),
        )
        return Call("POST", f"/channel/{action}", _ignore, params)

    def tombstone(self, topic: str, node: str | Producer) -> Call[None]:
        if isinstance(node, Producer):
            node_id = node.node_id
        elif isinstance(node, str) and node.strip():
            node_id = node.strip()
            if node_id.startswith("["):  # lookupd keys are "host:port" without IPv6 brackets
                host, _, port = node_id[1:].partition("]")
                node_id = f"{host}{port}"
        else:
            raise InvalidArgumentError(
                f"node must be a Producer or 'broadcast_address:http_port', got {node!r}"
            )
        params = (("topic", _name(validate_topic(topic))), ("node", node_id))
        return Call("POST", "/topic/tombstone", _ignore, params)
