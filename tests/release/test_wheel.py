"""The package as a user gets it: ``python -m build`` makes an sdist and a wheel, and the wheel,
installed into a fresh virtualenv outside this repository, imports, serves the pytest plugin and
runs its one console script. The wheel holds nsqclient (the client, ``testing/``, the CLI with
what ``nsqclient bench`` needs) and its metadata with the LICENSE, nothing of the repository's
tooling (soak, charts, multi-process harness, comparison: ``benchmarks/``).

One module-scoped build and install (about half a minute; the runtime dependencies and pytest
come from the package index, as for any user), then several cheap checks against it.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import nsqclient

REPO = Path(__file__).resolve().parents[2]
NAME = f"nsqclient-{nsqclient.__version__}"
SUBPACKAGES = {
    "aio",
    "benchmark",
    "cli",
    "compat",
    "flow",
    "http",
    "observability",
    "protocol",
    "sync",
    "testing",
    "worker",
}

#: what ``nsqclient bench`` runs; the rest of the benchmarks is repository tooling (benchmarks/)
BENCHMARK_MODULES = {
    "__init__", "__main__", "accounting", "latency", "nsqd_admin", "params", "profiles",
    "progress", "results", "run_cli", "runner", "scenarios", "sync_scenarios", "telemetry",
}  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _code_strings(source: str) -> list[str]:
    """The string constants of a module that are not docstrings (what the code uses)."""
    tree = ast.parse(source)
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


@dataclass
class Installed:
    wheel: Path
    sdist: Path
    venv: Path
    outside: Path  # a folder outside the repository to run things in

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(
        self, *argv: str, cwd: Path | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            cwd=cwd or self.outside,
            env=user_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def user_env() -> dict[str, str]:
    """A user's shell: nothing pointing into this repository, no backend or binaries chosen."""
    drop = ("PYTHONPATH", "NSQ_BIN_DIR", "NSQCLIENT_BACKEND", "PYTEST_ADDOPTS", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop}


def checked(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("packaging")
    assert not root.resolve().is_relative_to(REPO)
    dist = root / "dist"
    # built from a copy of the checkout: setuptools writes its egg-info into the source tree,
    # and two test workers building from the checkout itself at once broke each other's build
    source = root / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", ".bin", "__pycache__", "*.egg-info", "build", "dist", "site"
        ),
    )
    # the sdist first, then the wheel from the sdist (what `python -m build` does); the build
    # requirements (setuptools>=77) are in the dev extras, so no isolated build environment
    checked(
        subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    )
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    venv = root / "venv"
    checked(
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    )
    # this virtualenv's pip installs into the fresh one (--python): no pip bootstrap there
    checked(
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
             "--quiet", "--disable-pip-version-check", "--no-compile", str(wheel), "pytest"],
            capture_output=True,
            text=True,
            timeout=90,
            env=user_env(),
            check=False,
        )
    )  # fmt: skip
    outside = root / "work"
    outside.mkdir()
    return Installed(wheel=wheel, sdist=sdist, venv=venv, outside=outside)


