"""Topics of the embedded nsqd, and the :class:`Broker` that owns all of them.

As in nsqd's ``topic.go``: every message is copied to every channel the topic has when the message
is handed over; a topic with no channels (or paused, or still asking lookupd which channels to
pre-create) keeps its backlog until it can hand it over; ``#ephemeral`` topics and channels have no
disk, so their memory-queue overflow is dropped, and they are deleted when their last client (or
channel) goes. Non-ephemeral queues are unbounded here (nsqd spills them to disk); the part above
``mem_queue_size`` is reported as ``backend_depth``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from .channel import Channel, Message

if TYPE_CHECKING:
    from .queuescan import QueueScanner

__all__ = ["Broker", "Topic"]

_TWEPOCH = 1288834974288


class Topic:
    """One topic: its own queue (used only while it cannot hand messages over) and channels."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.queue: deque[Message] = deque()
        self.channels: dict[str, Channel] = {}
        self._targets: list[Channel] = []
        self.paused = False
        self.started = False
        self.ready: asyncio.Future[None] = broker.loop.create_future()
        self.message_count = 0
        self.message_bytes = 0

    @property
    def depth(self) -> int:
        return len(self.queue)

    @property
    def backend_depth(self) -> int:
        if self.ephemeral:
            return 0
        return max(0, len(self.queue) - self.broker.mem_queue_size)

    def put(self, msg: Message) -> None:
        self.message_count += 1
        self.message_bytes += len(msg.body)
        if self._targets and self.started and not self.paused:
            self._hand_over(msg)
        else:
            self._hold((msg,))

    def put_many(self, msgs: Iterable[Message]) -> None:
        msgs = list(msgs)
        self.message_count += len(msgs)
        self.message_bytes += sum(len(m.body) for m in msgs)
        if self._targets and self.started and not self.paused:
            if any(m.deferred for m in msgs):
                for msg in msgs:
                    self._hand_over(msg)
                return
            first = True
            for channel in self._targets:  # each channel its copies in one go, as one by one
                channel.put_many(msgs if first else [m.copy() for m in msgs])
                first = False
        else:
            self._hold(msgs)

    def _hold(self, msgs: Iterable[Message]) -> None:
        self.queue.extend(msgs)
        if self.ephemeral:
            limit = self.broker.mem_queue_size
            while len(self.queue) > limit:
                self.queue.pop()

    def _hand_over(self, msg: Message) -> None:
        first = True
        for channel in self._targets:
            copy = msg if first else msg.copy()
            first = False
            if copy.deferred:
                channel.put_deferred(copy, copy.deferred)
            else:
                channel.put(copy)

    def _flow(self) -> None:
        """Move the backlog into the channels, if the topic can hand messages over now."""
        queue = self.queue
        while queue and self._targets and self.started and not self.paused:
            self._hand_over(queue.popleft())

    def start(self) -> None:
        self.started = True
        if not self.ready.done():
            self.ready.set_result(None)
        self._flow()

    def get_channel(self, name: str) -> Channel:
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self.broker, self.name, name)
            self.channels[name] = channel
            self._targets = list(self.channels.values())
            self.broker.log("INFO", f"TOPIC({self.name}): new channel({name})")
            self.broker.notify(self.name, name, True)
            self._flow()
        return channel

    def delete_channel(self, name: str) -> bool:
        channel = self.channels.get(name)
        if channel is None:
            return False
        self.broker.log("INFO", f"TOPIC({self.name}): deleting channel {name}")
        channel.close(delete=True)
        self.broker.notify(self.name, name, False)
        del self.channels[name]
        self._targets = list(self.channels.values())
        if not self.channels and self.ephemeral:
            self.broker.delete_topic(self.name)
        return True

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._flow()

    def empty(self) -> None:
        self.queue.clear()

    def close(self, *, delete: bool) -> None:
        for channel in list(self.channels.values()):
            channel.close(delete=delete)
        if delete:
            self.channels.clear()
            self._targets = []
            self.queue.clear()


