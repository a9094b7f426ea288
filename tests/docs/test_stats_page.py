"""docs/stats.md lists every key of every stats TypedDict, with its declared type, and nothing
else: the page cannot drift from :mod:`nsqclient.stats` (the runtime dicts are checked against
the TypedDicts by tests/aio/test_stats.py and tests/sync/test_stats.py)."""

from __future__ import annotations

import itertools
import re
import typing
from pathlib import Path
from typing import Any

import nsqclient
import nsqclient.aio
import nsqclient.sync
from nsqclient import stats

PAGE = Path(__file__).resolve().parents[2] / "docs" / "stats.md"
# a sync TypedDict's table lists only the keys it adds to its base
BASES = {"SyncReaderStats": "ReaderStats", "SyncWriterStats": "WriterStats"}


def _render(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is list:
        return f"list[{_render(typing.get_args(hint)[0])}]"
    if origin is not None:  # a union
        return " or ".join(_render(arg) for arg in typing.get_args(hint))
    return "None" if hint is type(None) else str(hint.__name__)


def _page_tables() -> dict[str, dict[str, str]]:
    """TypedDict name -> {key: type} from each ``| key | type | unit | meaning |`` table; the
    table belongs to the first TypedDict named in the paragraph just before it."""
    tables: dict[str, dict[str, str]] = {}
    blocks = re.split(r"\n\s*\n", PAGE.read_text())
    for before, block in itertools.pairwise(blocks):
        if not block.startswith("| key | type |"):
            continue
        named = re.findall(r"`(\w+Stats)`", before)
        assert named, f"no TypedDict named before the table:\n{block[:80]}"
        rows = {}
        for line in block.splitlines()[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            key, typ = cells[0].strip("`"), cells[1].replace("`", "")
            rows[key] = typ
        assert named[0] not in tables, f"two tables for {named[0]}"
        tables[named[0]] = rows
    return tables


def test_every_stats_typeddict_has_a_table_with_its_keys_and_types() -> None:
    tables = _page_tables()
    assert set(tables) == set(stats.__all__)
    for name in stats.__all__:
        hints = typing.get_type_hints(getattr(stats, name))
        if name in BASES:
            base = typing.get_type_hints(getattr(stats, BASES[name]))
            hints = {k: v for k, v in hints.items() if k not in base}
        assert tables[name] == {k: _render(v) for k, v in hints.items()}, name


def test_every_key_has_a_docstring_with_its_unit_or_kind() -> None:
    """Each key's docstring exists (griffe reads them for the API reference) and every int key
    says what it is: "Count:", "Bytes:" or "Id:"; the source is the reference, so read it the
    way griffe does."""
    import griffe

    module = griffe.load("nsqclient.stats", search_paths=[str(PAGE.parents[1])])
    for name in stats.__all__:
        cls = module[name]
        for key, hint in typing.get_type_hints(getattr(stats, name)).items():
            if key not in cls.members:
                continue  # inherited: documented on the base
            doc = cls.members[key].docstring
            assert doc is not None and doc.value.strip(), f"{name}.{key} has no docstring"
            if hint is int:
                assert doc.value.startswith(("Count:", "Bytes:", "Id:")), f"{name}.{key}: unit?"


def test_the_types_have_one_home() -> None:
    """nsqclient.stats is where the types live; no package re-exports them."""
    for name in stats.__all__:
        for package in (nsqclient, nsqclient.aio, nsqclient.sync):
            assert not hasattr(package, name), f"{package.__name__}.{name}: import nsqclient.stats"
