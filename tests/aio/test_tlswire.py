"""The connection's own TLS (nsqclient/aio/tlswire.py) against an in-memory OpenSSL server.

No network: the server is an ``ssl.SSLObject`` over memory BIOs too, so every byte and record
boundary is the test's to choose. What nsqd does over TLS is tested against real nsqd and the
embedded server in tests/aio/test_connection.py and tests/sync/test_thread_kinds.py.
"""

from __future__ import annotations

import itertools
import ssl
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqclient.aio.tlswire import TLSWire
from nsqclient.errors import ProtocolError
from nsqclient.testing.certs import CertBundle, make_certs

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertBundle:
    return make_certs(Path(tmp_path_factory.mktemp("tlswire-certs")))


class Server:
    """The server's side of one session, in memory."""

    def __init__(self, certs: CertBundle, version: ssl.TLSVersion | None = None) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.server_cert, certs.server_key)
        if version is not None:
            context.maximum_version = version
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=True)

    def take(self) -> bytes:
        return self.outgoing.read()

    def feed(self, data: bytes) -> None:
        self.incoming.write(data)

    def send(self, data: bytes) -> bytes:
        """``data`` as one write of the server: its records (and what TLS adds before them)."""
        self.obj.write(data)
        return self.take()

    def read(self) -> bytes:
        out = []
        try:
            while True:
                chunk = self.obj.read(65536)
                if not chunk:
                    break
                out.append(chunk)
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass
        return b"".join(out)


