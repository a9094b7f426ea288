"""Typed keyword options: ConfigOptions stays equal to Config, and mypy refuses a misspelt or
mistyped option given to any client constructor (``**options: Any`` let them all through)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsqclient.config import Config
from nsqclient.options import ConfigOptions, ReaderOptions, WriterOptions

ROOT = Path(__file__).resolve().parents[1]


def test_config_options_lists_every_config_field_with_its_type() -> None:
    fields = [(f.name, str(f.type)) for f in dataclasses.fields(Config)]
    declared = [(name, ref.__forward_arg__) for name, ref in ConfigOptions.__annotations__.items()]
    missing = "\n".join(f"    {n}: {t}" for n, t in fields if (n, t) not in declared)
    assert declared == fields, (
        "nsqclient/options.py's ConfigOptions differs from Config's fields; "
        f"it should read, in Config's order:\n{missing or '(same fields, another order)'}"
    )
    assert not ConfigOptions.__required_keys__  # every option may be left out
    assert ReaderOptions is ConfigOptions and WriterOptions is ConfigOptions


SNIPPET = """\
from nsqclient import ConfigOptions
from nsqclient.aio import Reader, Writer
from nsqclient.sync import SyncReader, SyncWriter

A = ["127.0.0.1:4150"]
Reader("t", "c", nsqd_tcp_addresses=A, max_inflight=5)  # line 6: typo
Writer(A, publish_timout=5_000)  # line 7: typo
SyncReader("t", "c", nsqd_tcp_addresses=A, max_in_flight="5")  # line 8: wrong type
SyncWriter(A, max_pending_publish=10)  # line 9: typo
Reader("t", "c", nsqd_tcp_addresses=A, max_in_flight=5, msg_timeout=60_000)  # fine
SyncWriter(A, heartbeat_interval=30_000, snappy=True, tls_context=None)  # fine
options: ConfigOptions = {"max_in_flight": 10, "close_timeout": 5_000}
SyncReader("t", "c", nsqd_tcp_addresses=A, **options)  # fine
"""


@pytest.mark.timeout(300)
def test_mypy_refuses_misspelt_and_mistyped_options(tmp_path: Path) -> None:
    snippet = tmp_path / "options_snippet.py"
    snippet.write_text(SNIPPET)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-version=3.11",
            "--config-file=",  # the project's settings list packages; check this file only
            "--follow-imports=silent",
            "--show-error-codes",
            "--no-error-summary",
            # a cache of its own: the shared one reports a same-named module's errors under the
            # path of an earlier run's temporary folder
            f"--cache-dir={tmp_path / 'mypy-cache'}",
            str(snippet),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    errors = {
        int(line.split(":")[1])
        for line in done.stdout.splitlines()
        if line.startswith(str(snippet)) and ": error:" in line
    }
    assert errors == {6, 7, 8, 9}, textwrap.indent(done.stdout + done.stderr, "  ")
    assert 'did you mean "max_in_flight"' in done.stdout
