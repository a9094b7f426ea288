"""The API reference shows the public surface, lists the options, and formats signatures.

The rendered pages are checked by the build itself (docs/_hooks.py fails ``mkdocs build`` when
a reference page shows a layer's name); these check the parts that feed it, without a build:
docs/_griffe.py's extension read the way mkdocstrings reads the code, and the formatter that
``separate_signature`` needs being part of the docs extra.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

import griffe
import pytest
import yaml

from nsqclient.config import Config

ROOT = Path(__file__).resolve().parents[2]


def _extension_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_griffe", ROOT / "docs" / "_griffe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python_handler_options() -> dict[str, object]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    plugin = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict))
    options: dict[str, object] = plugin["handlers"]["python"]["options"]
    return options


@pytest.mark.timeout(60)
def test_the_extension_hides_private_parameters_and_lists_every_option() -> None:
    ext = _extension_module()
    assert _python_handler_options()["extensions"] == ["docs/_griffe.py"]
    package = griffe.load(
        "nsqclient",
        search_paths=[str(ROOT)],
        extensions=griffe.load_extensions(ext.PublicSurface()),
    )
    links = [f"({ext.CONFIGURATION_PAGE}#{f.name})" for f in dataclasses.fields(Config)]
    for path in ext.OPTION_TAKERS:
        obj = package[path.removeprefix("nsqclient.")]
        init = obj if obj.is_function else obj.members["__init__"]
        assert any(p.kind is griffe.ParameterKind.var_keyword for p in init.parameters), path
        assert all(not p.name.startswith("_") for p in init.parameters), path
        text = obj.docstring.value
        missing = [link for link in links if link not in text]
        assert not missing, f"{path}'s options paragraph lacks {missing}"
        assert text.count("**Options**") == 1, path  # added once
    writer_init = package["aio.writer.Writer"].members["__init__"]
    assert "config" in writer_init.parameters  # the public ones stay


def test_signatures_are_formatted_by_a_formatter_of_the_docs_extra() -> None:
    options = _python_handler_options()
    assert options["separate_signature"] is True and int(str(options["line_length"])) <= 100
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    # mkdocstrings-python formats signatures with Black, else Ruff, else prints them on one line
    assert any(req.startswith(("ruff", "black")) for req in extras["docs"]), extras["docs"]
