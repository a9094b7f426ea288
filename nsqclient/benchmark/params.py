"""What one measurement needs (addresses, topic, sizes) and the live counter progress reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["HTTP_CONCURRENCY", "Measurement", "Params", "Probe"]

#: concurrent publishers (requests in flight) of the HTTP publish scenarios
HTTP_CONCURRENCY = 16

Measurement = dict[str, Any]
"""The fields a measurement returns, named as in the peer comparison's driver protocol
(``benchmarks/compare/drivers/_common.py`` in the repository):
``duration_s``, ``latency_ms``, ``publish_duration_s``, ``received``, ``missing``, ``duplicates``,
``publish_errors``, ``fin_errors``, ``timed_out``, ``notes``, plus scenario-specific ``extra``."""


class Probe:
    """A live count of finished messages, read by the progress line from another thread."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count: Callable[[], int] | None = None

    def read(self) -> int:
        count = self.count
        return count() if count is not None else 0


@dataclasses.dataclass
class Params:
    """One scenario's inputs. Readers use ``lookupd_http`` when it is given, else ``nsqd_tcp``."""

    nsqd_tcp: list[str]
    topic: str
    channel: str = "bench"
    messages: int = 10_000
    payload_size: int = 512
    concurrency: int = 256
    batch_size: int = 250
    mpub_concurrency: int = 4
    max_in_flight: int = 1024
    threads: int = 8
    timeout: float = 120.0
    lookupd_http: list[str] = dataclasses.field(default_factory=list)
    probe: Probe = dataclasses.field(default_factory=Probe)
    #: ``--reader-option`` overrides, given to every Reader a scenario creates
    reader_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: ``--writer-option`` overrides (e.g. ``coalesce``), given to every Writer and SyncWriter
    #: a publishing scenario creates
    writer_options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def reader_addresses(self) -> dict[str, Any]:
        """A Reader's address keyword, plus the ``reader_options`` overrides."""
        if self.lookupd_http:
            return {"lookupd_http_addresses": list(self.lookupd_http), **self.reader_options}
        return {"nsqd_tcp_addresses": list(self.nsqd_tcp), **self.reader_options}

    def replace(self, **changes: Any) -> Params:
        return dataclasses.replace(self, **changes)
