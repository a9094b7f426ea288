"""FrameDecoder on hostile input: garbage decodes as frames or raises ProtocolError, never anything
else, never hangs, and never buffers more than one bounded frame."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_support import split_at, streams, views

from nsqclient.errors import FrameTooLargeError, ProtocolError
from nsqclient.protocol import Event, FrameDecoder

LIMIT = 256  # a small max_frame_size so that garbage often announces "too large" frames


def feed_all(chunks: list[bytes], limit: int = LIMIT) -> tuple[list[Event], bool, int]:
    """Feed chunks; return (events, raised, buffered). Only ProtocolError may escape feed()."""
    decoder = FrameDecoder(max_frame_size=limit)
    events: list[Event] = []
    for chunk in chunks:
        try:
            events.extend(decoder.feed(chunk))
        except ProtocolError:
            return events, True, decoder.buffered
        # memory stays bounded: at most one partial frame, itself bounded by the limit
        assert decoder.buffered < 4 + limit
    return events, False, decoder.buffered


@given(st.binary(max_size=2000), st.lists(st.integers(0, 10_000), max_size=10))
@settings(max_examples=500, deadline=None)
def test_random_bytes_decode_or_raise_protocol_error(data: bytes, cuts: list[int]) -> None:
    feed_all(split_at(data, cuts))


@given(st.binary(max_size=600), st.lists(st.integers(0, 10_000), max_size=8))
@settings(max_examples=300, deadline=None)
def test_outcome_does_not_depend_on_chunking(data: bytes, cuts: list[int]) -> None:
    # Whether garbage is refused must not depend on how it was cut; if it is accepted, the
    # events and the leftover partial frame are the same too.
    whole_events, whole_raised, whole_buffered = feed_all([data])
    events, raised, buffered = feed_all(split_at(data, cuts))
    assert raised == whole_raised
    if not raised:
        assert views(events) == views(whole_events)
        assert buffered == whole_buffered


# Garbage that looks like frames: a plausible header followed by random payload.
_headers = st.builds(
    lambda size, kind: struct.pack(">ii", size, kind),
    st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(0, 300)),
    st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(0, 3)),
)


@given(
    st.lists(st.tuples(_headers, st.binary(max_size=300)), max_size=6),
    st.lists(st.integers(0, 10_000), max_size=8),
)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_frame_shaped_garbage(parts: list[tuple[bytes, bytes]], cuts: list[int]) -> None:
    data = b"".join(h + p for h, p in parts)
    feed_all(split_at(data, cuts))


@given(streams, st.binary(min_size=1, max_size=200))
@settings(max_examples=200, deadline=None)
def test_valid_frames_then_garbage(
    stream: list[tuple[bytes, tuple[object, ...]]], junk: bytes
) -> None:
    # Every frame before the garbage is delivered when the garbage comes in a later read.
    decoder = FrameDecoder(max_frame_size=1 << 16)
    raw = b"".join(f for f, _ in stream)
    assert views(decoder.feed(raw)) == [e for _, e in stream]
    try:
        decoder.feed(junk)
    except ProtocolError:
        pass
    assert decoder.buffered < 4 + (1 << 16)


@given(st.integers(LIMIT - 3, 2**31 - 1), st.integers(0, 2), st.integers(8, 64))
@settings(max_examples=200, deadline=None)
def test_announced_size_above_limit_raises_before_the_payload_arrives(
    size: int, kind: int, extra: int
) -> None:
    decoder = FrameDecoder(max_frame_size=LIMIT)
    header = struct.pack(">ii", size, kind)
    if size <= LIMIT:
        # within the bound: the decoder waits for the payload, holding only what it received
        assert decoder.feed(header + b"\x00" * extra) == []
        assert decoder.buffered == 8 + extra
        return
    with pytest.raises(FrameTooLargeError):
        decoder.feed(header + b"\x00" * extra)
    assert decoder.buffered <= 8 + extra


def test_a_gigabyte_announcement_buffers_nothing() -> None:
    decoder = FrameDecoder()
    junk = struct.pack(">ii", 1 << 30, 2) + b"\x00" * 4096
    with pytest.raises(FrameTooLargeError, match="raise max_msg_size"):
        decoder.feed(junk)
    assert decoder.buffered == 0


def test_endless_stream_of_small_frames_keeps_memory_flat() -> None:
    decoder = FrameDecoder(max_frame_size=LIMIT)
    heartbeat = struct.pack(">ii", 15, 0) + b"_heartbeat_"
    piece = heartbeat * 100 + heartbeat[:5]
    carry = heartbeat[5:]
    total = 0
    for _ in range(200):
        total += len(decoder.feed(piece))
        assert decoder.buffered == 5
        total += len(decoder.feed(carry + heartbeat[:0]))
        assert decoder.buffered == 0
    assert total == 200 * 101
