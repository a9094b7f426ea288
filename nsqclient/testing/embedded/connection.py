"""One TCP client of the embedded nsqd: bytes in, commands run, frames out, timers.

An :class:`asyncio.Protocol`, so a burst of pipelined commands is parsed and answered in one
``data_received`` call and one ``write`` (frames for a client are batched per loop turn). It owns
the magic check, the incremental line/body parser with nsqd's 16 KiB line limit, the TLS / snappy /
deflate upgrades, heartbeats, the read deadline (2 x heartbeat interval without a complete command
closes the connection) and write back-pressure. The client's attributes and counters live in
:class:`~.client.ClientState`, which the commands work on; this class implements its socket
side. It sees its nsqd through :class:`ConnectionNsqd` (a protocol: nsqd makes the connections).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from ...protocol.compression import Codec, DeflateCodec, SnappyCodec
from ...protocol.frames import FRAME_MESSAGE, encode_error, encode_response
from .auth import common_name
from .bodies import ItemReader, Need, Result
from .client import ClientNsqd, ClientState
from .commands import execute
from .framing import bufio_writes, deflate_writes, flushes, snappy_writes
from .listen import peer_address
from .tlsalert import start_tls_server
from .wire import ClientError

if TYPE_CHECKING:
    from .channel import Message

__all__ = ["ClientConnection", "ConnectionNsqd"]

MAX_LINE: Final = 16 * 1024
_HEARTBEAT: Final = encode_response(b"_heartbeat_")
_OK: Final = encode_response(b"OK")
# a message frame's header in one pack: size, frame type, timestamp, attempts, id (then the body)
_MESSAGE_FRAME: Final = struct.Struct(">IiqH16s")


class ConnectionNsqd(ClientNsqd, Protocol):
    """What a connection uses of its nsqd (:class:`~.nsqd.EmbeddedNsqd`) besides what its
    commands do: the set of open connections it joins, and leaves through ``forget``."""

    conns: set[ClientConnection]

    def forget(self, conn: ClientConnection) -> None: ...


class ClientConnection(ClientState, asyncio.Protocol):
    """Server side of one nsqd V2 connection."""

    def __init__(self, nsqd: ConnectionNsqd) -> None:
        super().__init__(nsqd)
        self._open_conns = nsqd.conns
        self._forget = nsqd.forget
        self.loop = nsqd.loop
        self.transport: asyncio.Transport | None = None
        self._identified = False
        self._magic = False
        self._buf = bytearray()
        self._body: Generator[Need, bytes, Result] | None = None
        self._need: Need = (0, "", b"")
        self._busy = False
        self._drop_input = False
        self._codec: Codec | None = None
        self._out: list[bytes] = []
        self._flush_pending = False
        self._write_paused = False
        self._reading_paused = False
        self._deadline = 0.0
        self._timers: dict[str, asyncio.TimerHandle] = {}

    # -- asyncio.Protocol --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if not self.nsqd.running:  # accepted just as nsqd stopped (e.g. queued while frozen)
            self.closed = True
            self.transport.abort()
            return
        self.transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        peer = peer_address(transport.get_extra_info("peername"))
        if peer is not None:
            self.client_id = self.hostname = peer[0]
            self.remote_address = peer[1]
        self._open_conns.add(self)
        self.nsqd.log("INFO", f"TCP: new client({self.remote_address})")

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._codec is not None:
            try:
                data = self._codec.decompress(data)
            except Exception as exc:
                self._abort(f"failed to read command - {exc}")
                return
        if not self._magic:
            self._buf += data
            if len(self._buf) < 4:
                return
            if not self._check_magic():
                return
        else:
            self._buf += data
        if self._process():
            self._touch_deadline()
        self._flush()

    def eof_received(self) -> bool | None:
        if self._body is not None and not self._busy:
            self._fail(self._read_failed())
        self._close("EOF")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._forget(self)
        if self.channel is not None:
            self.channel.remove_client(self)
        self.nsqd.log("INFO", f"PROTOCOL(V2): [{self.remote_address}] exiting ioloop")

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()
        if self.heartbeat_interval > 0:
            self._timer("write", self.loop.time() + self.heartbeat_interval, self._write_timeout)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._cancel_timer("write")
        self._update_reading()
        if not self._busy:
            self._resume()
        if self.channel is not None:
            self.channel.pump()

    # -- input --

    def _check_magic(self) -> bool:
        magic = bytes(self._buf[:4])
        del self._buf[:4]
        shown = magic.decode("latin-1")
        self.nsqd.log("INFO", f"CLIENT({self.remote_address}): desired protocol magic '{shown}'")
        if magic != b"  V2":
            self.nsqd.log("ERROR", f"client({self.remote_address}) bad protocol magic {magic!r}")
            self.write_now(encode_error(b"E_BAD_PROTOCOL"))
            self._close("bad magic")
            return False
        self._magic = True
        self._start_heartbeats()
        return True

    def _process(self) -> bool:
        """Run every complete command in the buffer; True if at least one completed."""
        buf = self._buf
        pos = 0
        done = False
        self.batching = True
        try:
            while not (self._busy or self.closed or self._write_paused):
                if self._body is not None:
                    need = self._need
                    if isinstance(need, ItemReader):
                        try:
                            pos = need.feed(buf, pos)
                        except ClientError as exc:
                            self._body = None
                            self._fail(exc)
                        else:
                            if not need.done:
                                break
                            self._step(self._body, None)
                    else:
                        size = need[0]
                        if len(buf) - pos < size:
                            break
                        chunk = bytes(buf[pos : pos + size])
                        pos += size
                        self._step(self._body, chunk)
                else:
                    nl = buf.find(b"\n", pos)
                    if nl < 0:
                        if len(buf) - pos >= MAX_LINE:
                            self._close("failed to read command - bufio: buffer full")
                        break
                    if nl - pos >= MAX_LINE:
                        self._close("failed to read command - bufio: buffer full")
                        break
                    line = bytes(buf[pos:nl])
                    pos = nl + 1
                    if line[-1:] == b"\r":
                        line = line[:-1]
                    try:
                        result = execute(self, line.split(b" "))
                    except ClientError as exc:
                        self._fail(exc)
                    else:
                        self._dispatch(result)
                if self._body is None:
                    done = True
                if self._drop_input:
                    self._drop_input = False
                    pos = len(buf)
        finally:
            if pos:
                del buf[:pos]
            self.batching = False
            if self.pump_due:
                self.pump_due = False
                if self.channel is not None:
                    self.channel.pump()
        return done

    def _step(self, body: Generator[Need, bytes, Result], chunk: bytes | None) -> None:
        try:
            self._need = body.send(chunk)  # type: ignore[arg-type]
        except StopIteration as stop:
            self._body = None
            self._dispatch(stop.value)
        except ClientError as exc:
            self._body = None
            self._fail(exc)
        else:
            self._body = body

    def _read_failed(self) -> ClientError:
        """The error of the body read in progress when the stream ends or times out."""
        need = self._need
        code, text = need.need if isinstance(need, ItemReader) else need[1:]
        return ClientError(code, text)

    def _dispatch(self, result: Result) -> None:
        if result is None:
            return
        if isinstance(result, bytes):
            self._out.append(encode_response(result))
        elif isinstance(result, Generator):
            self._step(result, None)
        else:
            self._busy = True
            self._update_reading()
            self.loop.create_task(self._run_async(result))

    async def _run_async(self, coro: Coroutine[Any, Any, Result]) -> None:
        try:
            result = await coro
        except ClientError as exc:
            self._fail(exc)
        except Exception as exc:  # pragma: no cover - a bug in the embedded server
            self.nsqd.log("ERROR", f"[{self.remote_address}] internal error {exc!r}")
            self._close("internal error")
        else:
            if not self.closed:
                self._dispatch(result)
        finally:
            self._busy = False
        if not self.closed and not self._busy:
            self._update_reading()
            self._resume()

    def _resume(self) -> None:
        if self._process():
            self._touch_deadline()
        self._flush()

    def _fail(self, exc: ClientError) -> None:
        self.nsqd.log("ERROR", f"[{self.remote_address}] - {exc}")
        self.write_now(encode_error(exc.text))
        if exc.fatal:
            self._close(str(exc))

    # -- output --

    def write_now(self, frame: bytes) -> None:
        """Queue a frame and flush at once (responses, errors, heartbeats)."""
        self._out.append(frame)
        self._flush()

    def send_message(self, msg: Message) -> None:
        self.in_flight_count += 1
        self.message_count += 1
        body = msg.body
        header = _MESSAGE_FRAME.pack(
            len(body) + 30, FRAME_MESSAGE, msg.timestamp, msg.attempts, msg.id
        )
        self._out.append(header + body)
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        out = self._out
        if not out or self.transport is None or self.closed:
            out.clear()
            return
        if self._codec is not None:
            self._write_compressed(out)
            out.clear()
            return
        data = b"".join(out) if len(out) > 1 else out[0]
        out.clear()
        self.transport.write(data)

    def _write_compressed(self, frames: list[bytes]) -> None:
        """nsqd's writes for compressed output (see :mod:`.framing`): separate TLS records."""
        codec, transport = self._codec, self.transport
        assert codec is not None and transport is not None
        if isinstance(codec, SnappyCodec):
            for chunk in bufio_writes(frames, self.output_buffer_size):
                for piece in snappy_writes(codec.compress(chunk)):
                    transport.write(piece)
            return
        for batch in flushes(frames):
            for piece in deflate_writes(codec.compress(batch)):
                transport.write(piece)

    def upgrade(self, *, tls: bool, snappy: bool, deflate_level: int) -> Result:
        """IDENTIFY's upgrades, in nsqd's order, each confirmed with ``OK``.

        Bytes already read past the IDENTIFY body are dropped, as nsqd drops its old buffered
        reader. TLS needs the loop, so it returns a coroutine; compression alone is immediate.
        """
        self._drop_input = True
        if tls:
            return self._upgrade_tls(snappy, deflate_level)
        self._compress(snappy, deflate_level)
        return None

    async def _upgrade_tls(self, snappy: bool, deflate_level: int) -> Result:
        assert self.transport is not None and self.nsqd.tls_context is not None
        self.nsqd.log("INFO", f"PROTOCOL(V2): [{self.remote_address}] upgrading connection to TLS")
        try:  # a refused handshake: the TLS alert, then nsqd's E_IDENTIFY_FAILED in plaintext
            transport = await start_tls_server(
                self.loop,
                self.transport,
                self,
                self.nsqd.tls_context,
                handshake_timeout=5.0,
                after_alert=_identify_failed,
            )
        except (TimeoutError, OSError) as exc:
            self.nsqd.log("ERROR", f"[{self.remote_address}] TLS upgrade failed {exc!r}")
            self._close("TLS handshake failed")
            return None
        assert transport is not None
        self.transport = transport
        self._reading_paused = False
        self.tls = True
        self.write_now(_OK)
        self._compress(snappy, deflate_level)
        return None

    def _compress(self, snappy: bool, deflate_level: int) -> None:
        if snappy:
            self._codec = SnappyCodec()
            self.snappy = True
            self.write_now(_OK)
        if deflate_level:
            self._codec = DeflateCodec(deflate_level)
            self.deflate = True
            self.write_now(_OK)

    # -- state used by commands and channels --

    def identified(self) -> None:
        if self._identified:
            return  # like nsqd's message pump, only the first IDENTIFY reaches it
        self._identified = True
        self.pump_msg_timeout = self.msg_timeout
        if self.sample_rate > 0:
            self.pump_sample_rate = self.sample_rate
        self._start_heartbeats()

    def is_ready(self) -> bool:
        return self.in_flight_count < self.ready_count and not (self._write_paused or self.closed)

    async def query_auth(self) -> None:
        """Ask the auth server(s); any failure is nsqd's uninformative ``E_AUTH_FAILED``."""
        peercert = self.transport.get_extra_info("peercert") if self.transport else None
        try:
            self.auth_state = await self.nsqd.query_auth(
                self.remote_address.rpartition(":")[0].strip("[]"),
                self.tls,
                common_name(peercert) if self.tls else "",
                self.auth_secret.decode("utf-8", "replace"),
            )
        except Exception as exc:
            self.nsqd.log("WARN", f"PROTOCOL(V2): [{self.remote_address}] AUTH failed {exc}")
            raise ClientError("E_AUTH_FAILED", "AUTH failed") from None

    def close_by_server(self) -> None:
        self._close("closed by server")

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.closed = True

    def _close(self, reason: str) -> None:
        if self.closed:
            return
        self._flush()
        self.closed = True
        self.nsqd.log("INFO", f"[{self.remote_address}] closing: {reason}")
        if self.transport is not None:
            self.transport.close()

    def _abort(self, reason: str) -> None:
        self.nsqd.log("ERROR", f"[{self.remote_address}] {reason}")
        self._close(reason)

    # -- timers --

    def _timer(self, name: str, when: float, callback: Any) -> None:
        self._cancel_timer(name)
        self._timers[name] = self.loop.call_at(when, callback)

    def _cancel_timer(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _start_heartbeats(self) -> None:
        self._cancel_timer("heartbeat")
        if self.heartbeat_interval > 0:
            self._timer("heartbeat", self.loop.time() + self.heartbeat_interval, self._heartbeat)
        self._touch_deadline()

    def _heartbeat(self) -> None:
        if self.closed:
            return
        self.write_now(_HEARTBEAT)
        interval = self.heartbeat_interval if self.heartbeat_interval > 0 else 30.0
        when = self._timers["heartbeat"].when() + interval
        self._timer("heartbeat", max(when, self.loop.time()), self._heartbeat)

    def _touch_deadline(self) -> None:
        """A command finished: the next one must arrive within 2 x heartbeat interval."""
        if self.heartbeat_interval <= 0:
            self._deadline = 0.0
            return
        self._deadline = self.loop.time() + 2 * self.heartbeat_interval
        timer = self._timers.get("deadline")
        if timer is None or timer.when() > self._deadline:
            self._timer("deadline", self._deadline, self._check_deadline)

    def _check_deadline(self) -> None:
        self._timers.pop("deadline", None)
        if self.closed or not self._deadline:
            return
        now = self.loop.time()
        if self._busy or now < self._deadline:
            self._timer("deadline", max(self._deadline, now + 0.05), self._check_deadline)
            return
        if self._body is not None:
            self._fail(self._read_failed())
        self._close("failed to read command - i/o timeout")

    def _write_timeout(self) -> None:
        if self._write_paused and not self.closed:
            self.nsqd.log("ERROR", f"[{self.remote_address}] write timeout; client not reading")
            self.abort()

    def _update_reading(self) -> None:
        want_paused = self._busy or self._write_paused
        transport = self.transport
        if transport is None or self.closed or want_paused == self._reading_paused:
            return
        self._reading_paused = want_paused
        if want_paused:
            transport.pause_reading()
        else:
            transport.resume_reading()


def _identify_failed(exc: BaseException) -> bytes:
    """nsqd's frame after a refused TLS handshake (the reason is OpenSSL's, not Go's)."""
    reason = getattr(exc, "reason", None) or str(exc)
    return encode_error(f"E_IDENTIFY_FAILED IDENTIFY failed tls: {reason}".encode())
