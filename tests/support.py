"""Helpers shared by every part of the suite (one home: import them from here).

``unique()`` names topics and channels so that tests sharing a daemon never see each other's
messages; ``frozen()`` hangs a daemon (either backend) for the length of a ``with`` block.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any


def unique(prefix: str = "t") -> str:
    """A topic or channel name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def frozen(nsqd: Any) -> Iterator[None]:
    """Freeze ``nsqd`` for the duration of the block (thawed afterwards, whatever happened):
    SIGSTOP for a real nsqd, a parked loop thread for the embedded one. Returns once it is
    frozen."""
    nsqd.freeze()
    try:
        yield
    finally:
        nsqd.thaw()
