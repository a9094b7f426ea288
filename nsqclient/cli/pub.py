"""``nsqclient pub``: publish delimited input from stdin or files, or ``--body`` (as ``to_nsq``).

Input is read by a daemon thread in chunks (so signals are handled at once even while stdin is
idle) and split on the delimiter; each piece is one message, empty pieces are skipped (nsqd
refuses empty bodies) and counted. Publishes are pipelined through
:meth:`~nsqclient.aio.Writer.publish_nowait` (the Writer bounds what is outstanding) as PUB,
MPUB (``--batch``) or DPUB (``--defer``). Every message is acknowledged, or the command exits 1
saying how many were and were not; on SIGINT/SIGTERM reading stops and the acknowledgements of
what was already sent are awaited before exiting.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from ..protocol import commands
from . import _common
from ._input import bodies
from ._running import Stop, run_async

__all__ = ["add_parser"]

EXAMPLES = """\
examples:
  printf 'one\\ntwo\\n' | nsqclient pub --topic events       # two messages
  nsqclient pub --topic events --body '{"hello": 1}'       # one message
  nsqclient pub --topic events --batch 100 --rate 1000 big.log
  find . -print0 | nsqclient pub --topic files --delimiter '\\0'
"""

_ACK_WAIT = 10.0  # seconds to wait for outstanding acknowledgements on the way out


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pub",
        parents=[parent],
        help="publish lines from stdin or files, or one --body (like to_nsq)",
        description=(
            "Publish messages: one per delimited piece of stdin or the FILEs (empty pieces\n"
            "are skipped: nsqd refuses empty bodies), or --body. Exits 0 only when nsqd\n"
            "acknowledged every message; otherwise it says how many were and were not."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="read these ('-' is stdin)")
    p.add_argument("--topic", required=True, type=_common.topic_name, help="topic to publish to")
    p.add_argument(
        "--body",
        action="append",
        default=[],
        metavar="TEXT",
        help="publish TEXT (repeat for more) instead of reading input",
    )
    p.add_argument(
        "--delimiter",
        type=_common.delimiter,
        default=b"\n",
        metavar="BYTES",
        help=r"splits the input into messages (default \n; escapes like \0 work)",
    )
    p.add_argument(
        "--rate", type=_common.positive_float, metavar="N", help="at most N messages per second"
    )
    p.add_argument(
        "--batch",
        type=_common.positive_int,
        default=1,
        metavar="N",
        help="N messages per MPUB (default 1)",
    )
    p.add_argument("--defer", type=int, metavar="MS", help="DPUB: deliver each message after MS ms")
    _common.add_address_flags(p, ["nsqd_tcp", "lookupd_http"])
    _common.add_connection_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.defer is not None and args.batch > 1:
        raise _common.UsageError("--defer (DPUB) publishes one message at a time: drop --batch")
    if args.defer is not None and args.defer < 0:
        raise _common.UsageError("--defer takes milliseconds >= 0")
    if args.body and args.files:
        raise _common.UsageError("give --body or FILEs, not both")
    return run_async(lambda stop: pub(args, stop))


class Tally:
    """Acknowledged / failed counts, updated by the publish futures' callbacks."""

    def __init__(self) -> None:
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.error: BaseException | None = None
        self.idle = asyncio.Event()
        self.idle.set()
        self._pending = 0

    def track(self, fut: asyncio.Future[bytes], count: int) -> None:
        self.sent += count
        self._pending += 1
        self.idle.clear()
        fut.add_done_callback(lambda f: self._done(f, count))

    def _done(self, fut: asyncio.Future[bytes], count: int) -> None:
        self._pending -= 1
        if not self._pending:
            self.idle.set()
        error = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if error is None:
            self.acked += count
        else:
            self.failed += count
            if self.error is None:
                self.error = error


