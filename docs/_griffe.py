"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings' ``extensions``).

* Parameters whose name starts with ``_`` belong to the layers, not to users: they are dropped
  from the signatures, as mkdocs.yml's ``filters`` drop private members (a safety net: the
  public classes have none, tests/test_public_surface.py checks it; the layers hand each other
  what they need through private constructors such as ``Writer._from_checked``).
* ``**options`` names none of the options the Readers and Writers take, so their docstrings get
  the list: every :class:`nsqclient.Config` field, linked to its row of docs/configuration.md
  (unit, default, range). The list is read from the dataclass, so it cannot go stale.
"""

from __future__ import annotations

from typing import Any

import griffe

# what takes Config fields as keyword options (griffe's canonical paths), and where the
# docstring is rendered from (a class's own docstring: mkdocs.yml merges __init__ into it)
OPTION_TAKERS = (
    "nsqclient.aio.writer.Writer",
    "nsqclient.aio.reader.Reader",
    "nsqclient.sync.writer.SyncWriter",
    "nsqclient.sync.reader.SyncReader",
    "nsqclient.compat.asyncnsq.create_writer",
    "nsqclient.compat.asyncnsq.create_reader",
    "nsqclient.worker.run",
)

# relative to the reference pages (docs/reference/*.md)
CONFIGURATION_PAGE = "../configuration.md"


def options_paragraph(pkg: griffe.Module) -> str:
    # read as griffe reads the rest, nothing imported: the dataclass's fields are its annotated
    # public class attributes that are not properties (tests/docs/test_reference.py checks the
    # list against dataclasses.fields)
    names = [
        name
        for name, member in pkg["config.Config"].members.items()
        if member.is_attribute
        and member.annotation is not None
        and not name.startswith("_")
        and "property" not in member.labels
        and "ClassVar" not in str(member.annotation)
    ]
    links = ", ".join(f"[`{name}`]({CONFIGURATION_PAGE}#{name})" for name in names)
    return (
        "**Options** (keyword arguments, or all at once as `config=Config(...)`; units, "
        f"defaults and ranges in [Configuration]({CONFIGURATION_PAGE}#every-option)): {links}."
    )


class PublicSurface(griffe.Extension):
    """Hide the layers' keyword parameters; list the options where ``**options`` hides them."""

    def __init__(self) -> None:
        super().__init__()
        self._paragraph: str | None = None

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        for name in [p.name for p in func.parameters if p.name.startswith("_")]:
            del func.parameters[name]

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "nsqclient":
            return
        for path in OPTION_TAKERS:
            obj = pkg[path.removeprefix("nsqclient.")]
            if obj.docstring is None:
                raise griffe.GriffeError(f"{path} has no docstring to list its options in")
            if self._paragraph is None:
                self._paragraph = options_paragraph(pkg)
            obj.docstring.value = f"{obj.docstring.value.rstrip()}\n\n{self._paragraph}"