def test_wheel_holds_only_the_package_its_metadata_and_license(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    dist_info = f"{NAME}.dist-info/"
    others = [n for n in names if not n.startswith(("nsqclient/", dist_info))]
    assert others == []
    assert f"{dist_info}licenses/LICENSE" in names
    packages = {n.split("/")[1] for n in names if n.startswith("nsqclient/") and n.count("/") > 1}
    assert packages == SUBPACKAGES
    # the peer comparison is repository tooling (benchmarks/compare), not installed
    assert not [n for n in names if "/drivers/" in n or "compare" in n]
    assert "nsqclient/py.typed" in names
    benchmark = {
        n.removeprefix("nsqclient/benchmark/").removesuffix(".py")
        for n in names
        if n.startswith("nsqclient/benchmark/")
    }
    assert benchmark == BENCHMARK_MODULES  # no soak, chart, multiproc
    assert not [n for n in names if any(w in n for w in ("soak", "chart", "multiproc"))]
    # the HTTP clients and address parsing left aio/, and no shim keeps their old paths
    assert "nsqclient/addresses.py" in names
    assert not {"nsqclient/aio/addresses.py", "nsqclient/aio/http.py"} & set(names)
    # no installed module computes repository paths from where it is installed
    for name in names:
        if name.endswith(".py"):
            source = zipfile.ZipFile(installed.wheel).read(name).decode()
            assert ".parents[" not in source and ".parent.parent" not in source, name
            # nor knows a checkout's layout, nor runs git (the repository's scripts record that)
            for text in _code_strings(source):
                assert "test_service" not in text and "build_nsq" not in text, (name, text)
                assert text != "git" and "matplotlib" not in text, (name, text)


def test_one_console_script(installed: Installed) -> None:
    entry_points = zipfile.ZipFile(installed.wheel).read(f"{NAME}.dist-info/entry_points.txt")
    section = entry_points.decode().split("[console_scripts]")[1].split("[")[0]
    assert section.split() == ["nsqclient", "=", "nsqclient.cli:main"]
    assert not (installed.venv / "bin" / "nsqclient-benchmark").exists()
    assert not (installed.venv / "bin" / "nsqclient-embedded-nsqd").exists()


def test_metadata_license_python_versions_and_sdist(installed: Installed) -> None:
    metadata = zipfile.ZipFile(installed.wheel).read(f"{NAME}.dist-info/METADATA")
    text = metadata.decode()
    assert "License-Expression: MIT" in text and "License-File: LICENSE" in text
    for version in ("3.11", "3.12", "3.13"):
        assert f"Classifier: Programming Language :: Python :: {version}" in text
    with tarfile.open(installed.sdist) as sdist:
        license_text = sdist.extractfile(f"{NAME}/LICENSE")
        assert license_text is not None
        assert b"MIT License" in license_text.read()
        tops = {m.name.removeprefix(f"{NAME}/").split("/")[0] for m in sdist.getmembers()}
    tops.discard(NAME)
    assert tops == {
        "nsqclient", "nsqclient.egg-info", "LICENSE", "README.md", "PKG-INFO", "pyproject.toml",
        "setup.cfg", "MANIFEST.in",
    }  # fmt: skip


def test_the_installed_package_imports_from_the_virtualenv(installed: Installed) -> None:
    probe = textwrap.dedent(
        """
        import importlib.util, sys
        import nsqclient, nsqclient.aio, nsqclient.sync, nsqclient.testing, nsqclient.benchmark
        from nsqclient.testing.plugin import pytest_addoption
        print(nsqclient.__file__)
        print(importlib.util.find_spec("benchmarks") is None)
        """
    )
    path, no_benchmarks = checked(installed.run(installed.bin("python"), "-c", probe)).split()
    assert Path(path).resolve().is_relative_to(installed.venv.resolve())
    assert no_benchmarks == "True"


def test_console_scripts_run(installed: Installed) -> None:
    assert "usage: nsqclient" in checked(installed.run(installed.bin("nsqclient"), "--help"))
    bench = checked(installed.run(installed.bin("nsqclient"), "bench", "--help"))
    assert "usage: nsqclient bench" in bench and "--profile" in bench
    assert "--chart" not in bench and "--consumer-processes" not in bench  # benchmarks/ has them
    embedded = checked(installed.run(installed.bin("nsqclient"), "nsqd", "--help"))
    assert "Usage of nsqclient nsqd" in embedded and "-data-path" in embedded
    for tool in ("compare", "soak"):
        moved = installed.run(installed.bin("nsqclient"), "bench", tool)
        assert moved.returncode == 2 and f"python -m benchmarks.{tool}" in moved.stderr


def test_the_pytest_plugin_serves_nsqd_from_the_wheel(installed: Installed) -> None:
    project = installed.outside / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (project / "test_orders.py").write_text(
        textwrap.dedent(
            """
            from nsqclient.sync import SyncReader, SyncWriter


            def test_publish_and_consume(nsqd, nsq_backend):
                assert nsq_backend == "embedded"
                with SyncWriter([nsqd.tcp_address]) as writer:
                    writer.pub("orders", b"order 1")
                with SyncReader("orders", "billing", nsqd_tcp_addresses=[nsqd.tcp_address],
                                max_in_flight=1) as reader:
                    msg = next(iter(reader))
                    msg.fin()
                assert msg.body == b"order 1"
                assert nsqd.stats(topic="orders")["topics"][0]["message_count"] == 1
            """
        )
    )
    result = installed.run(
        installed.bin("python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "--nsq-backend=embedded", cwd=project,
    )  # fmt: skip
    out = checked(result)
    assert "1 passed" in out
