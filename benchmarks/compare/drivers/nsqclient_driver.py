"""nsqclient's driver for the comparison (``python -m benchmarks.compare``): ``--mode aio|sync``.

Runs with the main virtualenv's python and measures through the same functions as
``nsqclient bench`` itself, each client's fast path:

* aio: PUB from ``--concurrency`` tasks; MPUB from ``--mpub-concurrency`` tasks; e2e and drain with
  ``set_message_handler(fn, direct=True)``.
* sync: ``pub_nowait()``/``mpub_nowait()`` with that many futures outstanding from one thread;
  e2e and drain with ``for msg in SyncReader(...)``.

``--coalesce`` gives every Writer ``coalesce=True`` (the ``nsqclient-*-coalesced`` rows).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

try:
    from . import _common as common
except ImportError:  # run as a script
    import _common as common  # type: ignore[import-not-found, no-redef]

from nsqclient import __version__
from nsqclient.benchmark.params import Params
from nsqclient.benchmark.scenarios import measure_drain, measure_e2e, measure_mpub, measure_pub
from nsqclient.benchmark.sync_scenarios import (
    measure_sync_drain,
    measure_sync_e2e,
    measure_sync_mpub_nowait,
    measure_sync_pub_nowait,
)

#: ``--coalesce``: every Writer and SyncWriter of the run gets ``coalesce=True``
WRITER_OPTIONS: dict[str, Any] = {}


def _params(a: argparse.Namespace) -> Params:
    return Params(
        writer_options=dict(WRITER_OPTIONS),
        nsqd_tcp=[a.nsqd_tcp],
        topic=a.topic,
        channel=a.channel,
        messages=a.messages,
        payload_size=a.payload_size,
        concurrency=a.concurrency,
        batch_size=a.batch_size,
        mpub_concurrency=a.mpub_concurrency,
        max_in_flight=a.max_in_flight,
        timeout=a.timeout,
    )


def _aio(fn: Any) -> common.ScenarioFn:
    def run(a: argparse.Namespace) -> dict[str, Any]:
        result: dict[str, Any] = asyncio.run(fn(_params(a)))
        return result

    return run


def _sync(fn: Any) -> common.ScenarioFn:
    def run(a: argparse.Namespace) -> dict[str, Any]:
        result: dict[str, Any] = fn(_params(a))
        return result

    return run


SCENARIOS: dict[str, dict[str, common.ScenarioFn]] = {
    "aio": {
        "pub": _aio(measure_pub),
        "mpub": _aio(measure_mpub),
        "e2e": _aio(measure_e2e),
        "drain": _aio(lambda p: measure_drain(p, "direct")),
    },
    "sync": {
        "pub": _sync(measure_sync_pub_nowait),
        "mpub": _sync(measure_sync_mpub_nowait),
        "e2e": _sync(lambda p: measure_sync_e2e(p, publisher="nowait")),
        "drain": _sync(lambda p: measure_sync_drain(p, "iter")),
    },
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    mode = "aio"
    if "--mode" in args:
        i = args.index("--mode")
        mode = args[i + 1]
        del args[i : i + 2]
    coalesced = "--coalesce" in args
    if coalesced:
        args.remove("--coalesce")
        WRITER_OPTIONS["coalesce"] = True
    if mode not in SCENARIOS:
        print(f"--mode must be aio or sync, got {mode!r}", file=sys.stderr)
        return 2
    return common.driver_main(
        client=f"nsqclient-{mode}" + ("-coalesced" if coalesced else ""),
        version=__version__,
        scenarios=SCENARIOS[mode],
        argv=args,
    )


if __name__ == "__main__":
    sys.exit(main())
