"""mypy sees ``mpub(topic, "abc")``: a ``str`` is an ``Iterable[str]``, so only the PEP 702
overload marking the single-body form makes the mistake visible before run time (with the
``deprecated`` error code, which users enable in their mypy config; pyright reports it too)."""

from __future__ import annotations

from pathlib import Path

import pytest

import nsqclient

pytestmark = pytest.mark.timeout(240)

SNIPPET = """
from nsqclient.aio import Writer
from nsqclient.http import NsqdHTTPClient, SyncNsqdHTTPClient
from nsqclient.sync import SyncWriter


async def aio(w: Writer, h: NsqdHTTPClient) -> None:
    await w.mpub("t", "abc")  # flagged
    await h.mpub("t", b"abc")  # flagged
    await w.mpub("t", [b"a", "b"], timeout=1.0)
    await h.mpub("t", (b"x" for _ in range(3)), binary=False)


def blocking(w: SyncWriter, h: SyncNsqdHTTPClient) -> None:
    w.mpub("t", bytearray(b"abc"))  # flagged
    w.mpub_nowait("t", memoryview(b"abc"))  # flagged
    h.mpub("t", "abc")  # flagged
    w.mpub("t", [b"a"])
    w.mpub_nowait("t", (b"a",))
    h.mpub("t", [b"a"])
"""


def test_mypy_flags_a_single_body_given_to_mpub_and_accepts_batches(
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
            "--enable-error-code",
            "deprecated",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(tmp_path / "snippet.py"),
        ]
    )
    flagged = [line for line in out.splitlines() if "snippet.py" in line]
    lines = SNIPPET.splitlines()
    expected = [i + 1 for i, text in enumerate(lines) if text.endswith("# flagged")]
    got = sorted({int(line.split(":")[1]) for line in flagged})
    assert got == expected, out + err
    assert all("wrap a single body in a list" in line for line in flagged), out
