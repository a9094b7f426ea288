"""The deliberate inlined copies stay equal to the code they copy (a fix in one reaches both).

``Connection.request`` is ``Connection.request_to`` with a future made and returned, inlined
because it is the PUB hot path (no extra call per publish). Compared as syntax trees, so
comments and docstrings may differ, statements may not.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from nsqclient.aio import connection

pytestmark = pytest.mark.timeout(10)


def _body(cls: str, method: str) -> list[ast.stmt]:
    # from the module's source, not the live attribute (which a test may have wrapped)
    tree = ast.parse(inspect.getsource(connection))
    [klass] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    [fn] = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method]
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return body


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
