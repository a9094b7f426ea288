"""``nsqclient worker``: a supervised multi-process consumer, as ``celery worker`` or ``dramatiq``.

A Python consumer uses one core: a CPU-bound handler holds the GIL whatever the threads. A
worker runs the handler in N child processes (default: one per CPU), each with its own Reader
on the same topic and channel, under a supervisor that keeps N running, replaces the ones that
die or pass a recycling limit, stops them all gracefully on SIGTERM, and serves health
endpoints::

    import nsqclient.worker

    def handle(msg):  # return: FIN; raise: REQ with backoff; answered itself: left alone
        ...

    nsqclient.worker.run(handle, "events", "billing", processes=4,
                         nsqd_tcp_addresses=["127.0.0.1:4150"])

or from a shell, ``nsqclient worker tasks:handle --topic events --channel billing``. A plain
function runs on :class:`~nsqclient.sync.SyncReader` ``threads`` at a time per process; an
``async def`` on the asyncio :class:`~nsqclient.aio.Reader`, ``concurrency`` at a time.

**Fork after import, not spawn.** The supervisor imports the handler's module, then forks each
child from itself. Measured (``nsqclient.aio`` and ``nsqclient.sync`` imported, four children
each subscribing one Reader to nsqd, on the 2-core development VM under load): forked children
were subscribed 24-56 ms after the first fork, spawned ones (a fresh interpreter importing the
same modules) 0.8-1.0 s; a forked child's own memory (USS: private pages) was 5.2 MiB
(PSS 8.3 MiB), a spawned one's 16.1 MiB (PSS 16.7 MiB), and a spawned child pays its
application's imports again, which is the larger part for any real handler module. Fork also
makes a bad target fail once, in the supervisor, before any child exists. What fork asks for in
return is kept here: the supervisor is one thread with no event loop, no loop thread and no NSQ
connection, so a child inherits nothing it could share by mistake; every child closes the
supervisor's descriptors first and makes its own Reader. Connections the application opens at
import time would be shared by every child: open them in ``init(index)`` (``--init``), which
each child runs first (as gunicorn's ``post_fork`` or celery's ``worker_process_init``).

The parts: :mod:`.options` (what runs, checked once), :mod:`.supervisor`, :mod:`.child`,
:mod:`.link` (supervisor to child), :mod:`.health` (the HTTP endpoints), :mod:`.logs`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Unpack

from .options import Handler, Init, worker_options

if TYPE_CHECKING:
    from ..config import Config
    from ..options import ConfigOptions

__all__ = ["Handler", "Init", "run"]


def run(
    handler: Handler | str,
    topic: str,
    channel: str,
    *,
    processes: int | None = None,
    threads: int | None = None,
    concurrency: int | None = None,
    max_messages_per_child: int | None = None,
    max_memory_per_child: int | None = None,
    health_address: str | tuple[str, int] | None = None,
    init: Init | str | None = None,
    max_start_failures: int = 3,
    nsqd_tcp_addresses: Iterable[object] | str | None = None,
    lookupd_http_addresses: Iterable[object] | str | None = None,
    config: Config | None = None,
    **reader_options: Unpack[ConfigOptions],
) -> int:
    """Run ``handler`` on ``topic``/``channel`` in ``processes`` supervised child processes
    until SIGTERM or SIGINT; returns the exit status (0: every child stopped gracefully).

    ``handler``: a function taking a message (plain or ``async def``), or ``"module:function"``.
    ``processes`` defaults to the number of CPUs; ``threads`` (plain functions, default 1) or
    ``concurrency`` (``async def``, default 10) handlers run at once in each process.
    ``max_in_flight`` is per process (default: the handlers at once plus a quarter, at least
    one more; a ``config=`` with its own ``max_in_flight`` keeps it).
    ``max_messages_per_child`` / ``max_memory_per_child`` (MiB, resident) recycle a child:
    it stops taking messages, hands back what it has not started, finishes what it has, and
    is stopped once its replacement is ready. ``health_address`` (``"HOST:PORT"``, ``":8080"``)
    serves ``/healthz``, ``/readyz`` and ``/stats``. ``init(index)`` runs first in every child
    (open per-process resources there). The rest are Reader options, as for
    :class:`~nsqclient.aio.Reader` (``close_timeout`` bounds each child's graceful stop).

    Call it from the main thread of a process that has no other threads (it forks). Raises
    ConfigError for bad options or a target that cannot be imported (before any child starts),
    and :class:`~nsqclient.errors.WorkerError` after ``max_start_failures`` children in a row
    died during start-up. Sets up logging (stderr, INFO, each line naming its process) unless
    the application configured some. After a second SIGINT (stop at once) the status is 130.
    """
    from . import logs
    from .supervisor import Supervisor

    options = worker_options(
        handler,
        topic,
        channel,
        processes=processes,
        threads=threads,
        concurrency=concurrency,
        max_messages_per_child=max_messages_per_child,
        max_memory_per_child=max_memory_per_child,
        health_address_=health_address,
        init=init,
        max_start_failures=max_start_failures,
        nsqd_tcp_addresses=nsqd_tcp_addresses,
        lookupd_http_addresses=lookupd_http_addresses,
        config=config,
        **dict[str, Any](reader_options),
    )
    logs.setup(None)
    return Supervisor(options).run()
