"""A channel of the embedded nsqd: its queue, in-flight and deferred sets, and delivery.

Semantics follow nsqd's ``channel.go``: each message goes to exactly one ready client (round-robin
here), RDY is a window (deliver while ``in_flight < RDY``), an in-flight message times out after
the client's ``msg_timeout`` and goes back to the queue with its attempts kept, a disconnected
client's in-flight messages stay until they time out, REQ with a delay parks the message as
deferred. In-flight and deferred messages sit in heaps with lazy deletion (FIN costs a dict pop);
by default nsqd's queue scan (:mod:`.queuescan`) calls :meth:`Channel.process_in_flight` and
:meth:`Channel.process_deferred`, as nsqd's ``queueScanWorker`` does; with the broker's
``scanner`` unset (``precise_timeouts``) one exact loop timer per heap moves them instead.
A channel sees its topic's broker through :class:`ChannelBroker` (a protocol: the topic module
makes channels, so this one imports nothing of it).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections import deque
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .queuescan import QueueScanner

__all__ = ["Channel", "ChannelBroker", "Consumer", "Message"]

_seq = itertools.count()


class Message:
    """One message copy. ``deferred`` (seconds) is set only between DPUB and the channel."""

    __slots__ = (
        "attempts",
        "body",
        "client_id",
        "deadline",
        "deferred",
        "delivered_at",
        "id",
        "timestamp",
    )

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, deferred: float = 0.0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = 0
        self.deferred = deferred
        self.client_id = 0
        self.delivered_at = 0.0
        self.deadline = 0.0

    def copy(self) -> Message:
        return Message(self.id, self.body, self.timestamp, self.deferred)


class Consumer(Protocol):
    """What a channel needs from a subscribed client connection."""

    id: int
    pump_msg_timeout: float
    pump_sample_rate: int

    def is_ready(self) -> bool: ...

    def send_message(self, msg: Message) -> None: ...

    def timed_out_message(self) -> None: ...

    def emptied(self) -> None: ...

    def close_by_server(self) -> None: ...


class ChannelBroker(Protocol):
    """What a channel uses of its :class:`~.topic.Broker`: the loop, the limits, whether the
    queue scan runs (else the channel's own timers), and deleting a channel (an ephemeral
    one, when its last client leaves)."""

    loop: asyncio.AbstractEventLoop
    mem_queue_size: int
    max_channel_consumers: int
    max_msg_timeout: float
    scanner: QueueScanner | None

    def delete_channel(self, topic_name: str, channel_name: str) -> bool: ...


class Channel:
    """Queue + in-flight + deferred for one topic/channel pair."""

    def __init__(self, broker: ChannelBroker, topic_name: str, name: str) -> None:
        self.broker = broker
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.queue: deque[Message] = deque()
        self.clients: dict[int, Consumer] = {}
        self._order: list[Consumer] = []
        self._rr = 0
        self.paused = False
        self.exiting = False
        self.in_flight: dict[bytes, Message] = {}
        self._if_heap: list[tuple[float, int, Message]] = []
        self._if_timer: asyncio.TimerHandle | None = None
        self.deferred: dict[bytes, Message] = {}
        self._def_heap: list[tuple[float, int, Message]] = []
        self._def_timer: asyncio.TimerHandle | None = None
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0

    # -- queueing --

    def put(self, msg: Message) -> None:
        """A new copy from the topic (counted in ``message_count``)."""
        self.message_count += 1
        self._enqueue(msg)

    def put_many(self, msgs: list[Message]) -> None:
        """New copies from the topic, as :meth:`put` one by one: queued, then handed to ready
        clients (one pump, the same round-robin), an ephemeral channel's overflow dropped."""
        self.message_count += len(msgs)
        queue = self.queue
        queue.extend(msgs)
        if self._order and not self.paused:
            self.pump()
        if self.ephemeral:
            limit = self.broker.mem_queue_size
            while len(queue) > limit:
                queue.pop()

    def put_deferred(self, msg: Message, delay: float) -> None:
        self.message_count += 1
        self._defer(msg, delay)

    def _enqueue(self, msg: Message) -> None:
        queue = self.queue
        queue.append(msg)
        if self._order and not self.paused:
            self.pump()
        if self.ephemeral and len(queue) > self.broker.mem_queue_size:
            queue.pop()  # an ephemeral channel has no disk: overflow is dropped

    @property
    def depth(self) -> int:
        return len(self.queue)

    @property
    def backend_depth(self) -> int:
        if self.ephemeral:
            return 0
        return max(0, len(self.queue) - self.broker.mem_queue_size)

    def pump(self) -> None:
        """Hand queued messages to ready clients, round-robin, while any is ready.

        The per-message work of :meth:`_start_in_flight` is inlined (this loop is the reader
        path's hot spot); the in-flight timer and the heap's compaction are checked once after.
        """
        queue = self.queue
        order = self._order
        if self.paused or not queue or not order:
            return
        count = len(order)
        i = self._rr
        idle = 0
        loop_time = self.broker.loop.time()
        in_flight = self.in_flight
        heap = self._if_heap
        push = heapq.heappush
        popleft = queue.popleft
        earliest = 0.0
        while queue and idle < count:
            client = order[i % count]
            i += 1
            if not client.is_ready():
                idle += 1
                continue
            idle = 0
            msg = popleft()
            rate = client.pump_sample_rate
            if rate and random.randrange(100) > rate:
                continue  # sampled out: consumed, never delivered
            msg.attempts = (msg.attempts + 1) & 0xFFFF
            msg.client_id = client.id
            msg.delivered_at = loop_time
            msg.deadline = deadline = loop_time + client.pump_msg_timeout
            in_flight[msg.id] = msg
            push(heap, (deadline, next(_seq), msg))
            if not earliest or deadline < earliest:
                earliest = deadline
            client.send_message(msg)
        self._rr = i % count
        if earliest:
            self._in_flight_started(earliest)

    # -- clients --

    def add_client(self, client: Consumer) -> str | None:
        """Subscribe; returns nsqd's failure reason or None."""
        if client.id in self.clients:
            return None
        limit = self.broker.max_channel_consumers
        if limit and len(self.clients) >= limit:
            return f"consumers for {self.topic_name}:{self.name} exceeds limit of {limit}"
        self.clients[client.id] = client
        self._order = list(self.clients.values())
        return None

    def remove_client(self, client: Consumer) -> None:
        if self.exiting or self.clients.pop(client.id, None) is None:
            return
        self._order = list(self.clients.values())
        if not self.clients and self.ephemeral:
            self.broker.delete_channel(self.topic_name, self.name)

    # -- responses --

    def _pop_in_flight(self, client_id: int, msg_id: bytes) -> Message | str:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            return "ID not in flight"
        if msg.client_id != client_id:
            return "client does not own message"
        del self.in_flight[msg_id]
        return msg

    def finish(self, client_id: int, msg_id: bytes) -> str | None:
        msg = self._pop_in_flight(client_id, msg_id)
        return msg if isinstance(msg, str) else None

    def requeue(self, client_id: int, msg_id: bytes, delay: float) -> str | None:
        msg = self._pop_in_flight(client_id, msg_id)
        if isinstance(msg, str):
            return msg
        self.requeue_count += 1
        if delay <= 0:
            self._enqueue(msg)
        else:
            self._defer(msg, delay)
        return None

    def touch(self, client_id: int, msg_id: bytes, timeout: float) -> str | None:
        msg = self._pop_in_flight(client_id, msg_id)
        if isinstance(msg, str):
            return msg
        deadline = self.broker.loop.time() + timeout
        limit = msg.delivered_at + self.broker.max_msg_timeout
        self._start_in_flight(msg, min(deadline, limit))
        return None

    # -- timers --

    def _start_in_flight(self, msg: Message, deadline: float) -> None:
        msg.deadline = deadline
        self.in_flight[msg.id] = msg
        heapq.heappush(self._if_heap, (deadline, next(_seq), msg))
        self._in_flight_started(deadline)

    def _in_flight_started(self, earliest: float) -> None:
        """After in-flight entries were pushed (the earliest deadline among them): arm the
        exact timer (``precise_timeouts``), else drop the heap's dead entries once it is more
        than twice the live set."""
        timer = self._if_timer
        heap = self._if_heap
        if self.broker.scanner is None and (timer is None or earliest < timer.when()):
            self._arm_in_flight(earliest)
        elif len(heap) > 2 * len(self.in_flight) + 4096:
            in_flight = self.in_flight
            self._if_heap = heap = [
                e for e in heap if in_flight.get(e[2].id) is e[2] and e[2].deadline == e[0]
            ]
            heapq.heapify(heap)

    def _live_in_flight(self, entry: tuple[float, int, Message]) -> bool:
        msg = entry[2]
        return self.in_flight.get(msg.id) is msg and msg.deadline == entry[0]

    def _arm_in_flight(self, when: float) -> None:
        if self._if_timer is not None:
            self._if_timer.cancel()
        self._if_timer = self.broker.loop.call_at(when, self._expire_in_flight)

    def _expire_in_flight(self) -> None:
        self._if_timer = None
        self.process_in_flight(self.broker.loop.time())
        heap = self._if_heap
        if heap:
            self._arm_in_flight(heap[0][0])

    def process_in_flight(self, now: float) -> bool:
        """nsqd's ``processInFlightQueue``: requeue what timed out by ``now``; True if any."""
        heap = self._if_heap
        expired: list[Message] = []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._live_in_flight(entry):
                msg = entry[2]
                del self.in_flight[msg.id]
                expired.append(msg)
        while heap and not self._live_in_flight(heap[0]):
            heapq.heappop(heap)
        for msg in expired:
            self.timeout_count += 1
            client = self.clients.get(msg.client_id)
            if client is not None:
                client.timed_out_message()
            self._enqueue(msg)
        return bool(expired)

    def _defer(self, msg: Message, delay: float) -> None:
        when = self.broker.loop.time() + delay
        msg.deadline = when
        self.deferred[msg.id] = msg
        heapq.heappush(self._def_heap, (when, next(_seq), msg))
        timer = self._def_timer
        if self.broker.scanner is not None:
            return
        if timer is None or when < timer.when():
            if timer is not None:
                timer.cancel()
            self._def_timer = self.broker.loop.call_at(when, self._expire_deferred)

    def _expire_deferred(self) -> None:
        self._def_timer = None
        self.process_deferred(self.broker.loop.time())
        heap = self._def_heap
        if heap:
            self._def_timer = self.broker.loop.call_at(heap[0][0], self._expire_deferred)

    def process_deferred(self, now: float) -> bool:
        """nsqd's ``processDeferredQueue``: queue what is due by ``now``; True if any."""
        heap = self._def_heap
        due = False
        while heap and heap[0][0] <= now:
            _, _, msg = heapq.heappop(heap)
            if self.deferred.get(msg.id) is msg:
                del self.deferred[msg.id]
                due = True
                self._enqueue(msg)
        return due

    # -- administration --

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if not paused:
            self.pump()

    def empty(self) -> None:
        """Drop queued, in-flight and deferred messages; clients' in-flight counts go to 0."""
        self.queue.clear()
        self.in_flight.clear()
        self.deferred.clear()
        self._cancel_timers()
        for client in list(self.clients.values()):
            client.emptied()

    def _cancel_timers(self) -> None:
        for timer in (self._if_timer, self._def_timer):
            if timer is not None:
                timer.cancel()
        self._if_timer = self._def_timer = None
        self._if_heap.clear()
        self._def_heap.clear()

    def close(self, *, delete: bool) -> None:
        """Exit: close every client's socket; on delete also drop every message."""
        self.exiting = True
        for client in list(self.clients.values()):
            client.close_by_server()
        if delete:
            self.empty()
        self._cancel_timers()

    def drain_for_restart(self) -> None:
        """Like nsqd's flush on a clean exit: in-flight and deferred return to the queue."""
        for msg in sorted(self.in_flight.values(), key=lambda m: m.deadline):
            self.queue.append(msg)
        for msg in sorted(self.deferred.values(), key=lambda m: m.deadline):
            self.queue.append(msg)
        self.in_flight.clear()
        self.deferred.clear()
        self._cancel_timers()
        self.clients.clear()
        self._order = []
        self.exiting = False
        self.message_count = self.requeue_count = self.timeout_count = 0
