"""Server side of IDENTIFY: decoding like Go's ``json.Unmarshal``, nsqd's validation, the reply.

Field checks run in ``clientV2.Identify``'s order (heartbeat, output buffer timeout, output buffer
size, sample rate, msg timeout) with its exact texts. With ``feature_negotiation`` the JSON reply is
followed by the TLS, snappy and deflate upgrades, each acknowledged by one more ``OK``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Final

from ...protocol.compression import SnappyCodec
from ...protocol.frames import encode_response
from .wire import ClientError, int32_at

if TYPE_CHECKING:
    from .bodies import Need, Result
    from .client import ClientState

__all__ = ["decode_identify", "handle_identify_body"]

_STR: Final = ("client_id", "hostname", "user_agent")
_BOOL: Final = ("feature_negotiation", "tls_v1", "deflate", "snappy")
_INT: Final = {
    "heartbeat_interval": 63,
    "output_buffer_size": 63,
    "output_buffer_timeout": 63,
    "deflate_level": 63,
    "msg_timeout": 63,
    "sample_rate": 31,
}
_FIELDS: Final = {name.lower(): name for name in (*_STR, *_BOOL, *_INT)}


# identifyDataV2's fields in declaration order, as Go's %+v prints them
_GO_NAMES: Final = (
    ("client_id", "ClientID", ""),
    ("hostname", "Hostname", ""),
    ("heartbeat_interval", "HeartbeatInterval", 0),
    ("output_buffer_size", "OutputBufferSize", 0),
    ("output_buffer_timeout", "OutputBufferTimeout", 0),
    ("feature_negotiation", "FeatureNegotiation", False),
    ("tls_v1", "TLSv1", False),
    ("deflate", "Deflate", False),
    ("deflate_level", "DeflateLevel", 0),
    ("snappy", "Snappy", False),
    ("sample_rate", "SampleRate", 0),
    ("user_agent", "UserAgent", ""),
    ("msg_timeout", "MsgTimeout", 0),
)


def go_struct(data: dict[str, Any]) -> str:
    """The decoded IDENTIFY as nsqd logs it (``%+v``): ``{ClientID:x Hostname:h ...}``."""
    parts = []
    for key, name, default in _GO_NAMES:
        value = data.get(key, default)
        parts.append(f"{name}:{str(value).lower() if isinstance(value, bool) else value}")
    return "{" + " ".join(parts) + "}"


class _Float(str):
    """A JSON number literal with a fraction or exponent (Go refuses it for an int field)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def decode_identify(body: bytes) -> dict[str, Any]:
    """The fields nsqd reads, typed as Go would decode them; ValueError where Go fails."""
    doc = json.loads(
        body.decode("utf-8", "replace"), parse_float=_Float, parse_constant=_no_constant
    )
    out: dict[str, Any] = {}
    if doc is None:
        return out
    if not isinstance(doc, dict):
        raise ValueError("IDENTIFY body is not a JSON object")
    bad = False
    for key, value in doc.items():
        field = _FIELDS.get(key.lower())  # Go matches keys case-insensitively
        if field is None or value is None:
            continue
        if field in _STR:
            ok = isinstance(value, str) and not isinstance(value, _Float)
        elif field in _BOOL:
            ok = isinstance(value, bool)
        else:
            bits = _INT[field]
            ok = (
                isinstance(value, int)
                and not isinstance(value, bool)
                and -(1 << bits) <= value < (1 << bits)
            )
        if ok:
            out[field] = value
        else:
            bad = True  # Go keeps decoding, then reports the type error
    if bad:
        raise ValueError("IDENTIFY field of the wrong JSON type")
    return out


