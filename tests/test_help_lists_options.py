"""``help()`` of every client lists its options (issue 51: ``help(SyncWriter)`` did not; the
signature says only ``**options: Unpack[ConfigOptions]``). The listing is made from Config's
fields, so this checks that it is there, complete, with defaults and units."""

from __future__ import annotations

import dataclasses
import pydoc

import pytest

from nsqclient.aio import Reader, Writer
from nsqclient.config import Config
from nsqclient.sync import SyncReader, SyncWriter

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    "client", [Reader, Writer, SyncReader, SyncWriter], ids=lambda c: c.__name__
)
def test_help_lists_every_option_with_its_default(client: type) -> None:
    text = pydoc.render_doc(client, renderer=pydoc.plaintext)
    lines = {line.strip(" |") for line in text.splitlines()}
    for f in dataclasses.fields(Config):
        assert any(line.startswith(f"{f.name} = {f.default!r}") for line in lines), f.name
    assert "publish_timeout = 10000 ms" in lines and "max_msg_size = 1048576 bytes" in lines
    assert "max_frame_size = None (bytes)" in lines
    assert "docs/configuration.md" in text
