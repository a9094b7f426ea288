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
  ``reader.get(timeout=10)`` rather than ``for msg in reader``). A block runs as the file a
  reader pastes it into would: written to a ``.py`` file and run as ``__main__``
  (``runpy.run_path``), so a top-level ``await`` or ``async with`` is the SyntaxError it is
  there (wrap it in ``async def main()`` and ``asyncio.run(main())``). Every block of every
  page, skipped ones and the pages not run yet included, must at least compile as a file. Here
  every topic is deleted after each block, so each block runs as on a fresh nsqd.
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

import contextlib
import logging
import re
import runpy
import tempfile
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


def examples(paths: list[Path] | None = None) -> list[Example]:
    out: list[Example] = []
    for path in pages() if paths is None else paths:
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
#: every block of every page, the UNCHECKED pages' too (they must compile as files)
ALL_BLOCKS = examples([ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


def test_the_pages_have_examples() -> None:
    assert len([e for e in EXAMPLES if e.kind != "skip"]) >= 30


def test_skips_are_explained_and_rare() -> None:
    skips = [e for e in EXAMPLES if e.kind == "skip"]
    assert all(len(e.why) >= 10 for e in skips), [e.id for e in skips if len(e.why) < 10]
    assert len(skips) <= MAX_SKIPS, [e.id for e in skips]


def test_every_block_compiles_as_a_file() -> None:
    """Skipped fragments and the pages not run yet too: they are still code a reader pastes
    into a file. Compiled (not only parsed: ``async with`` outside a coroutine is the
    compiler's error), without the top-level await a REPL allows."""
    bad = []
    for example in ALL_BLOCKS:
        try:
            compile(example.source, example.id, "exec", dont_inherit=True)
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
    """Run ``source`` as the file a reader pastes it into: a ``.py`` file run as ``__main__``
    (a SyntaxError for a top-level ``await``, as there). Returns its globals."""
    stem = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    with tempfile.TemporaryDirectory(prefix="nsqclient-docs-") as folder:
        path = Path(folder) / f"{stem}.py"
        path.write_text(source, encoding="utf-8")
        return runpy.run_path(str(path), run_name="__main__")


def test_a_block_runs_as_the_file_it_is_pasted_into() -> None:
    """Issue 51: a block with ``async with`` at top level passed here (run with the REPL's
    top-level await) and was a SyntaxError in the reader's file."""
    with pytest.raises(SyntaxError, match="'async with' outside async function"):
        run_source("import asyncio\n\nasync with asyncio.timeout(1):\n    pass\n", "page.md:1")
    with pytest.raises(SyntaxError, match="'await' outside function"):
        run_source("import asyncio\n\nawait asyncio.sleep(0)\n", "page.md:1")
    ran = run_source("name, file = __name__, __file__\n", "page.md:2")
    assert ran["name"] == "__main__" and ran["file"].endswith("page_md_2.py")


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
