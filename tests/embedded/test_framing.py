"""The pure cutting rules of ``embedded/framing.py`` (nsqd's writes for compressed output); the
differential tests in test_tcp_differential.py check the records against real nsqd."""

from __future__ import annotations

import os
import struct

import pytest
import snappy

from nsqclient.protocol.frames import encode_message, encode_response
from nsqclient.testing.embedded.framing import bufio_writes, deflate_writes, flushes, snappy_writes

pytestmark = pytest.mark.timeout(10)


def message(size: int) -> bytes:
    return encode_message(0, 1, b"0123456789abcdef", b"x" * size)


def test_responses_are_flushed_one_by_one_and_messages_fill_the_buffer() -> None:
    ok = encode_response(b"OK")
    msgs = [message(100) for _ in range(3)]
    assert bufio_writes([ok, *msgs], 16384) == [ok, b"".join(msgs)]
    frames = [message(10_000), message(10_000)]
    writes = bufio_writes(frames, 16384)
    assert [len(w) for w in writes] == [16384, 2 * len(frames[0]) - 16384]
    assert b"".join(writes) == b"".join(frames)


def test_a_write_bigger_than_an_empty_buffer_passes_whole() -> None:
    # output_buffer_size -1 means a 1-byte buffer: each of the frame's three writes goes through
    frame = message(50)
    assert bufio_writes([frame], 1) == [frame[:4], frame[4:8], frame[8:]]


def test_snappy_uncompressed_chunks_are_header_then_body() -> None:
    compressor = snappy.StreamCompressor()
    raw = os.urandom(3000)
    first = snappy_writes(bytes(compressor.add_chunk(raw)))
    assert [len(w) for w in first] == [10 + 8, 3000]  # stream id + chunk header, then body
    assert first[1] == raw
    second = snappy_writes(bytes(compressor.add_chunk(b"a" * 3000)))
    assert len(second) == 1 and second[0][0] == 0x00  # a compressed chunk: one write


def test_deflate_sync_marker_apart() -> None:
    data = b"\x01\x02\x03" + struct.pack(">I", 0x0000FFFF)
    assert deflate_writes(data) == [data[:-4], data[-4:]]
    assert deflate_writes(b"\x00\x00\xff\xff") == [b"\x00\x00\xff\xff"]


def test_deflate_flushes_after_each_response_and_after_the_messages() -> None:
    ok, err = encode_response(b"OK"), encode_response(b"CLOSE_WAIT")
    msgs = [message(10), message(20)]
    assert flushes([ok, *msgs, err, msgs[0]]) == [ok, b"".join(msgs) + err, msgs[0]]
