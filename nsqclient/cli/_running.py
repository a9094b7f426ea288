"""Running an async command: SIGINT and SIGTERM become a :class:`Stop` the command watches,
so ``tail`` and ``pub`` end promptly and cleanly (requeue, wait for acknowledgements) and exit
with 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM). A second signal cancels the
command outright.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Stop", "run_async"]


class Stop:
    """Set by SIGINT or SIGTERM; remembers which, for the exit code. A second signal cancels
    the command's task, cutting a graceful close short."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signum: int | None = None
        self._task: asyncio.Task[Any] | None = None

    def __call__(self, signum: int) -> None:
        if self.signum is not None and self._task is not None:
            self._task.cancel()
            return
        self.signum = signum
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    async def wait(self, timeout: float | None = None) -> bool:
        """True when a stop was requested within ``timeout`` seconds."""
        if self.event.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self.event.wait()
        except TimeoutError:
            return False
        return True


def run_async(command: Callable[[Stop], Awaitable[int]]) -> int:
    """Run ``command`` on a fresh event loop with SIGINT/SIGTERM turned into ``Stop``."""

    async def main() -> int:
        stop = Stop()
        stop._task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, stop, sig)
        try:
            return await command(stop)
        except asyncio.CancelledError:
            if stop.signum is None:
                raise
            return stop.exit_code
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    return asyncio.run(main())
