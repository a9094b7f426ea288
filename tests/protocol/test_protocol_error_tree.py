"""The exception classes in nsqclient.errors match the tree drawn in its docstring, exactly.

The docstring is the user-facing map of what to catch; this test keeps code and map in step.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass, field

import pytest

import nsqclient
from nsqclient import errors

_BRANCH = re.compile(r"^(?P<prefix>(?:│   |    )*)(?:├── |└── )(?P<rest>.*)$")
_CONTINUATION = re.compile(r"^(?P<prefix>(?:│   |    )*)(?P<rest>[A-Z].*)$")


@dataclass
class Node:
    name: str
    parent: str | None
    builtins: set[str] = field(default_factory=set)
    also: set[str] = field(default_factory=set)
    repeat: bool = False  # "Name ..." : listed again under a second parent


def parse_tree(doc: str) -> list[Node]:
    lines = doc.split("::", 1)[1].strip("\n").splitlines()
    lines = [line[4:] if line.startswith("    ") else line for line in lines]
    assert lines[0].strip() == "NSQError"
    nodes = [Node("NSQError", None)]
    stack = ["NSQError"]  # stack[d] = last name at depth d
    last_depth = 0
    for line in lines[1:]:
        if not line.strip():
            continue
        match = _BRANCH.match(line)
        if match:
            depth = len(match["prefix"]) // 4 + 1
        else:
            match = _CONTINUATION.match(line)
            assert match, f"cannot parse docstring line {line!r}"
            depth = last_depth  # more names at the same depth as the entry above
        rest = match["rest"]
        names_part = re.match(r"[A-Za-z, ]+?(?=\s{2,}|\s*\(|\s*\.\.\.|$)", rest)
        assert names_part, line
        names = [n.strip() for n in names_part.group(0).split(",") if n.strip()]
        tail = rest[names_part.end() :]
        paren = re.match(r"\s*\(([^)]*)\)", tail)
        extra_builtins: set[str] = set()
        also: set[str] = set()
        if paren:
            # "(ValueError)": a builtin category; "(ConnectError)" or "(also AuthError)": a
            # second parent inside the tree
            for word in paren.group(1).split(","):
                word = word.strip().removeprefix("also ").strip()
                if isinstance(getattr(builtins, word, None), type):
                    extra_builtins.add(word)
                else:
                    also.add(word)
        repeat = tail.strip().startswith("...")
        parent = stack[depth - 1]
        nodes.extend(Node(name, parent, extra_builtins, also, repeat) for name in names)
        del stack[depth:]
        stack.append(names[-1])
        last_depth = depth
    return nodes


TREE = parse_tree(errors.__doc__ or "")
EXCEPTION_NAMES = sorted(
    name
    for name in errors.__all__
    if isinstance(getattr(errors, name), type) and issubclass(getattr(errors, name), BaseException)
)


def nsq_bases(cls: type) -> set[str]:
    return {b.__name__ for b in cls.__bases__ if issubclass(b, errors.NSQError)}


def builtin_bases(cls: type) -> set[str]:
    return {
        b.__name__
        for b in cls.__bases__
        if not issubclass(b, errors.NSQError) and getattr(builtins, b.__name__, None) is b
    }


def test_parser_sees_the_whole_tree() -> None:
    names = {n.name for n in TREE}
    assert {
        "NSQError",
        "InvalidError",
        "SubscribeFailedError",
        "TouchFailedError",
        "ClosedError",
    } <= names
    assert len(TREE) >= 35


def test_every_exception_class_is_drawn_and_every_drawn_class_exists() -> None:
    drawn = {n.name for n in TREE}
    assert drawn == set(EXCEPTION_NAMES)
    for name in drawn:
        assert name in errors.__all__ or name == "NSQError"
    assert "NSQError" in errors.__dict__


@pytest.mark.parametrize("name", EXCEPTION_NAMES)
def test_class_matches_its_place_in_the_tree(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.NSQError)
    entries = [n for n in TREE if n.name == name]
    first = next(n for n in entries if not n.repeat)
    expected_parents = {n.parent for n in entries} | first.also
    expected_parents.discard(None)
    if name == "NSQError":
        assert cls.__bases__ == (Exception,)
        return
    assert nsq_bases(cls) == expected_parents, name
    # builtin categories: exactly the ones drawn in parentheses (ServerError subclasses and
    # others inherit theirs only through the drawn parent)
    assert builtin_bases(cls) == first.builtins, name
    for builtin_name in first.builtins:
        assert issubclass(cls, getattr(builtins, builtin_name))


def test_builtin_categories_are_inherited_as_documented() -> None:
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.InvalidBodyTypeError, TypeError)
    assert not issubclass(errors.InvalidBodyTypeError, ValueError)
    assert issubclass(errors.TLSError, ConnectionError)
    assert issubclass(errors.NSQTimeoutError, TimeoutError)
    assert not issubclass(errors.ServerError, ValueError)
    assert not issubclass(errors.ProtocolError, ValueError)


def test_one_rule_for_connectivity_errors() -> None:
    """Issue 51: NoConnectionsError was no ConnectionError while ConnectionClosedError was, so a
    view catching ConnectionError answered 500 exactly when nsqd was down. Every link failure
    below TransportError is a ConnectionError, every deadline a TimeoutError; nothing else is."""
    transport = [
        cls
        for name in EXCEPTION_NAMES
        if issubclass(cls := getattr(errors, name), errors.TransportError)
        and cls is not errors.TransportError
    ]
    assert errors.NoConnectionsError in transport
    for cls in transport:
        timeout = issubclass(cls, errors.NSQTimeoutError)
        assert issubclass(cls, TimeoutError) is timeout, cls
        assert issubclass(cls, ConnectionError) is not timeout, cls
    for name in EXCEPTION_NAMES:
        cls = getattr(errors, name)
        if issubclass(cls, ConnectionError | TimeoutError):
            assert issubclass(cls, errors.TransportError), cls


def test_top_level_package_exports_the_whole_tree() -> None:
    for name in EXCEPTION_NAMES:
        assert getattr(nsqclient, name) is getattr(errors, name)
    assert nsqclient.ConfigError is errors.ConfigError


def test_parser_rejects_a_wrong_tree() -> None:
    # the parser really reads structure: moving a class changes its recorded parent
    doc = """x

::

    NSQError
    ├── A (ValueError)                text
    │   ├── B, C
    │   │   D
    │   └── E (also F)
    ├── F
    │   └── E ...
    └── G
        └── H (B)                     a second parent drawn without "also"
"""
    tree = {(n.name, n.parent) for n in parse_tree(doc)}
    assert tree == {
        ("NSQError", None),
        ("A", "NSQError"),
        ("B", "A"),
        ("C", "A"),
        ("D", "A"),
        ("E", "A"),
        ("F", "NSQError"),
        ("E", "F"),
        ("G", "NSQError"),
        ("H", "G"),
    }
    nodes = {n.name: n for n in parse_tree(doc) if not n.repeat}
    assert nodes["A"].builtins == {"ValueError"} and nodes["A"].also == set()
    assert nodes["E"].also == {"F"} and nodes["E"].builtins == set()
    assert nodes["H"].also == {"B"} and nodes["H"].builtins == set()
