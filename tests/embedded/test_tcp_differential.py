"""Differential: byte scripts sent to real nsqd and to the embedded one must get equal answers.

Each script runs on a fresh connection; the transcript lists every frame (error texts verbatim,
message IDs masked) until the server closes the connection or answers a final sync PUB. This
covers the state machine (§3), fatal vs non-fatal errors (§5) and the exact texts of §4/§5.3.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import ssl
import struct
import urllib.request
import zlib
from collections.abc import Iterator

import pytest
import snappy

from nsqclient.protocol import ErrorFrame, Heartbeat
from nsqclient.testing.certs import CertBundle
from nsqclient.testing.daemons import NsqdProcess
from nsqclient.testing.embedded import ThreadedEmbeddedNsqd
from tests.rawconn_support import RawClient, host_port, identify_body, mpub_body, sized

from .conftest import start_embedded, start_real
from .support import transcript

pytestmark = pytest.mark.timeout(60)

OPTIONS = {
    "max_rdy_count": 50,
    "max_msg_size": 100,
    "max_body_size": 400,
    "max_req_timeout": 10_000,
}
HB = identify_body(heartbeat_interval=1000)
SUB = b"SUB t_sub c\n"


def u32(n: int) -> bytes:
    return struct.pack(">I", n & 0xFFFFFFFF)


SCRIPTS: dict[str, tuple[bytes, ...]] = {
    # commands and lines
    "unknown command": (b"ASDF\n",),
    "lowercase command": (b"nop\n",),
    "empty line": (b"\n",),
    "crlf line": (b"NOP\r\n",),
    "nop with params": (b"NOP a b c\n",),
    "line of 16383 bytes": (b"NOP " + b"x" * 16378 + b"\n",),
    "line of 16384 bytes": (b"NOP " + b"x" * 16379 + b"\n",),
    "line of 16385 bytes": (b"NOP " + b"x" * 16380 + b"\n",),
    "long line without newline": (b"N" * 20000,),
    # IDENTIFY
    "identify ok": (identify_body(client_id="a"),),
    "identify twice": (identify_body(), identify_body()),
    "identify size 0": (b"IDENTIFY\n" + u32(0),),
    "identify negative size": (b"IDENTIFY\n" + u32(-1),),
    "identify too big": (b"IDENTIFY\n" + u32(6_000_000),),
    "identify bad json": (sized(b"IDENTIFY\n", b"{nope"),),
    "identify json array": (sized(b"IDENTIFY\n", b"[1]"),),
    "identify json null": (sized(b"IDENTIFY\n", b"null"),),
    "identify wrong type": (sized(b"IDENTIFY\n", b'{"heartbeat_interval": "x"}'),),
    "identify float int": (sized(b"IDENTIFY\n", b'{"msg_timeout": 1500.5}'),),
    "identify case-insensitive key": (sized(b"IDENTIFY\n", b'{"Heartbeat_Interval": 5}'),),
    "identify unknown keys": (identify_body(short_id="x", long_id="y", whatever=[1]),),
    "heartbeat too small": (identify_body(heartbeat_interval=999),),
    "heartbeat too big": (identify_body(heartbeat_interval=60_001),),
    "heartbeat -2": (identify_body(heartbeat_interval=-2),),
    "output buffer timeout too small": (identify_body(output_buffer_timeout=24),),
    "output buffer timeout too big": (identify_body(output_buffer_timeout=30_001),),
    "output buffer size too small": (identify_body(output_buffer_size=63),),
    "output buffer size too big": (identify_body(output_buffer_size=65_537),),
    "sample rate 100": (identify_body(sample_rate=100),),
    "sample rate -1": (identify_body(sample_rate=-1),),
    "msg timeout too small": (identify_body(msg_timeout=999),),
    "msg timeout too big": (identify_body(msg_timeout=900_001),),
    "first bad field wins": (identify_body(msg_timeout=1, heartbeat_interval=1),),
    "negotiation defaults": (identify_body(feature_negotiation=True),),
    "negotiation values": (
        identify_body(
            feature_negotiation=True,
            heartbeat_interval=2000,
            msg_timeout=5000,
            output_buffer_size=-1,
            sample_rate=10,
            deflate_level=9,
            tls_v1=True,
        ),
    ),
    "negotiation buffer timeout off": (
        identify_body(feature_negotiation=True, output_buffer_timeout=-1, output_buffer_size=100),
    ),
    "both compressions": (identify_body(feature_negotiation=True, snappy=True, deflate=True),),
    "identify after sub": (HB, SUB, identify_body()),
    # SUB
    "sub ok": (HB, SUB),
    "sub with default heartbeats": (SUB,),
    "sub heartbeats disabled": (identify_body(heartbeat_interval=-1), SUB),
    "sub one param": (HB, b"SUB t\n"),
    "sub bad topic": (HB, b"SUB bad! c\n"),
    "sub topic with quote and bytes": (HB, b'SUB a"b\\\xff\x01 c\n'),
    "sub bad channel": (HB, b"SUB t c!\n"),
    "sub double space": (HB, b"SUB t  c\n"),
    "sub topic too long": (HB, b"SUB " + b"t" * 65 + b" c\n"),
    "sub ephemeral ok": (HB, b"SUB t_eph#ephemeral c#ephemeral\n"),
    "sub twice": (HB, SUB, SUB),
    # RDY
    "rdy before sub": (b"RDY 1\n",),
    "rdy no param": (HB, SUB, b"RDY\n"),
    "rdy not a number": (HB, SUB, b"RDY x\n"),
    "rdy negative": (HB, SUB, b"RDY -1\n"),
    "rdy empty string": (HB, SUB, b"RDY \n"),
    "rdy max": (HB, SUB, b"RDY 50\n"),
    "rdy over max": (HB, SUB, b"RDY 51\n"),
    "rdy wraps uint64": (HB, SUB, b"RDY 18446744073709551617\n"),
    "rdy int64 negative": (HB, SUB, b"RDY 9223372036854775808\n"),
    "rdy after cls": (HB, SUB, b"CLS\n", b"RDY 99\n"),
    # FIN / REQ / TOUCH
    "fin before sub": (b"FIN 0123456789abcdef\n",),
    "fin no id": (HB, SUB, b"FIN\n"),
    "fin short id": (HB, SUB, b"FIN 0123\n"),
    "fin unknown id": (HB, SUB, b"FIN 0123456789abcdef\n"),
    "fin unknown id after cls": (HB, SUB, b"CLS\n", b"FIN 0123456789abcdef\n"),
    "req no timeout": (HB, SUB, b"REQ 0123456789abcdef\n"),
    "req bad timeout": (HB, SUB, b"REQ 0123456789abcdef x\n"),
    "req unknown id": (HB, SUB, b"REQ 0123456789abcdef 10\n"),
    "req before sub": (b"REQ 0123456789abcdef 0\n",),
    "touch unknown id": (HB, SUB, b"TOUCH 0123456789abcdef\n"),
    "touch no id": (HB, SUB, b"TOUCH\n"),
    "touch before sub": (b"TOUCH 0123456789abcdef\n",),
    # CLS
    "cls before sub": (b"CLS\n",),
    "cls twice": (HB, SUB, b"CLS\n", b"CLS\n"),
    "cls ok": (HB, SUB, b"CLS\n"),
    # PUB
    "pub ok": (sized(b"PUB t_pub\n", b"hello"),),
    "pub no topic": (sized(b"PUB\n", b"x"),),
    "pub empty topic": (sized(b"PUB \n", b"x"),),
    "pub bad topic": (sized(b"PUB t*\n", b"x"),),
    "pub empty body": (b"PUB t_pub\n" + u32(0),),
    "pub negative size": (b"PUB t_pub\n" + u32(-5),),
    "pub max size": (sized(b"PUB t_pub\n", b"x" * 100),),
    "pub too big": (sized(b"PUB t_pub\n", b"x" * 101),),
    "pub after sub": (HB, SUB, sized(b"PUB t_pub\n", b"x")),
    "pub extra params": (sized(b"PUB t_pub extra\n", b"x"),),
    # MPUB
    "mpub ok": (b"MPUB t_mpub\n" + mpub_body(b"a", b"bb", b"ccc"),),
    "mpub no topic": (b"MPUB\n" + mpub_body(b"a"),),
    "mpub bad topic": (b"MPUB t!\n" + mpub_body(b"a"),),
    "mpub body size 0": (b"MPUB t_mpub\n" + u32(0),),
    "mpub body too big": (b"MPUB t_mpub\n" + u32(401),),
    "mpub count 0": (b"MPUB t_mpub\n" + u32(8) + u32(0) + u32(0),),
    "mpub count too big": (b"MPUB t_mpub\n" + u32(300) + u32(80),),
    # the largest count a 400-byte body can hold is accepted; the first item is then too big
    "mpub count max": (b"MPUB t_mpub\n" + u32(400) + u32(79) + u32(101),),
    "mpub empty item": (b"MPUB t_mpub\n" + u32(30) + u32(3) + u32(1) + b"a" + u32(0),),
    "mpub item too big": (b"MPUB t_mpub\n" + u32(300) + u32(1) + u32(101) + b"x" * 101,),
    "mpub negative item": (b"MPUB t_mpub\n" + u32(300) + u32(2) + u32(1) + b"a" + u32(-1),),
    # DPUB
    "dpub ok": (sized(b"DPUB t_dpub 100\n", b"x"),),
    "dpub zero": (sized(b"DPUB t_dpub 0\n", b"x"),),
    "dpub max": (sized(b"DPUB t_dpub 10000\n", b"x"),),
    "dpub over max": (sized(b"DPUB t_dpub 10001\n", b"x"),),
    "dpub bad timeout": (sized(b"DPUB t_dpub -1\n", b"x"),),
    "dpub huge": (sized(b"DPUB t_dpub 18446744073709551615\n", b"x"),),
    "dpub no timeout": (sized(b"DPUB t_dpub\n", b"x"),),
    "dpub bad topic": (sized(b"DPUB t% 5\n", b"x"),),
    "dpub empty body": (b"DPUB t_dpub 5\n" + u32(0),),
    "dpub too big": (sized(b"DPUB t_dpub 5\n", b"x" * 101),),
    # AUTH without an auth server
    "auth disabled": (sized(b"AUTH\n", b"secret"),),
    "auth with params": (sized(b"AUTH x\n", b"secret"),),
    "auth empty": (b"AUTH\n" + u32(0),),
    "auth too big": (b"AUTH\n" + u32(401),),
    "auth after sub": (HB, SUB, sized(b"AUTH\n", b"s")),
    "nop before identify": (b"NOP\n", identify_body()),
}


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[NsqdProcess, ThreadedEmbeddedNsqd]]:
    real = start_real(**OPTIONS)
    embedded = start_embedded(**OPTIONS)
    yield real, embedded
    real.stop()
    embedded.stop()


@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_same_answers(name: str, pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd]) -> None:
    real, embedded = pair
    script = SCRIPTS[name]
    expected = await transcript(real.tcp_address, *script)
    got = await transcript(embedded.tcp_address, *script)
    assert got == expected


async def test_bad_magic_gets_bare_error_then_close(
    pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd],
) -> None:
    results = []
    for server in pair:
        client = await RawClient.connect(server.tcp_address, magic=False)
        client.send(b"  V1")
        results.append([e for e in await client.expect_closed()])
        await client.close()
    assert results[0] == results[1]
    assert [type(e).__name__ for e in results[0]] == ["ErrorFrame"]
    assert results[0][0] == ErrorFrame("E_BAD_PROTOCOL")


PARTIAL: dict[str, bytes] = {
    "line": b"PUB t",
    "pub size": b"PUB t\n\x00\x00",
    "pub body": b"PUB t\n\x00\x00\x00\x05ab",
    "dpub body": b"DPUB t 5\n\x00\x00\x00\x05ab",
    "identify body": b"IDENTIFY\n\x00\x00\x00\x09{}",
    "auth size": b"AUTH\n\x00",
    "mpub count": b"MPUB t\n\x00\x00\x00\x10\x00\x00",
    "mpub item size": b"MPUB t\n\x00\x00\x00\x10\x00\x00\x00\x02\x00\x00\x00\x01a\x00",
    "mpub item body": b"MPUB t\n\x00\x00\x00\x10\x00\x00\x00\x02\x00\x00\x00\x03a",
}


async def _partial(address: str, data: bytes, *, eof: bool) -> list[object]:
    client = await RawClient.connect(address)
    if not eof:
        client.send(identify_body(heartbeat_interval=1000))
        client.answer_heartbeats = False
    client.send(data)
    if eof:
        client.writer.write_eof()
    events = await client.expect_closed(timeout=10)
    await client.close()
    return [e for e in events if not isinstance(e, Heartbeat)]


@pytest.mark.parametrize("eof", [True, False], ids=["eof", "read-timeout"])
@pytest.mark.parametrize("name", list(PARTIAL))
async def test_command_cut_short(
    pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd], name: str, eof: bool
) -> None:
    """EOF or the read deadline in the middle of a body: nsqd's "failed to read" error, then
    close; in the middle of a line: just close. Both servers at once: the read deadline is two
    heartbeats (2 s) on each, waited for side by side rather than one after the other."""
    real, embedded = pair
    expected, got = await asyncio.gather(
        _partial(real.tcp_address, PARTIAL[name], eof=eof),
        _partial(embedded.tcp_address, PARTIAL[name], eof=eof),
    )
    assert got == expected


# -- how compressed output is cut into TLS records (nsqd's writes, see embedded/framing.py) --


def _tls_records(address: str, compression: str, body: bytes, http_address: str) -> list[int]:
    """Sizes of the TLS records (one ``recv`` each) after ``compression`` is on: the upgrade's
    OK, then SUB's OK and one published message, read until their bytes are all in."""
    host, port = host_port(address)
    with socket.create_connection((host, port), timeout=10) as raw:
        ident = json.dumps({"tls_v1": True, compression: True, "feature_negotiation": True})
        raw.sendall(b"  V2" + sized(b"IDENTIFY\n", ident.encode()))
        header = _recv_exact(raw, 8)
        _recv_exact(raw, struct.unpack(">I", header[:4])[0] - 4)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert _recv_exact(tls, 10).endswith(b"OK")  # TLS's OK, before compression
            sizes = _records(tls, 10)  # the compressed OK (its encoded size is unknown)
            with urllib.request.urlopen(f"http://{http_address}/pub?topic=rec", body, timeout=10):
                pass
            command = b"SUB rec c\nRDY 1\n"
            if compression == "snappy":
                tls.sendall(bytes(snappy.StreamCompressor().add_chunk(command)))
            else:
                codec = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
                tls.sendall(codec.compress(command) + codec.flush(zlib.Z_SYNC_FLUSH))
            return sizes + _records(tls, 10 + 34 + len(body))


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def _records(tls: ssl.SSLSocket, payload: int) -> list[int]:
    """Record sizes until ``payload`` bytes of NSQ frames (snappy: plus its framing) are in;
    for deflate, until the sync marker after the last frame."""
    sizes: list[int] = []
    seen = b""
    while True:
        chunk = tls.recv(65536)
        assert chunk, "closed"
        sizes.append(len(chunk))
        seen += chunk
        if seen.endswith(b"\x00\x00\xff\xff") or _snappy_payload(seen) >= payload:
            return sizes


