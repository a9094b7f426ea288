"""nsqclient.protocol does no I/O: it never imports asyncio, socket, ssl, threading, nor sleeps.

Two checks, and which one is authoritative:

* The AST check reads the import statements of every module in ``nsqclient/protocol/`` and of
  every ``nsqclient`` module they import in turn (``errors``, ``message``, ``config``), ignoring
  ``if TYPE_CHECKING:`` blocks, plus ``__import__``/``importlib`` calls and any ``time.sleep``.
  This is the rule we control, so it is the authoritative one.
* The runtime check imports ``nsqclient.protocol`` in a fresh interpreter under
  ``-X importtime`` and looks at what actually got loaded. Third-party dependencies (python-snappy
  and cramjam) are outside our control: if one of them pulled in, say, ``threading``, that would
  not make our layer do I/O, so such a module is tolerated *when the import chain shows the
  dependency loaded it*. A forbidden module loaded by our own code, or by the standard library on
  our behalf, fails. Today nothing forbidden is loaded at all; the test reports the chain if that
  ever changes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import nsqclient
import nsqclient.protocol

FORBIDDEN = {"asyncio", "socket", "ssl", "threading", "_thread", "selectors", "concurrent"}
PACKAGE_ROOT = Path(nsqclient.__file__).parent
PROTOCOL_DIR = Path(nsqclient.protocol.__file__).parent


def module_path(name: str) -> Path | None:
    """File of an nsqclient module given its dotted name, or None if it is not ours."""
    parts = name.split(".")
    if parts[0] != "nsqclient":
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class ImportCollector(ast.NodeVisitor):
    def __init__(self, this_module: str, is_package: bool) -> None:
        self.package = this_module if is_package else this_module.rpartition(".")[0]
        self.imports: list[tuple[str, int]] = []  # (absolute module, line)
        self.sleeps: list[int] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:  # only the runtime branch counts
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imports.append((alias.name, node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        self.imports.append((target, node.lineno))
        for alias in node.names:
            # `from . import commands` imports a submodule; `from time import sleep` is a sleep
            self.imports.append((f"{target}.{alias.name}", node.lineno))
            if target == "time" and alias.name == "sleep":
                self.sleeps.append(node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        dynamic = (isinstance(func, ast.Name) and func.id == "__import__") or (
            isinstance(func, ast.Attribute) and func.attr == "import_module"
        )
        if dynamic and node.args and isinstance(node.args[0], ast.Constant):
            self.imports.append((str(node.args[0].value), node.lineno))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "sleep" and isinstance(node.value, ast.Name) and node.value.id == "time":
            self.sleeps.append(node.lineno)
        self.generic_visit(node)


def scan(path: Path) -> ImportCollector:
    collector = ImportCollector(module_name(path), path.name == "__init__.py")
    collector.visit(ast.parse(path.read_text(), filename=str(path)))
    return collector


def test_protocol_modules_and_what_they_import_never_import_io_modules() -> None:
    todo = sorted(PROTOCOL_DIR.glob("*.py"))
    assert len(todo) >= 7, todo  # __init__, frames, commands, identify, handshake, ...
    seen: set[Path] = set()
    problems: list[str] = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        found = scan(path)
        for name, line in found.imports:
            if name.split(".")[0] in FORBIDDEN:
                problems.append(f"{path.relative_to(PACKAGE_ROOT.parent)}:{line} imports {name}")
            ours = module_path(name)
            if ours is not None and ours not in seen:
                todo.append(ours)
        where = path.relative_to(PACKAGE_ROOT.parent)
        problems.extend(f"{where}:{line} uses time.sleep" for line in found.sleeps)
    assert not problems, "\n".join(problems)
    scanned = {module_name(p) for p in seen}
    # the check really followed the layer's own dependencies
    assert {"nsqclient.errors", "nsqclient.message", "nsqclient.config"} <= scanned
    assert not any(
        n.startswith(("nsqclient.aio", "nsqclient.sync", "nsqclient.flow")) for n in scanned
    )


def test_the_ast_check_catches_what_it_should(tmp_path: Path) -> None:
    # guard against a checker that silently passes everything
    source = (
        "from __future__ import annotations\n"
        "import time\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import ssl\n"
        "import asyncio.events\n"
        "from socket import socket\n"
        "from time import sleep\n"
        "mod = __import__('threading')\n"
        "def f():\n"
        "    time.sleep(1)\n"
    )
    collector = ImportCollector("nsqclient.protocol.fake", False)
    collector.visit(ast.parse(source))
    names = {n.split(".")[0] for n, _ in collector.imports}
    assert names & FORBIDDEN == {"asyncio", "socket", "threading"}
    assert "ssl" not in names  # TYPE_CHECKING only
    assert collector.sleeps == [8, 11]


def _import_chains(stderr: str) -> dict[str, list[str]]:
    """Parse ``-X importtime`` output into module -> chain of importers (innermost first)."""
    rows: list[tuple[int, str]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        field = line.rsplit("|", 1)[1]
        if field.strip() == "imported package":
            continue
        name = field.rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((depth, name.strip()))
    chains: dict[str, list[str]] = {}
    for i, (depth, name) in enumerate(rows):
        chain = []
        want = depth - 1
        for later_depth, later_name in rows[i + 1 :]:  # a parent is printed after its children
            if later_depth == want:
                chain.append(later_name)
                want -= 1
            if want < 0:
                break
        chains[name] = chain
    return chains


def test_importing_the_protocol_layer_loads_no_io_module() -> None:
    code = (
        "import sys; before = set(sys.modules); import nsqclient.protocol; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = set(result.stdout.split())
    assert "nsqclient.protocol" in loaded
    chains = _import_chains(result.stderr)
    offenders = []
    for name in sorted(loaded):
        if name.split(".")[0] not in FORBIDDEN:
            continue
        chain = chains.get(name, [])
        third_party = [
            m
            for m in chain
            if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("nsqclient")
        ]
        if third_party:
            continue  # loaded by a dependency (see the module docstring)
        offenders.append(f"{name} <- {' <- '.join(chain) or '?'}")
    assert not offenders, "\n".join(offenders)
    # and the layer above is not dragged in either
    assert not any(m.startswith(("nsqclient.aio", "nsqclient.sync")) for m in loaded)


def test_import_chain_parser() -> None:
    sample = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       10 |         10 |       _weakrefset\n"
        "import time:       20 |         30 |     threading\n"
        "import time:       40 |         70 |   cramjam\n"
        "import time:       50 |        120 | snappy\n"
    )
    chains = _import_chains(sample)
    assert chains["threading"] == ["cramjam", "snappy"]
    assert chains["_weakrefset"] == ["threading", "cramjam", "snappy"]
    assert chains["snappy"] == []
