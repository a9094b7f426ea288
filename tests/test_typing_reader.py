"""mypy sees a Reader without its channel, and a client imported from the top package (issue 51).

The asyncio Reader typed ``topic`` and ``channel`` as ``str | None = None`` (for asyncnsq's
two-step start, now :class:`nsqclient.compat.AsyncnsqReader`'s alone), so a missing channel
passed mypy and failed at ``start()``. And ``from nsqclient import Reader`` must stay a mypy
error: the package's ``__getattr__``, which says at run time where the name lives, is hidden
from type checkers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import nsqclient

pytestmark = pytest.mark.timeout(240)

SNIPPET = """
from nsqclient import SyncWriter  # flagged: import
from nsqclient.aio import Reader
from nsqclient.compat import create_reader
from nsqclient.sync import SyncReader

A = ["127.0.0.1:4150"]


async def consumers() -> None:
    Reader("t", nsqd_tcp_addresses=A)  # flagged: channel
    Reader(topic="t", nsqd_tcp_addresses=A)  # flagged: channel
    SyncReader("t", nsqd_tcp_addresses=A)  # flagged: channel
    Reader("t", "c", nsqd_tcp_addresses=A)
    SyncReader("t", "c", lookupd_http_addresses=A)
    reader = await create_reader(A)  # asyncnsq's form: the channel comes with subscribe()
    await reader.subscribe("t", "c")
"""


def test_mypy_flags_a_missing_channel_and_a_client_imported_from_the_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = pytest.importorskip("mypy.api")
    (tmp_path / "snippet.py").write_text(SNIPPET)
    root = Path(nsqclient.__file__).resolve().parents[1]
    if root.name != "site-packages":  # an editable checkout: point mypy at it
        monkeypatch.setenv("MYPYPATH", str(root))
    out, err, _status = api.run(
        [
            "--strict",
            "--ignore-missing-imports",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(tmp_path / "snippet.py"),
        ]
    )
    flagged = {int(line.split(":")[1]): line for line in out.splitlines() if "snippet.py" in line}
    lines = SNIPPET.splitlines()
    expected = {
        i + 1: text.split("# flagged: ")[1] for i, text in enumerate(lines) if "# flagged" in text
    }
    assert sorted(flagged) == sorted(expected), out + err
    for number, why in expected.items():
        wanted = 'Missing positional argument "channel"' if why == "channel" else '"SyncWriter"'
        assert wanted in flagged[number], flagged[number]
