"""The documentation's examples, run one after another against ONE nsqd, as a newcomer runs them.

``test_examples.py`` runs each example against a cluster whose topics it deletes after every
block, so it cannot see what a reader meets who runs the README and then the pages of the site
in order against one ``nsqd``: topics and channels left by the examples before. In NSQ a channel
receives only what is published after it exists, so an example that publishes to a topic an
earlier example already subscribed to, and then subscribes with a channel of its own, waits
forever; one that reads a channel an earlier example left messages in prints the wrong thing.
The rule for writers, which this test holds them to: **an example that consumes uses a topic of
its own** (or subscribes before it publishes), and **every wait has a timeout**.

Here the blocks run in reading order (README, then mkdocs.yml's nav), each as one test, against
one real nsqd cluster (two nsqd and an nsqlookupd, the addresses of ``test_examples.py``) that
is never cleaned in between, then once more in reverse order on the same cluster. An example
must also finish well inside the deadlines it sets itself (``run(timeout=30)``,
``wait_for(..., 10)``): one that only ends because its own timeout passed has failed, even if
it raised nothing. The whole module takes about 12 s (each pass about 4 s of examples).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsqclient.testing import backends

from .test_examples import EXAMPLES, ROOT, Example, Site, _logging_restored, run_source

# below the shortest timeout an example gives itself (10 s), above what any takes on a busy
# 2-core machine (the slowest, a 1.5 s DPUB and a 3-attempt give-up, take about 2 s)
PER_EXAMPLE_TIMEOUT = 9.5


def _nav_pages(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _nav_pages(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _nav_pages(value)


def reading_order() -> list[str]:
    """README.md, then the pages in the order of mkdocs.yml's nav (paths from the root)."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return ["README.md", *(f"docs/{page}" for page in _nav_pages(nav))]


def in_reading_order() -> list[Example]:
    order = {page: i for i, page in enumerate(reading_order())}
    runnable = [e for e in EXAMPLES if e.kind != "skip"]
    # sorted() is stable: the blocks of one page keep their order
    return sorted(runnable, key=lambda e: order.get(e.page, len(order)))


SEQUENCE = in_reading_order()


def test_every_page_with_examples_is_in_the_reading_order() -> None:
    order = set(reading_order())
    assert all((ROOT / page).is_file() for page in order), "a nav entry names no file"
    assert not sorted({e.page for e in SEQUENCE} - order)


# a topic an example consumes (Reader("t", ...), SyncReader, create_reader's subscribe("t", ...)),
# and every topic an example names when publishing or creating it
_CONSUMES = re.compile(r'\b(?:Reader|subscribe)\(\s*"([^"#]+)')
_NAMES = re.compile(
    r"\.(?:pub|mpub|dpub|pub_nowait|mpub_nowait|dpub_nowait|create_topic|create_channel)"
    r'\(\s*"([^"#]+)'
)


def _owner(example: Example) -> str:
    """The first block of a ``continue`` chain: the chain is one example."""
    while example.kind == "continue" and example.previous is not None:
        example = example.previous
    return example.id


def test_every_consuming_example_has_a_topic_of_its_own() -> None:
    """The static half of the rule (the run below is the dynamic one, in one order only): a
    topic an example reads from is named by no other example, so no order of running them can
    leave a channel that misses its messages or holds another example's."""
    users: dict[str, set[str]] = {}
    consumed: set[str] = set()
    for example in SEQUENCE:
        owner = _owner(example)
        for topic in _CONSUMES.findall(example.source):
            consumed.add(topic)
            users.setdefault(topic, set()).add(owner)
        for topic in _NAMES.findall(example.source):
            users.setdefault(topic, set()).add(owner)
    assert len(consumed) >= 15  # the patterns still find the examples' readers
    shared = {topic: sorted(users[topic]) for topic in sorted(consumed) if len(users[topic]) > 1}
    assert not shared, f"topics consumed by one example and used by another: {shared}"


@pytest.fixture(scope="module")
def shared_site() -> Iterator[Site]:
    """One real cluster for the whole sequence, never cleaned between examples."""
    if not backends.real_binaries_available():
        pytest.skip("real nsqd binaries not found (bash test_service/build_nsq.sh builds them)")
    site = Site("real")
    try:
        yield site
    finally:
        site.stop()


@pytest.mark.timeout(60)
def test_the_shared_cluster_is_up(shared_site: Site) -> None:
    """Starts the cluster outside the examples' short timeouts (it runs first)."""
    assert len(shared_site.cluster.lookupd.nodes()) == 2


@pytest.mark.timeout(PER_EXAMPLE_TIMEOUT)
@pytest.mark.parametrize("example", SEQUENCE, ids=lambda e: e.id)
def test_example_in_sequence(example: Example, shared_site: Site) -> None:
    with _logging_restored():
        run_source(shared_site.localise(example.full_source()), example.id)


@pytest.mark.timeout(PER_EXAMPLE_TIMEOUT)
@pytest.mark.parametrize("example", SEQUENCE[::-1], ids=lambda e: e.id)
def test_example_again_in_reverse(example: Example, shared_site: Site) -> None:
    """Then backwards, on the same cluster: an example that relied on one before it fails here,
    and each runs a second time, as a reader who comes back to a page does (about 4 s)."""
    with _logging_restored():
        run_source(shared_site.localise(example.full_source()), example.id)


def test_the_sequence_covers_every_runnable_example() -> None:
    assert len(SEQUENCE) == len([e for e in EXAMPLES if e.kind != "skip"]) >= 30
    assert SEQUENCE[0].page == "README.md"
    assert Path(ROOT / SEQUENCE[-1].page).is_file()
