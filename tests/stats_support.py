"""Check a ``stats()`` dict against its TypedDict in :mod:`nsqclient.stats`: exactly the declared
keys (none missing, none undeclared), each value of the declared type, nested entries included.

The docs promise that every key a stats dict carries is declared and documented; this is what
keeps that promise true at run time, where mypy cannot look.
"""

from __future__ import annotations

import types
import typing
from typing import Any, is_typeddict


def check_shape(value: Any, typ: Any, where: str = "stats") -> None:
    """Fail with the path of the first key or value that does not match ``typ``."""
    if is_typeddict(typ):
        assert isinstance(value, dict), f"{where}: {type(value).__name__}, not a dict"
        hints = typing.get_type_hints(typ)
        assert set(value) == set(hints), (
            f"{where}: undeclared keys {sorted(set(value) - set(hints))}, "
            f"missing keys {sorted(set(hints) - set(value))}"
        )
        assert set(hints) == typ.__required_keys__, f"{typ.__name__}: every key is always there"
        for key, hint in hints.items():
            check_shape(value[key], hint, f"{where}[{key!r}]")
        return
    origin = typing.get_origin(typ)
    if origin is list:
        (item,) = typing.get_args(typ)
        assert isinstance(value, list), f"{where}: {type(value).__name__}, not a list"
        for i, element in enumerate(value):
            check_shape(element, item, f"{where}[{i}]")
    elif origin in (typing.Union, types.UnionType):
        options = typing.get_args(typ)
        assert any(_matches(value, option) for option in options), f"{where}: {value!r}"
    else:
        assert _matches(value, typ), f"{where}: {value!r} is not {typ.__name__}"


def _matches(value: Any, typ: Any) -> bool:
    if typ is type(None):
        return value is None
    if typ is int:  # a bool is an int to isinstance, not to a reader of the docs
        return type(value) is int
    return isinstance(value, typ)