def connect(certs: CertBundle, version: ssl.TLSVersion | None = None) -> tuple[TLSWire, Server]:
    """A finished handshake, driven by :meth:`TLSWire.handshake` as connection setup does."""
    server = Server(certs, version)
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    client = TLSWire(context, "127.0.0.1")
    data = b""
    for _ in range(10):
        done = client.handshake(data)
        server.feed(client.outgoing())
        if done:
            return client, server
        try:
            server.obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        data = server.take()
    raise AssertionError("the handshake never finished")


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` in pieces, cut at each offset of ``cuts`` (modulo its length)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


#: the server's writes, as (size, a seed byte): a write over 16 KiB is several records
writes = st.lists(
    st.tuples(st.one_of(st.integers(1, 3000), st.integers(16_000, 40_000)), st.integers(0, 255)),
    min_size=1,
    max_size=8,
)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
@given(sizes=writes, cuts=st.lists(st.integers(0, 300_000), max_size=12))
@settings(max_examples=60, deadline=None)
def test_every_whole_record_is_decrypted_as_soon_as_it_is_in(
    certs: CertBundle, version: ssl.TLSVersion, sizes: list[tuple[int, int]], cuts: list[int]
) -> None:
    """Read in any pieces, each call returns the plaintext of every record completed so far:
    nothing waits inside the session (a read loop that stops early, to spare raising
    SSLWantReadError, must never leave a record behind: the socket would show nothing more to
    read, and the reply would never be seen). Checked exactly where a write's records end (the
    pieces are cut there too), and in between as at least the writes already whole."""
    chunks = [bytes((seed + i) % 256 for i in range(size)) for size, seed in sizes]
    client, server = connect(certs, version)
    stream = b""
    ends: list[tuple[int, int]] = []  # (end of a write's records in the stream, plaintext so far)
    clear = 0
    for chunk in chunks:
        stream += server.send(chunk)
        clear += len(chunk)
        ends.append((len(stream), clear))
    got = b""
    fed = 0
    for piece in split_at(stream, [*cuts, *(end for end, _ in ends)]):
        got += client.decrypt(piece)
        fed += len(piece)
        whole = max((c for end, c in ends if end <= fed), default=0)
        assert len(got) >= whole
        if any(end == fed for end, _ in ends):
            assert len(got) == whole
    assert got == b"".join(chunks)
    assert not client.pending


def test_writes_reach_the_server_in_order(certs: CertBundle) -> None:
    client, server = connect(certs)
    for i in range(20):
        server.feed(client.encrypt(b"command %d\n" % i))
    assert server.read() == b"".join(b"command %d\n" % i for i in range(20))


def test_post_handshake_messages_are_consumed_and_a_key_update_answered(
    certs: CertBundle,
) -> None:
    """A new session ticket and a KeyUpdate asking for one back, from the server, among the
    records the client reads: consumed; the client's KeyUpdate goes before its next record."""
    from tests.sync.kinds_support import key_update_owed, request_key_update, request_session_ticket

    client, server = connect(certs)
    assert client.decrypt(server.send(b"first")) == b"first"
    session = client.ssl_object.session
    request_session_ticket(server.obj)
    assert client.decrypt(server.send(b"second")) == b"second"
    assert client.ssl_object.session != session
    request_key_update(server.obj)
    assert client.decrypt(server.send(b"third")) == b"third"
    assert key_update_owed(client.ssl_object)
    server.feed(client.outgoing())  # (what the session has to send now, if anything)
    server.feed(client.encrypt(b"after the update"))
    assert not key_update_owed(client.ssl_object)
    assert server.read() == b"after the update"
    assert client.decrypt(server.send(b"fourth")) == b"fourth"


@pytest.mark.parametrize("where", ["header", "body", "tag"])
def test_a_damaged_record_is_a_protocol_error(certs: CertBundle, where: str) -> None:
    client, server = connect(certs)
    assert client.decrypt(server.send(b"fine")) == b"fine"
    record = bytearray(server.send(b"x" * 100))
    record[{"header": 0, "body": 10, "tag": len(record) - 1}[where]] ^= 0x40
    with pytest.raises(ProtocolError, match="TLS failed while decrypting"):
        client.decrypt(bytes(record))


def test_an_alert_from_the_server_is_a_protocol_error(certs: CertBundle) -> None:
    """A fatal alert (here: the server rejecting a damaged record of the client's)."""
    client, server = connect(certs)
    damaged = bytearray(client.encrypt(b"x" * 50))
    damaged[-1] ^= 1
    server.feed(bytes(damaged))
    with pytest.raises(ssl.SSLError):
        server.read()
    alert = server.take()
    assert alert
    with pytest.raises(ProtocolError) as info:
        client.decrypt(alert)
    assert isinstance(info.value.__cause__, ssl.SSLError)


def test_close_notify_ends_the_stream_and_goodbye_says_one(certs: CertBundle) -> None:
    client, server = connect(certs)
    data = server.send(b"last words")
    try:
        server.obj.unwrap()
    except ssl.SSLWantReadError:
        pass
    data += server.take()
    assert client.decrypt(data) == b"last words"
    assert client.ended
    assert client.decrypt(b"anything after") == b""
    goodbye = client.goodbye()
    assert goodbye  # the client's close_notify
    server.feed(goodbye)
    with pytest.raises(ssl.SSLZeroReturnError):  # (the server sees the session's end)
        server.obj.read(10)


def test_close_notify_after_ours_ends_the_stream_too(certs: CertBundle) -> None:
    """Closing, the client said goodbye first; nsqd's own close_notify then ends the stream
    (OpenSSL reports it as SSLZeroReturnError, not as b"", once ours was sent)."""
    client, server = connect(certs)
    server.feed(client.goodbye())
    assert server.read() == b""
    try:
        server.obj.unwrap()
    except ssl.SSLError:
        pass
    assert client.decrypt(server.take()) == b""
    assert client.ended


def test_an_untrusted_certificate_fails_the_handshake(certs: CertBundle) -> None:
    server = Server(certs)
    context = ssl.create_default_context(cafile=str(certs.other_ca_cert))
    client = TLSWire(context, "127.0.0.1")
    assert not client.handshake(b"")
    server.feed(client.outgoing())
    with pytest.raises(ssl.SSLWantReadError):
        server.obj.do_handshake()
    with pytest.raises(ssl.SSLCertVerificationError):
        client.handshake(server.take())
    assert client.outgoing()  # the alert telling the server why
