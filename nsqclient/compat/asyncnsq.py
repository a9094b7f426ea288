"""asyncnsq 2.x's entry points over the asyncio core: ``create_writer``, ``create_reader`` and the
Reader's two-step start (``subscribe`` after construction), kept off the core Reader so it has
one way to start (``Reader(topic, channel, ...)`` then ``start()`` or ``async with``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Unpack

from ..aio.delivery import Handler
from ..aio.options import validate_client_options
from ..aio.reader import GiveUpHook, Reader, ReaderState
from ..aio.writer import Writer
from ..config import Config
from ..errors import NSQError
from ..protocol.names import validate_channel, validate_topic

if TYPE_CHECKING:
    from ..options import ConfigOptions

__all__ = ["AsyncnsqReader", "create_reader", "create_writer"]

#: asyncnsq options that mean nothing here (the loop is the running one, the queue our own)
_ASYNCNSQ_IGNORED = ("loop", "queue", "consumer", "log_level")


class AsyncnsqReader(Reader):
    """A :class:`~nsqclient.aio.Reader` with asyncnsq's names: made by :func:`create_reader`,
    it may wait for :meth:`subscribe` to learn its topic and channel (so, unlike the core
    Reader's, its ``topic`` and ``channel`` may be left out)."""

    def __init__(
        self,
        topic: str | None = None,
        channel: str | None = None,
        *,
        nsqd_tcp_addresses: Iterable[object] | str | None = None,
        lookupd_http_addresses: Iterable[object] | str | None = None,
        message_handler: Handler | None = None,
        on_giving_up: GiveUpHook | None = None,
        config: Config | None = None,
        **options: Unpack[ConfigOptions],
    ) -> None:
        checked = validate_client_options(
            Config.from_options(config, **options),
            nsqd_tcp_addresses=nsqd_tcp_addresses,
            lookupd_http_addresses=lookupd_http_addresses,
            topic=topic,
            channel=channel,
            consumer=True,
        )
        self._init(checked, topic, channel, message_handler, on_giving_up, None)

    async def subscribe(self, topic: str, channel: str) -> None:
        """Choose the topic/channel (asyncnsq style) and start consuming."""
        if self.state is not ReaderState.NEW:
            raise NSQError(
                "this Reader is already subscribed; create another Reader for another topic/channel"
            )
        self.topic = validate_topic(topic).decode()
        self.channel = validate_channel(channel).decode()
        await self.start()

    async def connect(self) -> None:
        """Start if the topic is known, else wait for :meth:`subscribe`."""
        if self.topic is not None and self.channel is not None:
            await self.start()

    async def clean_close(self, timeout: float | None = None) -> None:
        """asyncnsq's name for :meth:`~nsqclient.aio.Reader.graceful_close`."""
        await self.graceful_close(timeout)

    async def wait_handler_tasks(self, timeout: float | None = None) -> bool:
        """Wait until every delivered message is answered; False if ``timeout`` passed first."""
        return await self.tracker.wait_empty(timeout)


async def create_reader(
    nsqd_tcp_addresses: Iterable[object] | str | None = None,
    max_in_flight: int = 1,
    lookupd_http_addresses: Iterable[object] | str | None = None,
    *,
    topic: str | None = None,
    channel: str | None = None,
    **options: Any,
) -> AsyncnsqReader:
    """Build a Reader (asyncnsq's signature); call ``await reader.subscribe(topic, channel)``."""
    reader = AsyncnsqReader(
        topic,
        channel,
        nsqd_tcp_addresses=nsqd_tcp_addresses,
        lookupd_http_addresses=lookupd_http_addresses,
        max_in_flight=max_in_flight,
        **options,
    )
    await reader.connect()
    return reader


async def create_writer(
    host: str = "127.0.0.1",
    port: int = 4150,
    *,
    nsqd_tcp_addresses: Iterable[object] | str | None = None,
    **options: Any,
) -> Writer:
    """Connect a Writer, with asyncnsq's signature ``create_writer(host=..., port=...)``."""
    for name in _ASYNCNSQ_IGNORED:
        options.pop(name, None)
    if nsqd_tcp_addresses is not None:
        writer = Writer(nsqd_tcp_addresses, **options)
    else:
        writer = Writer(host=host, port=port, **options)
    await writer.start()
    return writer