class Broker:
    """All topics of one nsqd, the limits they obey, message IDs, and lookupd notifications.

    ``notify(topic, channel_or_None, registered)`` is called for every creation and deletion
    (what nsqd sends to its lookupds). ``precreate(topic)``, when set, returns the channel names
    lookupd knows for a new topic; the topic holds its messages until they exist.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        mem_queue_size: int,
        max_channel_consumers: int,
        max_msg_timeout: float,
        node_id: int,
        log: Callable[[str, str], None],
    ) -> None:
        self.loop = loop
        self.mem_queue_size = mem_queue_size
        self.max_channel_consumers = max_channel_consumers
        self.max_msg_timeout = max_msg_timeout
        self.log = log
        self.topics: dict[str, Topic] = {}
        self.notify: Callable[[str, str | None, bool], None] = lambda t, c, r: None
        self.precreate: Callable[[str], Awaitable[list[str]] | None] = lambda t: None
        self.scanner: QueueScanner | None = None  # nsqd's queue scan; None: exact timers
        self._next_id = (((time.time_ns() >> 20) - _TWEPOCH) << 22) | ((node_id & 1023) << 12)

    def new_message(self, body: bytes, deferred: float = 0.0) -> Message:
        """A message with a fresh 16-hex-digit ID (nsqd's layout, then a counter)."""
        self._next_id += 1
        return Message(b"%016x" % self._next_id, body, time.time_ns(), deferred)

    def new_messages(self, bodies: list[bytes]) -> list[Message]:
        """One MPUB's messages: consecutive IDs, one timestamp (nsqd's differ by nanoseconds)."""
        first = self._next_id + 1
        self._next_id += len(bodies)
        now = time.time_ns()
        count = len(bodies)
        ids = (b"%016x" * count) % tuple(range(first, first + count))  # one format, not count
        at = range(0, 16 * count, 16)
        return [Message(ids[i : i + 16], body, now) for i, body in zip(at, bodies, strict=True)]

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        topic = self.topics[name] = Topic(self, name)
        self.log("INFO", f"TOPIC({name}): created")
        self.notify(name, None, True)
        pending = self.precreate(name)
        if pending is None:
            topic.start()
        else:
            self.loop.create_task(self._precreate(topic, pending))
        return topic

    async def _precreate(self, topic: Topic, pending: Awaitable[list[str]]) -> None:
        try:
            names = await pending
        except Exception as exc:  # lookupd unreachable: nsqd logs and carries on
            self.log("WARN", f"failed to query nsqlookupd for channels of {topic.name} - {exc}")
            names = []
        if self.topics.get(topic.name) is topic:
            for name in names:
                if not name.endswith("#ephemeral"):
                    topic.get_channel(name)
        topic.start()

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        self.log("INFO", f"TOPIC({name}): deleting")
        topic.close(delete=True)
        if not topic.ready.done():
            topic.ready.set_result(None)
        self.notify(name, None, False)
        return True

    def delete_channel(self, topic_name: str, channel_name: str) -> bool:
        topic = self.topics.get(topic_name)
        return topic is not None and topic.delete_channel(channel_name)

    def shutdown(self, keep: str) -> None:
        """Server exit; ``keep`` is what survives for the next start, as with nsqd's data path.

        ``"messages"`` (clean exit): everything but ``#ephemeral`` topics/channels, in-flight and
        deferred messages back in the queues; ``"metadata"`` (crash): topics, channels and pause
        flags but no message; ``"nothing"``: a fresh nsqd.
        """
        for topic in list(self.topics.values()):
            for channel in topic.channels.values():
                channel.close(delete=False)
            if not topic.ready.done():
                topic.ready.cancel()
            if keep == "nothing":
                continue
            if topic.ephemeral:
                del self.topics[topic.name]
                continue
            for name in [n for n, c in topic.channels.items() if c.ephemeral]:
                del topic.channels[name]
            topic._targets = list(topic.channels.values())
            for channel in topic.channels.values():
                channel.drain_for_restart()
                if keep == "metadata":
                    channel.queue.clear()
            if keep == "metadata":
                topic.queue.clear()
            topic.message_count = topic.message_bytes = 0
        if keep == "nothing":
            self.topics.clear()

    def rebind(self, loop: asyncio.AbstractEventLoop) -> None:
        """After a restart with kept state: topics restart on ``loop`` with fresh futures."""
        self.loop = loop
        for topic in self.topics.values():
            topic.ready = loop.create_future()
            topic.start()
