"""The deliberate inlined copies stay equal to the code they copy (a fix in one reaches both).

``Connection.request`` is ``Connection.request_to`` with a future made and returned, inlined
because it is the PUB hot path (no extra call per publish). Compared as syntax trees, so
comments and docstrings may differ, statements may not.
"""

from __future__ import annotations

import ast

import pytest

from nsqclient.aio import connection
from tests.support import method_body

pytestmark = pytest.mark.timeout(10)


def _body(cls: str, method: str) -> list[ast.stmt]:
    """The method's statements after its shared-connection branch (``if self._door ...``),
    which differs between the two by what it returns."""
    body = method_body(connection, cls, method)
    first = body[0]
    assert isinstance(first, ast.If) and ast.unparse(first.test) == "self._guard is not None"
    return body[1:]


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == "fut":
            node.id = "waiter"
        return node


def test_request_is_request_to_with_a_future() -> None:
    request = _body("Connection", "request")
    made = [s for s in request if isinstance(s, ast.AnnAssign) and ast.unparse(s.target) == "fut"]
    returned = [s for s in request if isinstance(s, ast.Return)]
    assert len(made) == 1 and [ast.unparse(s) for s in returned] == ["return fut"]
    shared = [_Rename().visit(s) for s in request if s not in made and s not in returned]
    expected = _body("Connection", "request_to")
    assert [ast.dump(s) for s in shared] == [ast.dump(s) for s in expected], (
        "Connection.request and Connection.request_to differ beyond the future: "
        "apply the same change to both"
    )
