"""The arrows of the design, checked on the source: janus is imported by ``sync/bridge.py`` only
(it is in maintenance mode; one module keeps it swappable), the asyncio core and the HTTP helpers
know nothing of threads, janus or the sync facade, and address parsing does no I/O at all.

``nsqclient/http/`` lives outside ``aio/`` because it serves both faces: its async client may use
asyncio (through httpx), its blocking client is plain httpx, and neither reaches up into ``sync``.
"""

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


THREADS = {"threading", "_thread", "janus", "concurrent.futures"}
IO = {"asyncio", "socket", "ssl", "threading", "_thread", "selectors", "concurrent", "httpx"}


def test_the_asyncio_core_and_http_helpers_know_nothing_of_threads_or_the_facade() -> None:
    paths = [*(PACKAGE / "aio").rglob("*.py"), *(PACKAGE / "http").rglob("*.py")]
    assert len(paths) > 12, paths  # both trees were really scanned
    for path in paths:
        names = _imports(path)
        assert not names & THREADS, path
        assert not any("sync" in name.split(".") for name in names), path


def test_address_parsing_does_no_io_and_imports_nothing_of_the_client() -> None:
    names = _imports(PACKAGE / "addresses.py")
    assert ".errors" in names  # the scan really read the module
    assert not {name.split(".")[0] for name in names} & IO
    # plain parsing: nothing of aio, http or sync, so every layer may import it
    assert not [n for n in names if n.lstrip(".").split(".")[0] in {"aio", "http", "sync"}]