def handle_identify_body(conn: ClientState) -> Generator[Need, bytes, Result]:
    opts = conn.nsqd.options
    size = int32_at((yield (4, "E_BAD_BODY", b"IDENTIFY failed to read body size")))
    if size > opts.max_body_size:
        raise ClientError("E_BAD_BODY", f"IDENTIFY body too big {size} > {opts.max_body_size}")
    if size <= 0:
        raise ClientError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
    body = yield (size, "E_BAD_BODY", b"IDENTIFY failed to read body")
    try:
        data = decode_identify(body)
    except ValueError:
        raise ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
    conn.nsqd.log("INFO", f"[{conn.remote_address}] IDENTIFY: {go_struct(data)}")
    _apply(conn, data)
    if not data.get("feature_negotiation"):
        return b"OK"
    nsqd = conn.nsqd
    tls = nsqd.tls_context is not None and bool(data.get("tls_v1"))
    deflate = opts.deflate and bool(data.get("deflate"))
    level = 6
    requested = data.get("deflate_level", 0)
    if deflate and requested > 0:
        level = requested
    level = min(level, opts.max_deflate_level)
    snappy = opts.snappy and bool(data.get("snappy"))
    if deflate and snappy:
        raise ClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
    reply = json.dumps(
        {
            "max_rdy_count": opts.max_rdy_count,
            "version": nsqd.version,
            "max_msg_timeout": opts.max_msg_timeout,
            "msg_timeout": round(conn.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": conn.sample_rate,
            "auth_required": nsqd.auth_enabled,
            "output_buffer_size": conn.output_buffer_size,
            "output_buffer_timeout": conn.output_buffer_timeout,
        },
        separators=(",", ":"),
    ).encode()
    if snappy:
        _load_snappy()  # now, not between the upgrades' OKs, and not for clients without snappy
    conn.write_now(encode_response(reply))
    if tls or snappy or deflate:
        return conn.upgrade(tls=tls, snappy=snappy, deflate_level=level if deflate else 0)
    return None


def _apply(conn: ClientState, data: dict[str, Any]) -> None:
    """``clientV2.Identify``: set each attribute, failing on the first invalid value."""
    opts = conn.nsqd.options
    conn.client_id = data.get("client_id", "")
    conn.hostname = data.get("hostname", "")
    conn.user_agent = data.get("user_agent", "")

    hb = data.get("heartbeat_interval", 0)
    if hb == -1:
        conn.heartbeat_interval = 0.0
    elif hb == 0:
        pass
    elif 1000 <= hb <= opts.max_heartbeat_interval:
        conn.heartbeat_interval = hb / 1000
    else:
        raise _bad(f"heartbeat interval ({hb}) is invalid")

    timeout = data.get("output_buffer_timeout", 0)
    if timeout == -1:
        conn.output_buffer_timeout = 0
    elif timeout == 0:
        pass
    elif opts.min_output_buffer_timeout <= timeout <= opts.max_output_buffer_timeout:
        conn.output_buffer_timeout = timeout
    else:
        raise _bad(f"output buffer timeout ({timeout}) is invalid")
    size = data.get("output_buffer_size", 0)
    if size == -1:
        conn.output_buffer_size = 1
        conn.output_buffer_timeout = 0
    elif size == 0:
        pass
    elif 64 <= size <= opts.max_output_buffer_size:
        conn.output_buffer_size = size
    else:
        raise _bad(f"output buffer size ({size}) is invalid")

    rate = data.get("sample_rate", 0)
    if not 0 <= rate <= 99:
        raise _bad(f"sample rate ({rate}) is invalid")
    conn.sample_rate = rate

    msg_timeout = data.get("msg_timeout", 0)
    if msg_timeout == 0:
        pass
    elif 1000 <= msg_timeout <= opts.max_msg_timeout:
        conn.msg_timeout = msg_timeout / 1000
    else:
        raise _bad(f"msg timeout ({msg_timeout}) is invalid")
    conn.identified()


def _bad(text: str) -> ClientError:
    return ClientError("E_BAD_BODY", "IDENTIFY " + text)


@functools.cache
def _load_snappy() -> None:
    """Import python-snappy when a client's IDENTIFY agrees to snappy, before the reply goes out.

    Not at start-up: on free-threaded CPython importing its backend (cramjam) turns the GIL on for
    the whole process, and most tests that start this server never ask for snappy. Not at the
    upgrade either: that import (2-7 ms the first time) then fell between the TLS upgrade's ``OK``
    and the snappy stream's first bytes, which nsqd writes back to back (0.1 ms), and a client that
    hands its snappy layer only what it has already read (pynsq) broke.
    """
    SnappyCodec().compress(b"")
