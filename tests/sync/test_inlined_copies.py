"""Copies inlined on per-message paths stay equal to their originals, a fix in one reaching
both; compared as syntax trees after the copy's renames.

* ``ThreadResponder.message_fin`` is ``ResponseBatcher.submit`` (the FIN of ``for msg in
  reader: msg.fin()``; the batcher reached as ``batcher``, the message queued as itself rather
  than as ``(fn, args)``)."""

from __future__ import annotations

import ast

import pytest

from nsqclient.sync import bridge
from tests.support import method_body

pytestmark = pytest.mark.timeout(10)


def _body(cls: str, method: str) -> list[ast.stmt]:
    return method_body(bridge, cls, method)


def test_the_inlined_fin_is_submit() -> None:
    inlined = _body("ThreadResponder", "message_fin")
    assert ast.unparse(inlined[0]) == "batcher = self._batcher"
    text = "\n".join(ast.unparse(s) for s in inlined[1:])
    # the copy's renames, undone
    text = text.replace("batcher.", "self.")
    text = text.replace("self.conn.message_fin(msg)", "fn(*args)")
    text = text.replace("self.ops.append(msg)", "self.ops.append((fn, args))")
    submit = "\n".join(ast.unparse(s) for s in _body("ResponseBatcher", "submit"))
    assert text == submit, (
        "ThreadResponder.message_fin and ResponseBatcher.submit differ beyond the inlining: "
        "apply the same change to both"
    )
