"""The documentation of the testing helpers stays true: the differences table in docs/testing.md
is DIFFERENCES.md's, and the README links to it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_differences_table_in_the_docs_matches_the_source() -> None:
    source = (REPO / "nsqclient" / "testing" / "embedded" / "DIFFERENCES.md").read_text()
    docs = (REPO / "docs" / "testing.md").read_text()
    rows = table(source)
    assert rows and rows[0].startswith("| Area |")
    start = docs.index("## Known differences")
    assert table(docs[start:]) == rows


def test_readme_links_the_testing_docs() -> None:
    readme = (REPO / "README.md").read_text()
    assert "(docs/testing.md)" in readme
    assert "## Testing your code" in readme
