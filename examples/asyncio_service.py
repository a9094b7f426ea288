"""An asyncio consumer service that stops cleanly on SIGTERM and Ctrl-C.

    NSQD_TCP_ADDRESSES=127.0.0.1:4150 NSQ_TOPIC=events python -m examples.asyncio_service

``docker stop``, systemd and Kubernetes stop a service with SIGTERM, then kill it after a grace
period (10 s, 90 s and 30 s by default). On SIGTERM this service stops taking deliveries
(RDY 0), lets the handlers that are running finish (up to ``close_timeout``, 30 s by default:
keep it below the grace period), hands every other message back to nsqd at once, and exits 0.
Nothing is left in flight for nsqd's ``msg_timeout`` to redeliver.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence

from nsqclient.aio import Message, Reader


async def handle(msg: Message) -> None:
    """The work. Returning FINs the message; raising requeues it with backoff."""
    print(msg.body.decode("utf-8", "replace"), flush=True)


async def serve(
    topic: str,
    channel: str,
    nsqd_tcp_addresses: Sequence[str],
    *,
    handler: Callable[[Message], Awaitable[None]] = handle,
    concurrency: int = 4,
    max_in_flight: int = 50,
) -> None:
    """Consume until SIGTERM or Ctrl-C, with ``concurrency`` handlers running at a time."""
    reader = Reader(
        topic, channel, nsqd_tcp_addresses=nsqd_tcp_addresses, max_in_flight=max_in_flight
    )
    reader.set_message_handler(handler, concurrency=concurrency)
    async with reader:
        reader.stop_on_signals(signal.SIGTERM, signal.SIGINT)  # the one line a service needs
        await reader.wait_closed()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(
        serve(
            os.environ.get("NSQ_TOPIC", "events"),
            os.environ.get("NSQ_CHANNEL", "service"),
            os.environ.get("NSQD_TCP_ADDRESSES", "127.0.0.1:4150").split(","),
        )
    )


if __name__ == "__main__":
    main()
