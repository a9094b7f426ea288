"""Child process for the exit tests: an asyncio program whose ``asyncio.run(main())`` ends with
a Writer or Reader still open.

    python exit_open.py KIND NSQD_TCP TOPIC MODE [LOOP]

KIND is ``writer`` or ``reader``. MODE ``up``: nsqd answers (the writer publishes one message
first, acknowledged). ``down``: nothing listens at NSQD_TCP, so a reconnect task is pending when
the loop ends. ``cut``: a FaultProxy on the same loop stands between the client and nsqd and
drops its connections while ``asyncio.run`` cancels every task, so the connection is lost (and
a reconnect scheduled) after the cancellation began. LOOP ``uvloop`` runs it with
``uvloop.run`` (default: ``asyncio.run``). Prints ``END`` when main() returns.
"""

from __future__ import annotations

import asyncio
import sys

from nsqclient.aio import Reader, Writer
from nsqclient.testing.faults import FaultProxy


async def main(kind: str, address: str, topic: str, mode: str) -> None:
    if mode == "cut":
        proxy = await FaultProxy(address).start()
        address = proxy.address

        async def cut_when_cancelled() -> None:
            try:
                await asyncio.Event().wait()
            finally:  # asyncio.run is cancelling every task: the connections drop now
                await proxy.close()

        cutter = asyncio.get_running_loop().create_task(cut_when_cancelled())
    # short backoff: a reconnect task is due again (and pending) when the loop ends
    options = {"reconnect_delay": 20, "max_reconnect_delay": 40}
    if kind == "writer":
        writer = Writer([address], **options)  # type: ignore[arg-type]
        await writer.start()
        if mode != "down":
            await writer.pub(topic, b"acknowledged")
    else:
        reader = Reader(topic, "c", nsqd_tcp_addresses=[address], **options)  # type: ignore[arg-type]
        await reader.start()
    await asyncio.sleep(0.05)  # the background tasks run
    print("END", flush=True)
    if mode == "cut":
        assert not cutter.done()  # still waiting: asyncio.run's cancellation runs its finally


if __name__ == "__main__":
    if sys.argv[5:] == ["uvloop"]:
        import uvloop

        uvloop.run(main(*sys.argv[1:5]))
    else:
        asyncio.run(main(*sys.argv[1:5]))
