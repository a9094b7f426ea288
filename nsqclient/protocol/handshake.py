"""The client side of connection setup as a state machine with no I/O.

magic -> IDENTIFY -> (TLS) -> (snappy | deflate) -> (AUTH), in exactly the order nsqd performs the
upgrades (see nsq-protocol.md §6.3). The caller writes :meth:`Handshake.start`'s bytes, then feeds
one frame at a time to :meth:`Handshake.receive` and carries out the returned steps: ``Send`` bytes,
``StartTLS`` on the raw socket, ``EnableCompression`` on the stream. Frames must be fed one at a
time (``FrameDecoder.next_event``), because the bytes after the IDENTIFY reply may already belong to
the compressed stream.
"""

from __future__ import annotations

import dataclasses
import enum

from ..errors import AuthRequiredError, ProtocolError, TLSError
from . import commands
from .frames import ErrorFrame, Event, Heartbeat, Response
from .identify import AuthResponse, IdentifyOptions, IdentifyResponse

__all__ = [
    "EnableCompression",
    "Handshake",
    "HandshakeDone",
    "Send",
    "StartTLS",
    "Step",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class StartTLS:
    """Run the TLS client handshake on the raw socket now; send nothing before it."""


@dataclasses.dataclass(frozen=True, slots=True)
class EnableCompression:
    """Wrap both directions in this codec (``"snappy"`` or ``"deflate"``) from now on."""

    kind: str
    level: int = 6


@dataclasses.dataclass(frozen=True, slots=True)
class HandshakeDone:
    identify: IdentifyResponse
    auth: AuthResponse | None


Step = Send | StartTLS | EnableCompression | HandshakeDone


class _State(enum.Enum):
    NEW = "new"
    IDENTIFY = "waiting for IDENTIFY reply"
    TLS_OK = "waiting for OK after TLS"
    COMPRESSION_OK = "waiting for OK after compression"
    AUTH = "waiting for AUTH reply"
    DONE = "done"


class Handshake:
    """Drive setup for one connection. Server errors are raised as their typed exceptions."""

    def __init__(
        self,
        options: IdentifyOptions,
        *,
        auth_secret: bytes | None = None,
        address: str | None = None,
    ) -> None:
        self.options = options
        self.auth_secret = auth_secret
        self.address = address
        self._state = _State.NEW
        self._identify: IdentifyResponse | None = None
        self._pending_compression: EnableCompression | None = None

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    @property
    def identify_response(self) -> IdentifyResponse | None:
        return self._identify

    def start(self) -> bytes:
        """The first bytes to send: the V2 magic and IDENTIFY."""
        if self._state is not _State.NEW:
            raise RuntimeError("handshake already started")
        self._state = _State.IDENTIFY
        return commands.MAGIC_V2 + commands.identify(self.options.to_json())

    def receive(self, event: Event) -> list[Step]:
        """Feed the next frame; return what to do next."""
        if isinstance(event, Heartbeat):
            return []  # answering NOP mid-upgrade would corrupt the stream; setup is short
        if isinstance(event, ErrorFrame):
            raise event.to_exception(self.address)
        if not isinstance(event, Response):
            raise ProtocolError(
                f"unexpected {type(event).__name__} during handshake ({self._state.value})"
            )
        state = self._state
        if state is _State.IDENTIFY:
            return self._on_identify(event.data)
        if state is _State.TLS_OK:
            self._expect_ok(event)
            return self._after_tls()
        if state is _State.COMPRESSION_OK:
            self._expect_ok(event)
            return self._after_compression()
        if state is _State.AUTH:
            auth = AuthResponse.parse(event.data)
            self._state = _State.DONE
            assert self._identify is not None
            return [HandshakeDone(self._identify, auth)]
        raise ProtocolError(f"unexpected response {event.data[:40]!r} in state {state.value}")

    # -- steps --

    def _on_identify(self, data: bytes) -> list[Step]:
        resp = IdentifyResponse.parse(data)
        self._identify = resp
        opts = self.options
        if opts.tls_v1 and not resp.tls_v1:
            raise TLSError(
                "tls_v1 was requested but nsqd did not agree to TLS (start nsqd with --tls-cert "
                "and --tls-key, or set tls_v1=False); refusing to continue in plaintext",
                address=self.address,
            )
        if resp.snappy:
            self._pending_compression = EnableCompression("snappy")
        elif resp.deflate:
            self._pending_compression = EnableCompression("deflate", resp.deflate_level)
        if resp.tls_v1:
            self._state = _State.TLS_OK
            return [StartTLS()]
        return self._after_tls()

    def _after_tls(self) -> list[Step]:
        if self._pending_compression is not None:
            self._state = _State.COMPRESSION_OK
            return [self._pending_compression]
        return self._after_compression()

    def _after_compression(self) -> list[Step]:
        assert self._identify is not None
        if self._identify.auth_required:
            if not self.auth_secret:
                raise AuthRequiredError(
                    "nsqd requires authentication (started with --auth-http-address); "
                    "pass auth_secret=...",
                )
            self._state = _State.AUTH
            return [Send(commands.auth(self.auth_secret))]
        self._state = _State.DONE
        return [HandshakeDone(self._identify, None)]

    def _expect_ok(self, event: Response) -> None:
        if event.data != b"OK":
            raise ProtocolError(f"expected OK after upgrade, got {event.data[:40]!r}")
