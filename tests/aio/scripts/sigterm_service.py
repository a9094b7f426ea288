"""Child process for the asyncio SIGTERM tests: handle slowly, print each body once handled.

    python sigterm_service.py MODE NSQD_TCP TOPIC CHANNEL

MODE ``service``: the example service (``examples/asyncio_service.py``) with a slow handler.
MODE ``iterate``: ``reader.stop_on_signals()`` and ``async for`` inside ``async with``.
The last line says whether the SIGTERM handler that was there before is back.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: examples/

from examples.asyncio_service import serve
from nsqclient.aio import Message, Reader

WORK = 0.02  # seconds per message: messages are in flight when SIGTERM lands


async def slow(msg: Message) -> None:
    await asyncio.sleep(WORK)
    print(msg.body.decode(), flush=True)


async def iterate(address: str, topic: str, channel: str) -> None:
    async with Reader(topic, channel, nsqd_tcp_addresses=[address], max_in_flight=10) as reader:
        reader.stop_on_signals()
        async for msg in reader:
            await slow(msg)
            await msg.fin()


def main() -> None:
    mode, address, topic, channel = sys.argv[1:5]
    if mode == "service":
        asyncio.run(serve(topic, channel, [address], handler=slow, concurrency=2, max_in_flight=10))
    else:
        asyncio.run(iterate(address, topic, channel))
    print(f"RESTORED {signal.getsignal(signal.SIGTERM) is signal.SIG_DFL}", flush=True)


if __name__ == "__main__":
    main()
