"""A Reader's handler side: the handler it runs, the worker tasks that run it, the tasks it starts.

:class:`HandlerTasks` keeps which handler a Reader runs and how (queue-backed workers, or
``direct`` on the read path), the worker tasks taking messages from the queue, and the tasks
handlers and ``on_giving_up`` hooks start (awaitables they return); it also gives up on a
message past ``max_attempts`` (the hook, or a warning, then FIN). A close waits for or cancels
all of them, and asks whether the task calling it is one of them. The handler contract itself
(FIN on return, REQ on raise) is :class:`~.delivery.HandlerRunner`'s.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..message import Message
from .delivery import Handler, HandlerRunner, MessageQueue, run_worker

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["HandlerTasks"]

log = logging.getLogger("nsqclient.reader")


class HandlerTasks:
    """The handler a Reader runs, its workers and the tasks it started. Loop thread only."""

    def __init__(self) -> None:
        self.runner: HandlerRunner | None = None
        #: the handler runs on the read path itself (no workers)
        self.direct = False
        self.concurrency = 1
        self.workers: set[asyncio.Task[None]] = set()
        #: handler awaitables and give-up hooks, awaited by a graceful close like the workers
        self.tasks: set[asyncio.Task[Any]] = set()
        #: the Reader's loop, once it started
        self.loop: asyncio.AbstractEventLoop | None = None

    def set(
        self,
        handler: Handler,
        *,
        auto_fin: bool,
        direct: bool,
        concurrency: int | None,
        queued: bool,
        config: Config | None = None,
    ) -> None:
        """Run ``handler`` from now on (ConfigError, and nothing changed, if the mode is not
        possible; ``queued``: the Reader has its own queue). The previous workers are cancelled;
        :meth:`start_workers` starts the new ones."""
        runner = HandlerRunner(handler, auto_fin=auto_fin, config=config)
        if not direct and not queued:
            raise ConfigError(
                "this Reader delivers to the sink it was given: only a direct=True handler can run"
            )
        if direct and runner.is_async:
            raise ConfigError(
                "direct=True needs a plain function; use the default queue-backed "
                "mode (with concurrency=N) for coroutine handlers"
            )
        if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self.runner = runner
        self.direct = direct
        self.concurrency = concurrency or 1
        self.cancel_workers()

    def clear(self) -> None:
        """Run no handler; the workers are cancelled (a coroutine handler running with them)."""
        self.runner = None
        self.direct = False
        self.cancel_workers()

    def cancel_workers(self) -> None:
        for task in self.workers:
            task.cancel()
        self.workers.clear()

    def start_workers(self, queue: MessageQueue) -> None:
        """As many workers as ``concurrency`` asks for, taking from ``queue``."""
        loop, runner = self.loop, self.runner
        assert loop is not None and runner is not None
        while len(self.workers) < self.concurrency:
            task = loop.create_task(run_worker(queue, runner), name="nsq-handler")
            self.workers.add(task)
            task.add_done_callback(self.workers.discard)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Handler work (awaited by graceful close within its timeout, like the workers)."""
        assert self.loop is not None
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def give_up(
        self, msg: Message, hook: Callable[[Message], Any] | None, max_attempts: int
    ) -> None:
        """``msg`` reached ``max_attempts``: tell ``hook`` (or log a warning), then FIN it."""
        try:
            if hook is None:
                log.warning(
                    "giving up on message %s after %d attempts (max_attempts=%d)",
                    msg.id.decode("ascii", "replace"),
                    msg.attempts,
                    max_attempts,
                )
            else:
                result = hook(msg)
                if inspect.isawaitable(result):
                    self.spawn(_await_and_log(result))
        except Exception:
            log.exception("on_giving_up hook failed")
        msg.fin()

    def runs(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` is a worker or a task a handler started."""
        return task in self.workers or task in self.tasks

    def cancel(self) -> None:
        for task in (*self.workers, *self.tasks):
            task.cancel()

    async def stop(self) -> None:
        """Cancel every worker and handler task and wait until they are done."""
        tasks = [*self.workers, *self.tasks]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def _await_and_log(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception:
        log.exception("on_giving_up hook failed")
