"""mkdocs hooks for the documentation site.

* ``on_files``: placeholders for pages other branches bring (``PENDING``). The nav and the
  guides link to them; until they are merged a short placeholder keeps ``mkdocs build --strict``
  meaningful for everything else. A page that exists is never replaced, so once every entry has
  landed ``PENDING`` can be emptied.
* ``on_page_content``: the docstrings use Sphinx cross-reference roles (``:class:`~x.Y```),
  which Markdown renders literally; show them as plain code (``~`` keeps the last name only).
  It also fails the build when an API reference page shows a name of the layers (``NOT_PUBLIC``:
  a private keyword, asyncio.Protocol's callbacks, a private base class), which mkdocs.yml's
  options, the pages' filters and docs/_griffe.py keep out.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

PENDING: dict[str, tuple[str, str]] = {}

NOT_PUBLIC = (
    "_checked",
    "data_received",
    "connection_made",
    "FacadeLifecycle",
    "Bases: <code>Server",
)

_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):(<code>)(~)?([^<]*)(</code>)")


def on_files(files: Files, config: Any) -> Files:
    for src_uri, (title, what) in PENDING.items():
        if files.get_file_from_path(src_uri) is None:
            content = f"# {title}\n\nThis page arrives with {what}; it is not merged yet.\n"
            files.append(File.generated(config, src_uri, content=content))
    return files


def _plain(match: re.Match[str]) -> str:
    name = match.group(3)
    if match.group(2):
        name = name.rsplit(".", 1)[-1]
    return f"{match.group(1)}{name}{match.group(4)}"


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri.startswith("reference/"):
        shown = [name for name in NOT_PUBLIC if name in html]
        if shown:
            raise PluginError(f"{page.file.src_uri} shows names that are not public: {shown}")
    return _ROLE.sub(_plain, html)
