"""Snappy (framing format) and raw-deflate codecs: round trips in both directions over arbitrary
read boundaries, the wire details nsqd relies on, and corrupt input."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_support import split_at

from nsqclient.errors import ProtocolError
from nsqclient.protocol import Codec, DeflateCodec, FrameDecoder, SnappyCodec, encode_message

SNAPPY_STREAM_ID = bytes.fromhex("ff060000734e61507059")


def pair(kind: str, level: int) -> tuple[Codec, Codec]:
    if kind == "snappy":
        return SnappyCodec(), SnappyCodec()
    return DeflateCodec(level), DeflateCodec(level)


writes = st.lists(
    st.one_of(
        st.binary(min_size=1, max_size=300),
        st.builds(lambda n, b: b * n, st.integers(1, 3000), st.binary(min_size=1, max_size=4)),
    ),
    min_size=1,
    max_size=15,
)


@given(
    st.sampled_from(["snappy", "deflate"]),
    st.integers(1, 9),
    writes,
    writes,
    st.lists(st.integers(0, 100_000), max_size=12),
)
@settings(max_examples=300, deadline=None)
def test_round_trip_both_directions_over_any_reads(
    kind: str, level: int, to_server: list[bytes], to_client: list[bytes], cuts: list[int]
) -> None:
    client, server = pair(kind, level)
    # each side compresses its writes one call at a time, as a connection does per command/flush
    up = b"".join(client.compress(w) for w in to_server)
    down = b"".join(server.compress(w) for w in to_client)
    assert b"".join(server.decompress(c) for c in split_at(up, cuts)) == b"".join(to_server)
    assert b"".join(client.decompress(c) for c in split_at(down, cuts)) == b"".join(to_client)


@given(st.sampled_from(["snappy", "deflate"]), writes)
@settings(max_examples=100, deadline=None)
def test_each_write_is_decodable_on_arrival(kind: str, chunks: list[bytes]) -> None:
    # nsqd flushes after each batch and reads commands as they come: nothing may stay buffered
    # in the compressor waiting for more input.
    client, server = pair(kind, 6)
    for chunk in chunks:
        assert server.decompress(client.compress(chunk)) == chunk


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
def test_one_byte_reads_of_a_large_message_stream(kind: str) -> None:
    server, client = pair(kind, 6)
    frames = b"".join(
        encode_message(i, 1, b"%016d" % i, os.urandom(100) + b"a" * 5000) for i in range(20)
    )
    big = encode_message(99, 1, b"9" * 16, os.urandom(1 << 20))  # a 1 MiB incompressible body
    wire = server.compress(frames) + server.compress(big)
    decoder = FrameDecoder()
    events = []
    step = 1
    pos = 0
    while pos < len(wire):
        events += decoder.feed(client.decompress(wire[pos : pos + step]))
        pos += step
        step = step * 2 + 1 if step < 70_000 else 1  # 1, 3, 7, ... byte reads, then again
    assert len(events) == 21
    assert events[-1].body == big[34:]  # type: ignore[union-attr]


def test_snappy_is_the_framing_format() -> None:
    codec = SnappyCodec()
    first = codec.compress(b"hello hello hello hello")
    assert first.startswith(SNAPPY_STREAM_ID)
    second = codec.compress(b"again")
    assert second[0] in (0x00, 0x01)  # compressed or uncompressed data chunk
    length = int.from_bytes(second[1:4], "little")
    assert len(second) == 4 + length  # one whole chunk per write
    # a write larger than 64 KiB becomes several chunks of at most 64 KiB uncompressed data
    big = os.urandom(200_000)
    assert SnappyCodec().decompress(SnappyCodec().compress(big)) == big
    assert codec.compress(b"") == b""


def test_deflate_is_raw_and_sync_flushed() -> None:
    codec = DeflateCodec(6)
    out = codec.compress(b"NOP\n")
    assert out.endswith(b"\x00\x00\xff\xff")  # the empty stored block of a sync flush
    # raw deflate: no zlib header, so plain zlib.decompress refuses it and a raw inflater reads it
    with pytest.raises(zlib.error):
        zlib.decompress(out)
    assert zlib.decompressobj(-zlib.MAX_WBITS).decompress(out) == b"NOP\n"


@pytest.mark.parametrize("level", [1, 9])
def test_deflate_levels_interoperate_with_a_plain_raw_inflater(level: int) -> None:
    data = b"MPUB t\n" + b"x" * 10_000
    compressed = DeflateCodec(level).compress(data)
    assert zlib.decompressobj(-zlib.MAX_WBITS).decompress(compressed) == data
    assert DeflateCodec(level).level == level


@pytest.mark.parametrize("level", [0, 10, -1])
def test_deflate_level_out_of_range(level: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.9"):
        DeflateCodec(level)


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("snappy", SNAPPY_STREAM_ID + b"\x00\x08\x00\x00abcdefgh"),  # bad snappy block
        ("snappy", SNAPPY_STREAM_ID + b"\x01\x05\x00\x00\x00\x00\x00\x00a"),  # bad checksum
        ("snappy", b"\x02\x01\x00\x00a"),  # reserved unskippable chunk type
        ("snappy", SNAPPY_STREAM_ID + b"\x7f\x01\x00\x00a"),
        ("deflate", b"\xff\xff\xff\xff"),  # reserved block type 3
        ("deflate", b"\x00\x05\x00\x00\x00hello"),  # stored block with LEN != ~NLEN
    ],
)
def test_corrupt_input_is_a_protocol_error(kind: str, data: bytes) -> None:
    codec = SnappyCodec() if kind == "snappy" else DeflateCodec()
    with pytest.raises(ProtocolError, match=f"corrupt {kind} stream"):
        codec.decompress(data)


@given(st.sampled_from(["snappy", "deflate"]), st.binary(max_size=500), st.booleans())
@settings(max_examples=400, deadline=None)
def test_garbage_decompresses_or_raises_protocol_error(
    kind: str, junk: bytes, prefix: bool
) -> None:
    codec = SnappyCodec() if kind == "snappy" else DeflateCodec()
    data = (SNAPPY_STREAM_ID if prefix and kind == "snappy" else b"") + junk
    try:
        codec.decompress(data)
    except ProtocolError:
        pass


@given(st.sampled_from(["snappy", "deflate"]), writes, st.integers(0, 10_000), st.integers(0, 255))
@settings(max_examples=200, deadline=None)
def test_flipped_byte_never_raises_anything_but_protocol_error(
    kind: str, chunks: list[bytes], where: int, xor: int
) -> None:
    sender, receiver = pair(kind, 6)
    wire = bytearray(b"".join(sender.compress(c) for c in chunks))
    wire[where % len(wire)] ^= xor or 1
    try:
        receiver.decompress(bytes(wire))
    except ProtocolError:
        pass


def test_codec_names() -> None:
    assert SnappyCodec().name == "snappy"
    assert DeflateCodec().name == "deflate"


@given(writes, st.integers(0, 10_000), st.integers(1, 3), st.lists(st.integers(0, 100_000)))
@settings(max_examples=200, deadline=None)
def test_a_snappy_stream_that_lost_bytes_never_waits_for_more_than_one_chunk(
    chunks: list[bytes], where: int, lost: int, cuts: list[int]
) -> None:
    """Bytes lost in transit (at any point, read in any pieces) either fail with a
    ProtocolError or leave the decoder waiting for at most the largest chunk an encoder
    writes: python-snappy alone would wait for whatever size a damaged header announced (up to
    16 MiB), so the connection would look silent instead of damaged."""
    sender, receiver = pair("snappy", 6)
    wire = b"".join(sender.compress(c) for c in chunks)
    at = where % len(wire)
    damaged = wire[:at] + wire[at + lost :]
    try:
        for piece in split_at(damaged, cuts):
            receiver.decompress(piece)
    except ProtocolError:
        return
    assert receiver._left <= 4 + 32 + 65536 + 65536 // 6  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "header",
    [b"\x0e\x00\x00", b"\x00\xff\xff\xff", b"\x01\x00\x00\x02"],
    ids=["reserved-type", "oversize-compressed", "oversize-uncompressed"],
)
def test_a_damaged_snappy_chunk_header_is_refused_at_once(header: bytes) -> None:
    codec = SnappyCodec()
    assert codec.decompress(SnappyCodec().compress(b"OK")) == b"OK"
    with pytest.raises(ProtocolError, match="corrupt snappy stream"):
        for byte in header + b"\x00":  # one byte at a time: refused once the header is whole
            codec.decompress(bytes([byte]))


def test_python_snappy_loads_only_with_a_snappy_codec() -> None:
    """Importing the client (both APIs, the test kit, the embedded server) and deflating load
    neither python-snappy nor cramjam: on free-threaded CPython importing cramjam turns the GIL
    on for the whole process, so only a snappy connection may pay that."""
    code = (
        "import sys\n"
        "import nsqclient, nsqclient.aio, nsqclient.sync, nsqclient.testing.embedded\n"
        "from nsqclient.protocol import DeflateCodec, SnappyCodec\n"
        "DeflateCodec(6).compress(b'x')\n"
        "print(sorted({'snappy', 'cramjam'} & set(sys.modules)))\n"
        "SnappyCodec()\n"
        "print(sorted({'snappy', 'cramjam'} & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == ["[]", "['cramjam', 'snappy']"], done.stderr
