"""The Writer's one publish path: ``pub``'s inlined copy stays equal to ``_publish``, and every
door (pub, mpub, dpub, publish_nowait, the sync facade's tickets) settles through the same
accounting, against real nsqd (or the embedded server)."""

from __future__ import annotations

import inspect
import re

import pytest

from nsqclient.aio import Writer
from nsqclient.protocol import commands
from nsqclient.sync import SyncWriter
from nsqclient.testing.daemons import NsqdProcess

from .conftest import unique

pytestmark = pytest.mark.timeout(60)


def _block(fn: object, start: str) -> list[str]:
    source = inspect.getsource(fn)  # type: ignore[arg-type]
    body = source.split(start, 1)[1].split("# -- end --", 1)[0]
    return [line.strip() for line in body.strip().splitlines()]


def _settle_inlined(lines: list[str]) -> list[str]:
    """pub's lines with its inlined success settlement put back as the call it copies."""
    start = lines.index("# -- _settle(1, None, token) inlined (a call less per publish) --")
    end = lines.index("# -- end settle --")
    return [*lines[:start], "self._settle(1, None, token)", *lines[end + 1 :]]


def test_pubs_inlined_settlement_is_settles_success_path() -> None:
    lines = _block(Writer.pub, "# -- inlined from _publish --")
    start = lines.index("# -- _settle(1, None, token) inlined (a call less per publish) --")
    inlined = lines[start + 1 : lines.index("# -- end settle --")]
    body = [line.strip() for line in inspect.getsource(Writer._settle).splitlines()]
    body = body[body.index('when none is left), and tell the observer."""') + 1 :]
    # the success branch only (error None, count 1); pub read ``obs`` when the publish began
    skip = {"if error is None:", "else:", "self._failed += 1", "obs = self._obs", ""}
    expected = [
        line.replace("count", "1").replace("error)", "None)") for line in body if line not in skip
    ]
    assert inlined == expected


def test_the_coalesced_branch_settles_success_as_the_plain_path_does() -> None:
    source = [line.strip() for line in inspect.getsource(Writer.pub).splitlines()]

    def between(start: str, end: str) -> list[str]:
        return source[source.index(start) + 1 : source.index(end)]

    coalesced = between(
        "# -- coalesced: _settle(1, None, token) inlined --", "# -- end coalesced settle --"
    )
    plain = between(
        "# -- _settle(1, None, token) inlined (a call less per publish) --", "# -- end settle --"
    )
    assert coalesced == plain and coalesced


def test_pubs_inlined_copy_is_publish_with_the_single_connection_pick_inlined() -> None:
    inlined = _settle_inlined(_block(Writer.pub, "# -- inlined from _publish --"))
    original = _block(Writer._publish, "# -- inlined into pub --")
    # pub inlines the one-connection case of _pick; everything else is the same text
    pick = [
        "healthy = self._healthy",
        "if len(healthy) == 1 and healthy[0].state is _CONNECTED:",
        "conn: Connection | None = healthy[0]",
        "else:",
        "conn = self._pick()",
    ]
    start = inlined.index(pick[0])
    assert inlined[start : start + len(pick)] == pick
    inlined[start : start + len(pick)] = ["conn = self._pick()"]
    normalise = [re.sub(r"\bcount\b", "1", line) for line in original]
    assert inlined == normalise


def test_no_other_door_keeps_its_own_counters() -> None:
    """``published``/``failed``/``_outstanding -=`` change only in the settlement (and in
    pub's pinned copy of it)."""
    source = inspect.getsource(Writer)
    for pattern in (r"self\._published \+=", r"self\._outstanding -= ", r"self\._failed \+="):
        owners = {
            name
            for name, fn in inspect.getmembers(Writer, inspect.isfunction)
            if re.search(pattern, inspect.getsource(fn))
        }
        # pub: its inlined copy of _settle's success, pinned above
        assert owners <= {"_settle", "_refused", "pub"}, (pattern, owners)
    assert "publish_to" not in dir(Writer) and "publish_done" not in dir(Writer)
    assert source.count("request_to(") == 1  # the one dispatch


async def test_every_door_settles_through_the_same_accounting(nsqd: NsqdProcess) -> None:
    topic = unique()
    async with Writer([nsqd.tcp_address]) as writer:
        await writer.pub(topic, b"a")
        await writer.mpub(topic, [b"b", b"c"])
        await writer.dpub(topic, 0, b"d")
        fut = writer.publish_nowait(commands.pub(topic, b"e"))
        assert fut is not None
        await fut
        stats = writer.stats()
        assert stats["published"] == 5 and stats["failed"] == 0 and stats["outstanding"] == 0


def test_the_sync_facade_settles_its_tickets_in_the_core(nsqd: NsqdProcess) -> None:
    topic = unique()
    with SyncWriter([nsqd.tcp_address]) as writer:
        writer.pub(topic, b"a")
        writer.mpub_nowait(topic, [b"b", b"c"]).result(timeout=10)
        stats = writer.stats()
        assert stats["published"] == 3 and stats["outstanding"] == 0