class Progress:
    """One rewritten line on stderr, only when stderr is a terminal."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._enabled = sys.stderr.isatty()
        self._start = self._last = time.monotonic()

    def update(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self._enabled or (not force and now - self._last < 0.5):
            return
        self._last = now
        t = self._tally
        rate = t.acked / max(now - self._start, 1e-6)
        sys.stderr.write(f"\rsent {t.sent}, acknowledged {t.acked}, {rate:,.0f} msg/s ")
        if force:
            sys.stderr.write("\n")
        sys.stderr.flush()


async def pub(args: argparse.Namespace, stop: Stop) -> int:
    from ..aio import Writer
    from ..errors import NSQError

    addrs = _common.resolve_addresses(args, ["nsqd_tcp", "lookupd_http"], default="nsqd_tcp")
    config = _common.config_from_args(args)
    writer = Writer(
        addrs["nsqd_tcp"] or None,
        lookupd_http_addresses=addrs["lookupd_http"] or None,
        config=config,
    )
    tally = Tally()
    progress = Progress(tally)
    skipped = [0]
    topic: str = args.topic
    batch: list[bytes] = []
    started = time.monotonic()

    async def send(payload: list[bytes]) -> None:
        if args.defer is not None:
            data = commands.dpub(topic, args.defer, payload[0], max_msg_size=config.max_msg_size)
        elif len(payload) == 1:
            data = commands.pub(topic, payload[0], max_msg_size=config.max_msg_size)
        else:
            data = commands.mpub(
                topic,
                payload,
                max_msg_size=config.max_msg_size,
                max_body_size=config.max_body_size,
            )
        if args.rate:  # pace by messages sent so far
            due = started + tally.sent / args.rate - time.monotonic()
            if due > 0 and await stop.wait(due):
                return
        while (fut := writer.publish_nowait(data, len(payload))) is None:
            # no connection or no free slot yet: wait (raises at publish_timeout), or stop
            ready = asyncio.ensure_future(writer.wait_ready())
            stopped = asyncio.ensure_future(stop.event.wait())
            try:
                await asyncio.wait((ready, stopped), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                if not ready.done():
                    ready.cancel()
            if not ready.done() or ready.cancelled():
                return  # stopped: this payload was never sent
            ready.result()
        tally.track(fut, len(payload))
        progress.update()

    try:
        if addrs["lookupd_http"]:
            await _common.check_lookupds(args, addrs["lookupd_http"])
        else:
            await _common.require_reachable(addrs["nsqd_tcp"], config.sec.dial_timeout)
        await writer.start()
        batch_bytes = 0
        room = config.max_body_size - 4  # an MPUB body: a count, then 4 + len per message
        async for body in bodies(args, stop, skipped):
            if stop.requested or tally.error is not None:
                break
            if batch and batch_bytes + 4 + len(body) > room:  # keep MPUB under max_body_size
                payload, batch, batch_bytes = batch, [], 0
                await send(payload)
            batch.append(body)
            batch_bytes += 4 + len(body)
            if len(batch) >= args.batch:
                payload, batch, batch_bytes = batch, [], 0
                await send(payload)
        if batch and not stop.requested and tally.error is None:
            await send(batch)
    except (NSQError, OSError) as exc:
        if tally.error is None:
            tally.error = exc
    finally:
        try:
            async with asyncio.timeout(_ACK_WAIT):
                await tally.idle.wait()
        except TimeoutError:
            pass
        await writer.graceful_close(timeout=1.0)
        progress.update(force=True)
    unacked = tally.sent - tally.acked
    note = f" ({skipped[0]} empty skipped)" if skipped[0] else ""
    if tally.error is not None:
        _common.report(
            args.debug,
            f"nsqclient pub: error: {_describe(tally.error)}; {tally.acked} messages published "
            f"and acknowledged, {unacked} sent but not acknowledged{note}",
            tally.error,
        )
        return _common.EXIT_ERROR
    if stop.requested:
        sys.stderr.write(
            f"nsqclient pub: interrupted: {tally.acked} messages published and acknowledged, "
            f"{unacked} not acknowledged{note}\n"
        )
        return stop.exit_code
    if unacked:
        sys.stderr.write(f"nsqclient pub: error: {unacked} messages not acknowledged\n")
        return _common.EXIT_ERROR
    return _common.EXIT_OK


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename:
        return f"cannot read {error.filename}: {error.strerror}"
    return str(error) or type(error).__name__
