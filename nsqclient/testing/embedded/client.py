"""What nsqd knows about one client apart from its socket: IDENTIFY attributes and counters.

The attributes IDENTIFY sets (durations in seconds, ``output_buffer_timeout`` in ms), the RDY
and in-flight bookkeeping the channels drive, and the counters ``/stats`` reports.
:class:`~.connection.ClientConnection` adds the transport side.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .auth import AuthState
    from .channel import Channel
    from .nsqd import EmbeddedNsqd

__all__ = ["ClientState"]


class ClientState:
    """Per-client state, as nsqd's ``clientV2`` keeps it."""

    def __init__(self, nsqd: EmbeddedNsqd) -> None:
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
