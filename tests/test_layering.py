"""The import directions of docs/architecture.md, checked on the source of every module under
``nsqclient/`` (static: the import statements, read with ``ast``).

protocol <- flow <- aio <- sync; config, errors, message, addresses, http, options and stats
beside them (below aio, each other's peers); observability, compat and worker on top of the
clients (worker, the supervised processes, may use observability);
testing, cli and benchmark are applications the library never imports; the package ``__init__``
re-exports the library and nothing under it imports the package back. Every import counts,
those inside functions and ``if TYPE_CHECKING:`` too: an arrow is an arrow, whenever it runs.
The I/O rules (protocol loads no I/O module, only ``sync/bridge.py`` imports janus) are
``tests/protocol/test_protocol_layering.py`` and ``tests/sync/test_layering.py``.

A new top-level module or package fails :func:`test_every_module_belongs_to_a_layer` until it is
given its place here and on the architecture page.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import nsqclient

pytestmark = pytest.mark.timeout(30)

PACKAGE = Path(nsqclient.__file__).resolve().parent
ROOT = "nsqclient"  # the package __init__: the public names, re-exported

LAYERS = ("protocol", "flow", "aio", "sync")  # each imports only those before it
#: compat.pynsq: the stateless mixin of pynsq's Message names, which the message module builds
#: on (it imports nothing); the rest of compat (asyncnsq's Reader) sits on top of the clients
BESIDE = frozenset(
    {
        "config", "errors", "message", "addresses", "http", "options", "stats", "compat.pynsq",
        "observer",  # the declared interface the clients call; observability implements it
        "_version",
    }
)
#: over the clients, under the applications
ON_TOP = frozenset({"observability", "compat", "worker"})
APPLICATIONS = frozenset({"testing", "cli", "benchmark", "__main__"})
LIBRARY = frozenset(LAYERS) | BESIDE | ON_TOP

#: what each part may import (besides itself)
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": (BESIDE - {"http", "addresses"}),  # the wire: no I/O, nothing of the clients
    "flow": frozenset({"protocol"}) | (BESIDE - {"http", "addresses"}),
    "aio": frozenset({"protocol", "flow"}) | BESIDE,
    "sync": frozenset({"protocol", "flow", "aio"}) | BESIDE,
    **{name: frozenset({"protocol"}) | BESIDE for name in BESIDE},
    "observability": frozenset(LAYERS) | BESIDE | {ROOT},
    "compat": frozenset(LAYERS) | BESIDE,
    "worker": frozenset(LAYERS) | BESIDE | {"observability"},
    ROOT: LIBRARY,
    "testing": LIBRARY | {ROOT},
    "benchmark": LIBRARY | {ROOT},
    "cli": LIBRARY | {ROOT, "testing", "benchmark"},
    "__main__": frozenset({"cli"}),
}

#: (importing module, part it imports) that break a rule today and are being removed by work in
#: progress (issue 23); the lead deletes an entry once that work is merged. Never add one: a new
#: arrow against the architecture is a failure, not an entry.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    """Whether the dotted ``name`` is a module or package of nsqclient (not a name in one)."""
    base = PACKAGE.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(path: Path) -> Iterator[tuple[str, int]]:
    """(nsqclient module imported, line) for every import statement of the file."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                candidate = f"{source}.{alias.name}"
                yield (candidate if is_module(candidate) else source), node.lineno


def part_of(module: str) -> str:
    """``nsqclient.aio.reader`` -> ``aio``; the package itself -> :data:`ROOT`."""
    parts = module.split(".")
    if parts[1:3] == ["compat", "pynsq"]:
        return "compat.pynsq"
    return parts[1] if len(parts) > 1 else ROOT


def arrows() -> list[tuple[str, str, str]]:
    """(importing module, its part, imported part) for every import across parts, with line."""
    found: set[tuple[str, str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for target, line in imported_modules(path):
            if target.split(".")[0] != ROOT:
                continue
            source_part, target_part = part_of(importer), part_of(target)
            if source_part != target_part:
                found.add((f"{importer}:{line}", source_part, target_part))
    return sorted(found)


def test_the_scan_sees_the_known_arrows() -> None:
    seen = {(part, target) for _, part, target in arrows()}
    assert {("flow", "config"), ("aio", "flow"), ("sync", "aio"), ("cli", "benchmark")} <= seen
    assert len(list(PACKAGE.rglob("*.py"))) > 80  # every module was read


def test_every_module_belongs_to_a_layer() -> None:
    parts = {part_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    unplaced = parts - set(ALLOWED)
    assert not unplaced, f"give {sorted(unplaced)} a place in ALLOWED and docs/architecture.md"


def test_every_import_follows_the_architecture() -> None:
    bad = [
        f"{where} ({part} -> {target})"
        for where, part, target in arrows()
        if target not in ALLOWED.get(part, frozenset())
        and (where.partition(":")[0], target) not in KNOWN_VIOLATIONS
    ]
    assert bad == [], "imports against docs/architecture.md:\n" + "\n".join(bad)


def test_known_violations_are_still_there() -> None:
    """An entry whose import is gone is removed, so it cannot hide a new one later."""
    present = {(where.partition(":")[0], target) for where, _, target in arrows()}
    assert sorted(KNOWN_VIOLATIONS - present) == []


def test_no_import_loop_between_parts() -> None:
    graph: dict[str, set[str]] = {}
    for where, part, target in arrows():
        if (where.partition(":")[0], target) not in KNOWN_VIOLATIONS:
            graph.setdefault(part, set()).add(target)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import loop: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])


def module_graph() -> dict[str, set[str]]:
    """Every nsqclient module and the nsqclient modules it imports (any import statement:
    inside functions and ``if TYPE_CHECKING:`` too), a package's ``__init__`` as the package."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        targets = graph.setdefault(importer, set())
        for target, _line in imported_modules(path):
            if target.split(".")[0] == ROOT and target != importer and is_module(target):
                targets.add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (one path per circle found by a depth-first walk)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_circle_inside_a_package() -> None:
    """Issue 49: the publish wing's modules imported each other in a circle, closed by
    type-only imports that stood for real calls back up. No module may reach itself through
    the modules of its own package, whatever kind of import (a package's ``__init__``
    re-exporting its modules is not a circle: it sits above them)."""
    graph = module_graph()
    inside = {
        module: {
            t
            for t in targets
            if t.rpartition(".")[0] == module.rpartition(".")[0]  # siblings only
        }
        for module, targets in graph.items()
    }
    assert cycles(inside) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert cycles({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}}) == [
        ["a.x", "a.y", "a.z", "a.x"]
    ]
