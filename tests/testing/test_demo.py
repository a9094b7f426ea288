"""``bash test_service/demo.sh`` end to end: with real nsqd, and with the embedded server on a
machine without Go or NSQ binaries (``PATH`` stripped of Go, no ``NSQ_BIN_DIR``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nsqclient.testing.daemons import find_nsq_binary

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]


def run_demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "test_service" / "demo.sh"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )


def check_tour(result: subprocess.CompletedProcess[str]) -> str:
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "asyncio Writer: 10 messages acknowledged over 3 nsqd" in out
    assert "SyncWriter:     10 messages from 2 threads" in out
    assert "20 received, 20 finished, 3 nsqd connections" in out
    assert "SyncReader (channel demo-sync, direct to nsqd): 20 distinct messages" in out
    assert "every message arrived once per channel" in out
    return out


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NSQ_BIN_DIR", "NSQCLIENT_BACKEND")}
    env.pop("NSQ_RUN_DIR", None)
    return env


def path_without_go(path: str, tmp: Path) -> str:
    """``path`` minus every folder holding ``go``, plus a folder of links to the tools the
    script needs (so a folder like /usr/bin that also holds go can go away entirely)."""
    tools = tmp / "tools"
    tools.mkdir()
    for tool in ("bash", "mktemp", "sed", "cat", "rm", "sleep", "sha256sum", "cut", "dirname"):
        found = shutil.which(tool, path=path)
        if found:
            (tools / tool).symlink_to(found)
    kept = [d for d in path.split(os.pathsep) if d and not (Path(d) / "go").exists()]
    return os.pathsep.join([str(tools), *kept])


def test_demo_with_the_embedded_server_needs_no_go_and_no_binaries(tmp_path: Path) -> None:
    env = base_env()
    env["PATH"] = path_without_go(env.get("PATH", ""), tmp_path)
    env["TMPDIR"] = str(tmp_path)
    assert shutil.which("go", path=env["PATH"]) is None
    result = run_demo(env, "--embedded")
    out = check_tour(result)
    assert "nsqclient's embedded nsqd/nsqlookupd" in out
    assert list(tmp_path.glob("nsqclient-demo.*")) == []  # its run folder is gone


def test_demo_embedded_chosen_through_the_environment_twice_in_a_row(tmp_path: Path) -> None:
    env = base_env() | {"NSQCLIENT_BACKEND": "embedded", "TMPDIR": str(tmp_path)}
    for _ in range(2):  # safe to rerun
        assert "embedded nsqd" in check_tour(run_demo(env))
    assert list(tmp_path.glob("nsqclient-demo.*")) == []


def test_demo_with_real_nsqd(tmp_path: Path) -> None:
    env = base_env() | {
        "NSQ_BIN_DIR": str(find_nsq_binary("nsqd").parent),
        "TMPDIR": str(tmp_path),
    }
    out = check_tour(run_demo(env, "--real"))
    assert "demo.sh: real nsqd nsqd v1.3.0" in out
    assert list(tmp_path.glob("nsqclient-demo.*")) == []