def _snappy_payload(stream: bytes) -> int:
    """Uncompressed bytes held by the complete snappy chunks at the start of ``stream``."""
    total = pos = 0
    while pos + 4 <= len(stream):
        kind = stream[pos]
        end = pos + 4 + int.from_bytes(stream[pos + 1 : pos + 4], "little")
        if end > len(stream):
            break
        if kind == 0x01:
            total += end - pos - 8
        elif kind == 0x00:
            total += len(snappy.uncompress(stream[pos + 8 : end]))
        pos = end
    return total


@pytest.fixture(scope="module")
def tls_pair(tls_certs: CertBundle) -> Iterator[tuple[NsqdProcess, ThreadedEmbeddedNsqd]]:
    options = {"tls_cert": tls_certs.server_cert, "tls_key": tls_certs.server_key}
    real = start_real(**options)
    embedded = start_embedded(**options)
    yield real, embedded
    real.stop()
    embedded.stop()


def test_snappy_chunks_reach_the_client_in_the_same_tls_records(
    tls_pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd],
) -> None:
    # an incompressible body: golang/snappy writes the chunk header and the raw body apart
    body = random.Random(7).randbytes(3000)
    real, embedded = (_tls_records(s.tcp_address, "snappy", body, s.http_address) for s in tls_pair)
    # stream id + header with the upgrade's OK, its body; SUB's OK likewise; the message likewise
    assert real == [18, 10, 8, 10, 8, 3034]
    assert embedded == real


def test_deflate_flushes_end_with_the_sync_marker_apart(
    tls_pair: tuple[NsqdProcess, ThreadedEmbeddedNsqd],
) -> None:
    body = b"compressible " * 200
    for server in tls_pair:
        sizes = _tls_records(server.tcp_address, "deflate", body, server.http_address)
        # every flush (upgrade OK; SUB's OK; the message) ends with its own 4-byte record
        assert len(sizes) >= 2 and sizes[-1] == 4, (server, sizes)
