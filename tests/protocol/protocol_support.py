"""Shared helpers for the protocol unit tests: comparable views of events, hypothesis strategies."""

from __future__ import annotations

import itertools
import struct
from typing import Any

from hypothesis import strategies as st

from nsqclient.message import Message
from nsqclient.protocol import (
    CloseWait,
    ErrorFrame,
    Event,
    FrameDecoder,
    Heartbeat,
    Response,
    encode_error,
    encode_message,
    encode_response,
)


def view(event: Event | None) -> tuple[Any, ...] | None:
    """A plain tuple describing an event, so lists of events compare with ``==``."""
    if event is None:
        return None
    if isinstance(event, Message):
        return ("message", event.timestamp, event.attempts, event.id, event.body)
    if isinstance(event, Heartbeat):
        return ("heartbeat",)
    if isinstance(event, CloseWait):
        return ("close_wait",)
    if isinstance(event, Response):
        return ("response", event.data)
    if isinstance(event, ErrorFrame):
        return ("error", event.text)
    raise AssertionError(f"unknown event {event!r}")


def views(events: list[Event]) -> list[tuple[Any, ...] | None]:
    return [view(e) for e in events]


def decode_all(chunks: list[bytes], **kwargs: Any) -> list[tuple[Any, ...] | None]:
    decoder = FrameDecoder(**kwargs)
    out: list[Event] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    assert decoder.buffered == 0
    return views(out)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """Cut ``data`` at the given offsets (taken modulo len+1, any order); pieces may be empty."""
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def frame_header(size: int, kind: int) -> bytes:
    return struct.pack(">ii", size, kind)


# -- hypothesis strategies: (encoded frame, expected view) --

_ids = st.binary(min_size=16, max_size=16)
_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=0, max_size=40
)


def _message(ts: int, attempts: int, msg_id: bytes, body: bytes) -> tuple[bytes, tuple[Any, ...]]:
    return encode_message(ts, attempts, msg_id, body), ("message", ts, attempts, msg_id, body)


def _response(data: bytes) -> tuple[bytes, tuple[Any, ...]]:
    expected: tuple[Any, ...]
    if data == b"_heartbeat_":
        expected = ("heartbeat",)
    elif data == b"CLOSE_WAIT":
        expected = ("close_wait",)
    else:
        expected = ("response", data)
    return encode_response(data), expected


def _error(text: str) -> tuple[bytes, tuple[Any, ...]]:
    return encode_error(text), ("error", text)


messages = st.builds(
    _message,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=0, max_value=65535),
    _ids,
    st.binary(max_size=300),
)
responses = st.builds(
    _response,
    st.one_of(
        st.sampled_from([b"OK", b"_heartbeat_", b"CLOSE_WAIT", b'{"a":1}', b""]),
        st.binary(max_size=60),
    ),
)
errors = st.builds(
    _error,
    st.builds(
        lambda c, t: f"E_{c} {t}",
        st.sampled_from(
            ["INVALID", "BAD_BODY", "FIN_FAILED", "REQ_FAILED", "TOUCH_FAILED", "AUTH_FAILED"]
        ),
        _text,
    ),
)
frames = st.one_of(messages, responses, errors)
streams = st.lists(frames, min_size=1, max_size=12)
