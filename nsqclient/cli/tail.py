"""``nsqclient tail``: print the messages of one or more topics as they arrive (as ``nsq_tail``).

Each topic gets a :class:`~nsqclient.aio.Reader` whose sink prints a whole delivered batch, flushes
stdout once, and only then FINs the batch: a message is acknowledged only after it was written.
By default the channel is ``tail-<random>#ephemeral``, which nsqd deletes when tail disconnects,
so tail never takes messages from a real consumer and leaves nothing behind. ``--requeue`` instead
holds every message shown and REQs them all on exit, so a live channel keeps every message.
Exit leaves nothing in flight: the Readers close gracefully, requeueing what was not shown.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import select
import stat
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from ..message import Message
from . import _common
from ._running import Stop, run_async

__all__ = ["add_parser"]

EXAMPLES = """\
examples:
  nsqclient tail --topic events                      # every new message, one per line
  nsqclient tail --topic events -n 10 --json         # ten messages as JSON lines, then exit
  nsqclient tail --topic a --topic b --print-topic   # two topics, each line says which
  nsqclient tail --topic events --channel billing --requeue -n 5
                                                     # peek at a live channel; it keeps all 5
"""


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "tail",
        parents=[parent],
        help="print messages from topics as they arrive (like nsq_tail)",
        description="Print messages from one or more topics as they arrive, binary-safe.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--topic",
        dest="topics",
        action="append",
        required=True,
        type=_common.topic_name,
        metavar="TOPIC",
        help="topic to read (repeat for several)",
    )
    p.add_argument(
        "--channel",
        type=_common.channel_name,
        help="channel (default: tail-<random>#ephemeral, deleted when tail exits)",
    )
    p.add_argument(
        "--max-in-flight",
        type=_common.positive_int,
        default=200,
        metavar="N",
        help="RDY per topic (200)",
    )
    p.add_argument(
        "-n", dest="count", type=_common.positive_int, metavar="N", help="exit after N messages"
    )
    p.add_argument("--print-topic", action="store_true", help="prefix each message with 'TOPIC | '")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: topic, id, attempts, timestamp (ns), nsqd, body, "
        "encoding ('utf-8', or 'base64' when the body is not UTF-8)",
    )
    fmt.add_argument("--pretty", action="store_true", help="indent bodies that are JSON")
    p.add_argument(
        "--delimiter",
        type=_common.delimiter,
        default=b"\n",
        metavar="BYTES",
        help=r"written after each raw or pretty body (default \n; escapes like \0 work)",
    )
    p.add_argument(
        "--requeue",
        action="store_true",
        help="REQ instead of FIN: hold each message shown and requeue all of them on exit "
        "(at most --max-in-flight messages, then exit)",
    )
    _common.add_address_flags(p, ["nsqd_tcp", "lookupd_http"])
    _common.add_connection_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_async(lambda stop: tail(args, stop))


class Printer:
    """Formats and writes delivered batches; answers each message once it was written."""

    def __init__(
        self, args: argparse.Namespace, out: BinaryIO, limit: int | None, on_done: Any
    ) -> None:
        self.out = out
        self.limit = limit
        self.json = bool(args.json)
        self.pretty = bool(args.pretty)
        self.print_topic = bool(args.print_topic)
        self.delimiter: bytes = args.delimiter
        self.requeue = bool(args.requeue)
        self.shown = 0
        self.closed = False
        self.error: OSError | None = None
        self._on_done = on_done

    def show(self, topic: str, messages: list[Message]) -> None:
        shown: list[Message] = []
        parts: list[bytes] = []
        limit = self.limit
        for msg in messages:
            if self.closed or (limit is not None and self.shown >= limit):
                # not shown: left unanswered for the graceful close, which REQs it after RDY 0
                # (a REQ now would have nsqd deliver it again at once, and again...)
                continue
            parts.append(self._format(topic, msg))
            shown.append(msg)
            self.shown += 1
        if not shown:
            return
        try:
            self.out.write(b"".join(parts))
            self.out.flush()
        except OSError as exc:  # e.g. `| head` went away: the close requeues the batch
            self.error = exc
            self._finish()
            return
        if not self.requeue:
            for msg in shown:
                msg.fin()
        # --requeue: left unanswered; the graceful close REQs everything still in flight
        if limit is not None and self.shown >= limit:
            self._finish()

    def reader_gone(self) -> None:
        """Whoever read our output left (``| head``): stop, as a failed write would."""
        self.error = BrokenPipeError("stdout was closed")
        self._finish()

    def _finish(self) -> None:
        self.closed = True
        self._on_done()

    def _format(self, topic: str, msg: Message) -> bytes:
        body = msg.body
        if self.json:
            record: dict[str, Any] = {
                "topic": topic,
                "id": msg.id.decode("ascii", "replace"),
                "attempts": msg.attempts,
                "timestamp": msg.timestamp,
                "nsqd": msg.nsqd_address,
            }
            try:
                record["body"] = body.decode("utf-8")
                record["encoding"] = "utf-8"
            except UnicodeDecodeError:
                record["body"] = base64.b64encode(body).decode("ascii")
                record["encoding"] = "base64"
            return json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
        if self.pretty:
            body = _pretty(body)
        prefix = topic.encode() + b" | " if self.print_topic else b""
        return b"".join((prefix, body, self.delimiter))


def _pretty(body: bytes) -> bytes:
    try:
        value = json.loads(body)
    except ValueError:  # not JSON (UnicodeDecodeError is a ValueError too): as it is
        return body
    return json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8")


class TopicSink:
    """A Reader's sink: hands each delivered batch straight to the printer (nothing queued)."""

    def __init__(self, printer: Printer, topic: str) -> None:
        self._printer = printer
        self._topic = topic

    def put(self, messages: list[Message]) -> None:
        self._printer.show(self._topic, messages)

    def take_undelivered(self) -> list[Message]:
        return []

    def forget(self, responder: object) -> None:
        pass  # nothing is kept: each batch was printed as it came

    def flush(self) -> None:
        pass

    def __len__(self) -> int:
        return 0

    def close(self) -> None:
        pass


