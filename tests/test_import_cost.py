"""What importing the clients loads: nothing that waits to be used (issue 51: import time).

``import nsqclient.sync`` (and ``nsqclient.aio``, ``nsqclient``) must not load the HTTP layer
(httpx and what it brings), the thread bridge's janus, IDENTIFY's setup and json, the jitter
source, compression or the option-name suggestions: each loads where it is first used. The list
is :data:`benchmarks.import_time.DEFERRED`, which the import-time benchmark reports too. Each
import runs in a fresh interpreter, since this one has loaded everything long ago.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from benchmarks.import_time import DEFERRED

pytestmark = pytest.mark.timeout(60)

_PROBE = """
import sys
{statement}
print(",".join(sorted(m for m in {deferred!r} if m in sys.modules)))
"""


def _deferred_loaded_by(statement: str) -> list[str]:
    """The deferred modules loaded once ``statement`` ran in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(statement=statement, deferred=DEFERRED)],
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    return [name for name in result.stdout.strip().split(",") if name]


@pytest.mark.parametrize(
    "statement",
    [
        "import nsqclient",
        "import nsqclient.aio",
        "import nsqclient.sync",
        "from nsqclient.aio import Message, MessageSink, MessageTracker, Reader, Writer",
        "from nsqclient.sync import SyncReader, SyncWriter, run_in_loop",
        "import nsqclient.protocol",
    ],
)
def test_importing_the_clients_loads_nothing_deferred(statement: str) -> None:
    assert _deferred_loaded_by(statement) == []


def test_the_deferred_modules_load_where_they_are_used() -> None:
    """The check above can fail: each deferred module is real, and using what needs it loads
    it (creating a Writer: IDENTIFY and json; the HTTP helpers: httpx; ...)."""
    missing = [name for name in DEFERRED if importlib.util.find_spec(name) is None]
    assert missing == []  # a misspelt name would pass the check above forever
    uses = "\n".join(
        [
            "import asyncio",
            "from nsqclient import Config, ConfigError",
            "from nsqclient.aio import Writer",
            "from nsqclient.flow.backoff import new_rng",
            "from nsqclient.protocol import DeflateCodec, SnappyCodec",
            "from nsqclient.sync.bridge import ThreadSink",
            "Writer('127.0.0.1:1')",  # validated when created: IdentifyOptions from the Config
            "new_rng()",
            "DeflateCodec(); SnappyCodec()",
            "try: Config.from_options(max_in_flihgt=1)",
            "except ConfigError: pass",
            "async def bridge(): ThreadSink(None).close()",
            "asyncio.run(bridge())",
            "import nsqclient.aio.handshake, nsqclient.http",
        ]
    )
    loaded = set(_deferred_loaded_by(uses))
    expected = {
        "nsqclient.protocol.identify",
        "json",
        "random",
        "zlib",
        "snappy",
        "difflib",
        "janus",
        "httpx",
        "nsqclient.http",
        "nsqclient.protocol.handshake",
    }
    assert expected <= loaded, sorted(expected - loaded)
