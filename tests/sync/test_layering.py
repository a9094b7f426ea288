"""The arrows of the design, checked on the source: janus is imported by ``sync/bridge.py`` only
(it is in maintenance mode; one module keeps it swappable), and the asyncio core knows nothing
of threads, janus or the sync facade."""

from __future__ import annotations

import ast
from pathlib import Path

import nsqclient

PACKAGE = Path(nsqclient.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found.add("." * node.level + module)
    return found


def test_janus_is_imported_by_the_bridge_only() -> None:
    users = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(name == "janus" or name.startswith("janus.") for name in _imports(path))
    )
    assert users == ["sync/bridge.py"]


def test_the_asyncio_core_knows_nothing_of_threads_or_the_facade() -> None:
    for path in (PACKAGE / "aio").rglob("*.py"):
        names = _imports(path)
        assert not names & {"threading", "_thread", "janus", "concurrent.futures"}, path
        assert not any("sync" in name.split(".") for name in names), path