def watch_pipe_reader(fd: int, on_gone: Callable[[], None]) -> Callable[[], None] | None:
    """When ``fd`` is a pipe, call ``on_gone`` once its reader closes it, so ``tail | head``
    ends with head instead of at the next message's failed write. Returns the unwatch."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
    except OSError:
        return None
    loop = asyncio.get_running_loop()

    def check() -> None:
        # a pipe's write end never becomes readable: the selector wakes us for its error state
        loop.remove_reader(fd)
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0)):
            on_gone()

    try:
        loop.add_reader(fd, check)
    except (OSError, ValueError, NotImplementedError):
        return None

    def unwatch() -> None:
        loop.remove_reader(fd)

    return unwatch


async def tail(args: argparse.Namespace, stop: Stop) -> int:
    from ..aio import Reader

    addrs = _common.resolve_addresses(args, ["nsqd_tcp", "lookupd_http"], default="nsqd_tcp")
    limit: int | None = args.count
    max_in_flight: int = args.max_in_flight
    if limit is not None:
        max_in_flight = min(max_in_flight, limit)
    if args.requeue:
        limit = max_in_flight if limit is None else min(limit, max_in_flight)
    # max_attempts=0: tail never gives up on (and so never FINs unseen) a much-retried message
    config = _common.config_from_args(args, max_in_flight=max_in_flight, max_attempts=0)
    channel = args.channel or f"tail-{secrets.token_hex(3)}#ephemeral"
    if addrs["lookupd_http"]:
        await _common.check_lookupds(args, addrs["lookupd_http"])
    else:
        await _common.require_reachable(addrs["nsqd_tcp"], config.sec.dial_timeout)
    done = asyncio.Event()
    printer = Printer(args, sys.stdout.buffer, limit, done.set)
    readers = [
        Reader(
            topic,
            channel,
            nsqd_tcp_addresses=addrs["nsqd_tcp"] or None,
            lookupd_http_addresses=addrs["lookupd_http"] or None,
            config=config,
            sink=TopicSink(printer, topic),
        )
        for topic in dict.fromkeys(args.topics)
    ]
    unwatch = watch_pipe_reader(sys.stdout.fileno(), printer.reader_gone)
    try:
        await asyncio.gather(*(reader.start() for reader in readers))
        if args.requeue:
            for reader in readers:
                reader.enable_auto_touch()  # held messages must not time out on nsqd meanwhile
        waits = [asyncio.ensure_future(done.wait()), asyncio.ensure_future(stop.event.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
    finally:
        if unwatch is not None:
            unwatch()
        printer.closed = True  # whatever arrives now is left for the close to requeue
        await asyncio.gather(
            *(reader.graceful_close(requeue_in_hand=True) for reader in readers),
            return_exceptions=True,
        )
    if printer.error is not None and not isinstance(printer.error, BrokenPipeError):
        raise printer.error
    if stop.requested and not done.is_set():
        return stop.exit_code
    return _common.EXIT_OK
