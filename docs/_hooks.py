"""mkdocs hook: placeholders for pages that other branches bring (listed in ``PENDING``).

The nav and the guides link to them; until they are merged, a short placeholder keeps
``mkdocs build --strict`` meaningful for everything else. A page that exists is never replaced,
so once every entry has landed this hook does nothing and can be removed.
"""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

PENDING = {
    "service.md": ("Running as a service", "signal handling (`stop_on_signals()`)"),
}


def on_files(files: Files, config: Any) -> Files:
    for src_uri, (title, what) in PENDING.items():
        if files.get_file_from_path(src_uri) is None:
            content = f"# {title}\n\nThis page arrives with {what}; it is not merged yet.\n"
            files.append(File.generated(config, src_uri, content=content))
    return files
