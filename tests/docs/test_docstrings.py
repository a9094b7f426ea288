"""Every documented public name has a docstring, as the API reference sees it.

The reference is rendered by mkdocstrings from griffe's static reading of the source
(mkdocs.yml, ``show_if_no_docstring: false``), so a public member without a docstring silently
vanishes from it; so does one whose docstring is only assigned at run time. This walks what the
reference documents, read the same way: the ``__all__`` of the public modules and, for
each class, the public methods and properties its nsqclient classes define (inherited from
nsqclient bases included; dunders and the names mkdocs.yml filters out are not documented).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = (
    "nsqclient",
    "nsqclient.aio",
    "nsqclient.sync",
    "nsqclient.http",
    "nsqclient.compat",
    "nsqclient.testing",
    "nsqclient.worker",
)

# the names mkdocs.yml's `filters` hide from the reference: private ones (which include the
# ConnectionOwner hooks the connections call on their Reader or Writer)
_FILTERED = re.compile(r"^_")


def _documented_surface() -> Iterator[tuple[str, griffe.Object]]:
    package = griffe.load("nsqclient", search_paths=[str(ROOT)], resolve_aliases=True)
    seen: set[str] = set()
    for modname in PUBLIC_MODULES:
        module = package if modname == "nsqclient" else package[modname.split(".", 1)[1]]
        exports = module.exports
        assert exports, f"{modname} has no __all__ griffe can read"
        for name in exports:
            if _FILTERED.search(str(name)):
                continue
            obj = module[str(name)]
            target = obj.final_target if obj.is_alias else obj
            if not (target.is_class or target.is_function) or target.path in seen:
                continue  # constants such as __version__ carry no docstring of their own
            seen.add(target.path)
            yield f"{modname}.{name}", target
            if not target.is_class:
                continue
            for attr, member in target.all_members.items():
                if _FILTERED.search(attr):
                    continue
                real = member.final_target if member.is_alias else member
                if not (real.is_function or "property" in real.labels):
                    continue  # plain attributes: documented in the class docstring
                yield f"{modname}.{name}.{attr}", real


@pytest.mark.timeout(60)
def test_every_documented_public_name_has_a_docstring() -> None:
    surface = list(_documented_surface())
    names = {name for name, _ in surface}
    # the walk must reach methods and properties (own and inherited), or it proves nothing
    for expected in (
        "nsqclient.aio.Writer.stats",
        "nsqclient.aio.Reader.graceful_close",
        "nsqclient.sync.SyncWriter.mpub_nowait",
        "nsqclient.http.SyncNsqdHTTPClient.unpause_topic",
        "nsqclient.compat.AsyncnsqReader.subscribe",
        "nsqclient.testing.NsqdServer.freeze",
        "nsqclient.testing.FaultProxy.drop_next_frame",
    ):
        assert expected in names, expected
    missing = sorted(
        {obj.path for _, obj in surface if obj.docstring is None or not obj.docstring.value.strip()}
    )
    assert not missing, "public names without a docstring:\n  " + "\n  ".join(missing)
