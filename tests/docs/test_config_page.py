"""docs/configuration.md lists every Config option, as the code defines it."""

from __future__ import annotations

import dataclasses

from nsqclient.config import Config

from .config_table import PAGE, field_docs, render


def test_every_option_has_a_docstring() -> None:
    docs = field_docs()
    missing = [f.name for f in dataclasses.fields(Config) if not docs.get(f.name)]
    assert not missing, f"Config fields without a docstring in nsqclient/config.py: {missing}"


def test_the_page_table_is_current() -> None:
    page = PAGE.read_text()
    assert render(page) == page, (
        "docs/configuration.md's option table differs from nsqclient.Config: "
        "run `python -m tests.docs.config_table --write`"
    )


def test_every_option_is_on_the_page() -> None:
    page = PAGE.read_text()
    absent = [f.name for f in dataclasses.fields(Config) if f"`{f.name}`" not in page]
    assert not absent
