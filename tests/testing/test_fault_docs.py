"""The example of docs/testing.md, "Testing your consumer against network faults", runs as a
user would run it: copied into a throwaway project and run by pytest in a subprocess, with the
``nsq_fault_proxy_factory`` fixture from the installed plugin (embedded backend: no binaries)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .test_plugin import INI, check, run_pytest, user_env

pytestmark = pytest.mark.timeout(120)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
SECTION = "## Testing your consumer against network faults"


def example_files() -> dict[str, str]:
    text = DOCS.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    blocks = re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)
    files = {}
    for block in blocks:
        first = block.splitlines()[0]
        assert first.startswith("# "), f"an example block without its file name: {first!r}"
        files[first[2:].strip()] = block
    return files


def test_the_fault_example_in_the_docs_passes(tmp_path: Path) -> None:
    files = example_files()
    assert set(files) == {"myapp/worker.py", "tests/test_worker_faults.py"}
    project = tmp_path / "proj"
    for name, code in files.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "pytest.ini").write_text(INI + "pythonpath = .\n")
    result = run_pytest(project, user_env(), "--nsq-backend=embedded")
    check(result, passed=1)
