"""Issue 51, point 5: the README's and docs/service.md's publish-outcome tables list the same
exceptions with the same advice, each ``sent`` column is what the class says, and the retry
recipes (docs/service.md, docs/errors.md) retry exactly what the table says to retry: the
service.md recipe did not catch ``PublishFailedError``, which its own table said to retry.

The recipes are pure control flow over a publish that raises: each runs here against a stand-in
writer whose ``pub`` raises the exception under test once (no nsqd is involved or pretended).
"""

from __future__ import annotations

import ast
import re
import types
from typing import Any

import pytest

from nsqclient import errors

from .test_examples import ALL_BLOCKS, ROOT

pytestmark = pytest.mark.timeout(30)

HEADER = "| outcome | what happened | `exc.sent` | retry? |"
TABLE_PAGES = ["README.md", "docs/service.md"]
RECIPES = {"docs/service.md": "publish_reliably", "docs/errors.md": "publish"}


def outcome_table(page: str) -> list[str]:
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER)
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def rows(page: str) -> list[tuple[list[type[errors.NSQError]], str, str]]:
    """(exception classes, ``exc.sent`` cell, retry cell) of each row that names exceptions."""
    found = []
    for line in outcome_table(page)[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`(\w+)`", cells[0])
        classes = [getattr(errors, n) for n in names if isinstance(getattr(errors, n, None), type)]
        if classes:
            found.append((classes, cells[2], cells[3]))
    return found


def test_the_readme_and_the_service_page_have_one_table() -> None:
    assert outcome_table("README.md") == outcome_table("docs/service.md")


@pytest.mark.parametrize("page", TABLE_PAGES)
def test_every_row_states_its_classes_sent(page: str) -> None:
    named = set()
    for classes, sent, _ in rows(page):
        for cls in classes:
            named.add(cls)
            assert f"`{cls.sent}`" == sent, (page, cls.__name__, sent)
    for must in (errors.NoConnectionsError, errors.PublishFailedError, errors.ProtocolError):
        assert must in named, page


def _recipe(page: str, name: str) -> Any:
    """The page's recipe function, with its imports, compiled as a file would be (the rest of
    its block, which publishes to nsqd, is left out); ``time.sleep`` made instant."""
    block = next(b for b in ALL_BLOCKS if b.page == page and f"def {name}(" in b.source)
    tree = ast.parse(block.source)
    kept = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom | ast.FunctionDef)]
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(ast.Module(kept, []), block.id, "exec", dont_inherit=True), namespace)
    namespace["time"] = types.SimpleNamespace(sleep=lambda _seconds: None)
    return namespace[name]


class _RaisesOnce:
    """A writer stand-in: its first ``pub`` raises ``error``, the next ones return."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def pub(self, topic: str, body: bytes, timeout: float | None = None) -> None:
        self.calls += 1
        if self.calls == 1:
            raise self.error


def _instances(classes: list[type[errors.NSQError]]) -> list[errors.NSQError]:
    made = []
    for cls in classes:
        if cls is errors.InvalidInputError:  # the table names the branch: take a leaf too
            made.append(errors.InvalidTopicError("x"))
        made.append(cls("x"))
    return made


@pytest.mark.parametrize(("page", "name"), RECIPES.items())
def test_the_recipes_retry_what_the_table_says_to_retry(page: str, name: str) -> None:
    publish = _recipe(page, name)
    checked = 0
    for classes, _, advice in rows("docs/service.md"):
        retry = advice.startswith("yes")
        for error in _instances(classes):
            writer = _RaisesOnce(error)
            if retry:
                publish(writer, "topic", b"body")  # retried, then acknowledged
                assert writer.calls == 2, (page, type(error).__name__)
            else:
                with pytest.raises(type(error)):
                    publish(writer, "topic", b"body")
                assert writer.calls == 1, (page, type(error).__name__)
            checked += 1
    assert checked >= 12
