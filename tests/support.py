"""Helpers shared by every part of the suite (one home: import them from here).

``unique()`` names topics and channels so that tests sharing a daemon never see each other's
messages; ``frozen()`` hangs a daemon (either backend) for the length of a ``with`` block.

``method_body`` reads a method's statements from its module's source, for the tests that pin
a deliberate inlined copy to the code it copies.

``wait_for`` (async) and ``wait_until`` (blocking) are the suite's only way to wait for a
condition: they poll until it holds and fail the test at a deadline, saying what was awaited
(``what``, else the condition's source line) and the last value seen. Never a bare sleep.
``predicate`` alone: wait until it returns something truthy, and return that. With ``until``:
call ``predicate`` as a probe and wait until ``until(value)`` holds (the value may be falsy,
e.g. a count of 0); return the value.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import time
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

DEADLINE = 20.0  # seconds a condition may take, by default, before the test fails
POLL = 0.02  # seconds between two looks at a condition


def unique(prefix: str = "t") -> str:
    """A topic or channel name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def frozen(nsqd: Any) -> Iterator[None]:
    """Freeze ``nsqd`` for the duration of the block (thawed afterwards, whatever happened):
    SIGSTOP for a real nsqd, a parked loop thread for the embedded one. Returns once it is
    frozen."""
    nsqd.freeze()
    try:
        yield
    finally:
        nsqd.thaw()


async def wait_for(
    predicate: Callable[[], Any],
    timeout: float = DEADLINE,
    what: str | None = None,
    *,
    until: Callable[[Any], object] | None = None,
    every: float = POLL,
) -> Any:
    """Poll ``predicate`` (plain or async) until the condition holds; return the last value.

    The condition is ``until(value)`` if given, else the value's truthiness. Fails the test
    after ``timeout`` seconds, naming ``what`` was awaited and the last value.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if until(value) if until is not None else value:
            return value
        if loop.time() >= deadline:
            _timed_out(timeout, what, until or predicate, value)
        await asyncio.sleep(every)


def wait_until(
    predicate: Callable[[], T],
    timeout: float = DEADLINE,
    what: str | None = None,
    *,
    until: Callable[[T], object] | None = None,
    every: float = POLL,
) -> T:
    """The blocking ``wait_for``: poll ``predicate`` in this thread (same rules)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if until(value) if until is not None else value:
            return value
        if time.monotonic() >= deadline:
            _timed_out(timeout, what, until or predicate, value)
        time.sleep(every)


def _timed_out(timeout: float, what: str | None, condition: Callable[..., Any], last: Any) -> None:
    pytest.fail(
        f"timed out after {timeout:g}s waiting for {what or _describe(condition)}"
        f" (last value: {last!r})"
    )


def _describe(condition: Callable[..., Any]) -> str:
    """The condition's source (a lambda's line), or its name: what the test waited for."""
    name = getattr(condition, "__name__", repr(condition))
    if name != "<lambda>":
        return str(name)
    try:
        source = inspect.getsource(condition)
    except (OSError, TypeError):
        return name
    return " ".join(source.split())[:300]


def method_body(module: ModuleType, cls: str, method: str) -> list[ast.stmt]:
    """The statements of ``cls.method`` as written in ``module``'s source (not the live
    attribute, which a test may have wrapped), without its docstring."""
    tree = ast.parse(inspect.getsource(module))
    [klass] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    [fn] = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method]
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body
