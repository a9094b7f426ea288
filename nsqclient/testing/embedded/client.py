"""What nsqd knows about one client apart from its socket: IDENTIFY attributes and counters.

The attributes IDENTIFY sets (durations in seconds, ``output_buffer_timeout`` in ms), the RDY
and in-flight bookkeeping the channels drive, and the counters ``/stats`` reports. The commands
(:mod:`.commands`, :mod:`.identify`) work on a :class:`ClientState`: the few socket-side calls
they make are abstract here, and :class:`~.connection.ClientConnection` adds the transport side
that implements them. Both see their nsqd through :class:`ClientNsqd`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio
    import ssl

    from .auth import AuthState
    from .bodies import Result
    from .channel import Channel, Message
    from .options import NsqdOptions
    from .topic import Broker

__all__ = ["ClientNsqd", "ClientState"]


class ClientNsqd(Protocol):
    """What a client connection, its state and its commands use of their nsqd
    (:class:`~.nsqd.EmbeddedNsqd`; a protocol, so that nothing below the server imports it)."""

    options: NsqdOptions
    version: str
    tls_context: ssl.SSLContext | None
    running: bool

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def tls_required(self) -> bool: ...

    @property
    def auth_enabled(self) -> bool: ...

    def log(self, level: str, text: str) -> None: ...

    def next_client_id(self) -> int: ...

    async def query_auth(
        self, remote_ip: str, tls: bool, common_name: str, secret: str
    ) -> AuthState: ...


class ClientState(ABC):
    """Per-client state, as nsqd's ``clientV2`` keeps it; the socket side is the subclass's."""

    def __init__(self, nsqd: ClientNsqd) -> None:
        opts = nsqd.options
        self.nsqd = nsqd
        self.id = nsqd.next_client_id()
        self.remote_address = ""
        self.state = 0  # 0 init, 3 subscribed, 4 closing
        self.closed = False
        self.channel: Channel | None = None
        self.client_id = self.hostname = self.user_agent = ""
        self.heartbeat_interval = opts.heartbeat_interval / 1000
        self.output_buffer_size = 16384
        self.output_buffer_timeout = opts.output_buffer_timeout
        self.msg_timeout = opts.msg_timeout / 1000
        self.sample_rate = 0
        # nsqd's message pump only learns the first IDENTIFY's timeout and sample rate
        self.pump_msg_timeout = self.msg_timeout
        self.pump_sample_rate = 0
        self.ready_count = self.in_flight_count = self.message_count = 0
        self.finish_count = self.requeue_count = 0
        self.pub_counts: dict[str, int] = {}
        self.connect_ts = int(time.time())
        self.tls = self.snappy = self.deflate = False
        self.auth_secret = b""
        self.auth_state: AuthState | None = None
        # while the connection runs a batch of pipelined commands, the slots FIN / REQ free are
        # refilled by one pump after the batch (one call per read, not per message)
        self.batching = False
        self.pump_due = False

    def set_ready_count(self, count: int) -> None:
        if count != self.ready_count:
            self.ready_count = count
            if self.channel is not None and count > self.in_flight_count:
                self.channel.pump()

    def finished_message(self) -> None:
        self.finish_count += 1
        self._in_flight_down()

    def requeued_message(self) -> None:
        self.requeue_count += 1
        self._in_flight_down()

    def timed_out_message(self) -> None:
        self.in_flight_count -= 1

    def _in_flight_down(self) -> None:
        self.in_flight_count -= 1
        channel = self.channel
        if channel is not None and channel.queue:
            if self.batching:
                self.pump_due = True
            else:
                channel.pump()

    def emptied(self) -> None:
        self.in_flight_count = 0

    def published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    def has_authorizations(self) -> bool:
        return self.auth_state is not None and bool(self.auth_state.authorizations)

    # -- the socket side (ClientConnection): what the commands and the channel ask of it --

    @abstractmethod
    def write_now(self, frame: bytes) -> None:
        """Queue a frame and flush at once (responses, errors, heartbeats)."""

    @abstractmethod
    def send_message(self, msg: Message) -> None:
        """Deliver one message (counted in flight)."""

    @abstractmethod
    def is_ready(self) -> bool:
        """Whether the channel may deliver to this client now."""

    @abstractmethod
    def identified(self) -> None:
        """IDENTIFY succeeded: its timeouts reach the message pump, heartbeats (re)start."""

    @abstractmethod
    def upgrade(self, *, tls: bool, snappy: bool, deflate_level: int) -> Result:
        """IDENTIFY's upgrades (TLS, then compression), each confirmed with ``OK``."""

    @abstractmethod
    async def query_auth(self) -> None:
        """Ask the auth server(s) about :attr:`auth_secret`; sets :attr:`auth_state`."""

    @abstractmethod
    def close_by_server(self) -> None:
        """Close the connection from the server's side."""
