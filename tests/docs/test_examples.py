"""Every Python example in the documentation runs, so the docs cannot drift from the code.

Each ```` ```python ```` block of the pages below is one test. Conventions for writers:

* Examples use the default local addresses: nsqd ``127.0.0.1:4150`` (HTTP ``:4151``), a second
  nsqd ``127.0.0.1:4250`` (HTTP ``:4251``), nsqlookupd ``127.0.0.1:4160`` (HTTP ``:4161``). The
  test replaces them with the addresses of a cluster it started (embedded server: two nsqd
  registered with one nsqlookupd), so a block runs as a reader would run it against
  ``test_service/start.sh``'s cluster. ``host="127.0.0.1", port=4150`` (asyncnsq's
  ``create_writer`` style) is rewritten too.
* A block must finish by itself (consume what it published, then ``break``), in seconds, and
  every wait in it has a timeout (``asyncio.timeout(10)`` around an ``async for``,
  ``reader.get(timeout=10)`` rather than ``for msg in reader``). Top-level ``await`` is allowed
  (the block then runs in ``asyncio.run``); ``__name__`` is ``"__main__"``. Here every topic is
  deleted after each block, so each block runs as on a fresh nsqd.
* A block that consumes uses a topic of its own, named by no other block: readers run the
  examples in any order against one nsqd, where a channel gets only what is published after it
  exists. ``test_examples_in_sequence.py`` checks that, and runs every block in reading order
  against one real cluster that is never cleaned.
* An HTML comment on the line before the fence changes that:
  ``<!-- test: real-nsqd -->`` runs the block against real nsqd 1.3.0 (binaries as for the
  test fixtures) instead; ``<!-- test: continue -->`` runs the block after the previous block of
  the page, in the same namespace (for a page that builds an example up in steps);
  ``<!-- test: skip: REASON -->`` does not run it (a fragment, or something that needs what a
  test cannot have). Skips must give a reason and stay rare (see ``MAX_SKIPS``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import logging
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from nsqclient.testing import backends

ROOT = Path(__file__).resolve().parents[2]

# Pages whose examples are not checked yet, with the reason. The lead removes an entry once the
# page it names follows the conventions above.
UNCHECKED: dict[str, str] = {
    "docs/testing.md": "owned by the testing/faults work; its examples name a user's own modules",
    "docs/service.md": "services that run until SIGTERM: tests/sync/test_signals.py and "
    "tests/aio/test_signals.py run these patterns as child processes and check nsqd's counts",
}
MAX_SKIPS = 8  # across all pages: skipped examples are the exception

_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)
_MARKER = re.compile(r"<!--\s*test:\s*(?P<kind>skip|real-nsqd|continue)\s*:?\s*(?P<why>.*?)\s*-->")


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    source: str
    kind: str  # "run", "real-nsqd", "continue" or "skip"
    why: str
    previous: Example | None  # what a "continue" block builds on

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def full_source(self) -> str:
        parts = []
        example: Example | None = self
        while example is not None:
            parts.append(example.source)
            example = example.previous if example.kind == "continue" else None
        return "\n".join(reversed(parts))


def pages() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if p.relative_to(ROOT).as_posix() not in UNCHECKED]


def examples() -> list[Example]:
    out: list[Example] = []
    for path in pages():
        text = path.read_text()
        page = path.relative_to(ROOT).as_posix()
        previous: Example | None = None
        for match in _FENCE.finditer(text):
            before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
            marker = _MARKER.search(before)
            kind, why = ("run", "") if marker is None else (marker["kind"], marker["why"])
            line = text.count("\n", 0, match.start()) + 1
            example = Example(page, line, match.group(1), kind, why, previous)
            out.append(example)
            if kind != "skip":
                previous = example
    return out


EXAMPLES = examples()


def test_the_pages_have_examples() -> None:
    assert len([e for e in EXAMPLES if e.kind != "skip"]) >= 30


def test_skips_are_explained_and_rare() -> None:
    skips = [e for e in EXAMPLES if e.kind == "skip"]
    assert all(len(e.why) >= 10 for e in skips), [e.id for e in skips if len(e.why) < 10]
    assert len(skips) <= MAX_SKIPS, [e.id for e in skips]


_PARSE_ONLY = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def test_every_block_parses() -> None:
    """Skipped fragments too: they are still code a reader copies."""
    bad = []
    for example in EXAMPLES:
        try:
            compile(example.source, example.id, "exec", flags=_PARSE_ONLY)
        except SyntaxError as exc:
            bad.append(f"{example.id}: {exc}")
    assert not bad


# -- running them ------------------------------------------------------------------------------

_DEFAULTS = {
    "nsqd1_tcp": "127.0.0.1:4150",
    "nsqd1_http": "127.0.0.1:4151",
    "nsqd2_tcp": "127.0.0.1:4250",
    "nsqd2_http": "127.0.0.1:4251",
    "lookupd_tcp": "127.0.0.1:4160",
    "lookupd_http": "127.0.0.1:4161",
}


class Site:
    """A running cluster and the address substitutions that point examples at it."""

    def __init__(self, backend: str) -> None:
        self.cluster = backends.start_cluster(backend, nsqd_count=2)
        nsqds = self.cluster.nsqds
        actual = {
            "nsqd1_tcp": nsqds[0].tcp_address,
            "nsqd1_http": nsqds[0].http_address,
            "nsqd2_tcp": nsqds[1].tcp_address,
            "nsqd2_http": nsqds[1].http_address,
            "lookupd_tcp": self.cluster.lookupd.tcp_address,
            "lookupd_http": self.cluster.lookupd.http_address,
        }
        self.substitutions = {_DEFAULTS[k]: actual[k] for k in _DEFAULTS}
        host, port = actual["nsqd1_tcp"].rsplit(":", 1)
        self.substitutions['host="127.0.0.1", port=4150'] = f'host="{host}", port={port}'

    def localise(self, source: str) -> str:
        longest_first = sorted(self.substitutions, key=len, reverse=True)
        pattern = re.compile("|".join(re.escape(a) for a in longest_first))
        return pattern.sub(lambda m: self.substitutions[m.group(0)], source)

    def delete_topics(self) -> None:
        """Forget every topic, on nsqd and on lookupd (whose channel list a new topic on nsqd
        would otherwise copy)."""
        names: set[str] = set()
        for nsqd in self.cluster.nsqds:
            for topic in nsqd.stats()["topics"]:
                names.add(topic["topic_name"])
                nsqd.http_post(f"/topic/delete?topic={urllib.parse.quote(topic['topic_name'])}")
        lookupd = self.cluster.lookupd
        names.update(lookupd.http_get_json("/topics")["topics"])
        for name in names:
            url = f"http://{lookupd.http_address}/topic/delete"
            httpx.post(url, params={"topic": name}, timeout=5).raise_for_status()

    def stop(self) -> None:
        self.cluster.stop()


@pytest.fixture(scope="module")
def sites() -> Iterator[dict[str, Site]]:
    started: dict[str, Site] = {}
    try:
        yield started
    finally:
        for site in started.values():
            site.stop()


def _site(sites: dict[str, Site], backend: str) -> Site:
    if backend not in sites:
        sites[backend] = Site(backend)
    return sites[backend]


def run_source(source: str, name: str) -> dict[str, Any]:
    code = compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)
    return namespace


@contextlib.contextmanager
def _logging_restored() -> Iterator[None]:
    """Examples may configure logging as an application would; undo it for the next tests."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {
        name: logger.level
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, logger in logging.Logger.manager.loggerDict.items():
            if isinstance(logger, logging.Logger):
                logger.setLevel(levels.get(name, logging.NOTSET))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.kind != "skip"], ids=lambda e: e.id)
def test_example_runs(example: Example, sites: dict[str, Site]) -> None:
    site = _site(sites, "real" if example.kind == "real-nsqd" else "embedded")
    try:
        with _logging_restored():
            run_source(site.localise(example.full_source()), example.id)
    finally:
        site.delete_topics()
