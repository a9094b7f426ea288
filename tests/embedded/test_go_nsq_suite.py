"""go-nsq v1.1.0's own test suite against the embedded server, launched as go-nsq's ``test.sh``
launches nsqd: the PATH shims of ``python -m nsqclient.testing shims DIR`` (issue 31).

The suite is compiled by ``test_service/build_nsq.sh`` (``go test -c``, cached with the nsqd
build), not here. Its tests dial the daemons' default ports, so it runs in a private network
namespace (``unshare -rn``, no root needed where unprivileged user namespaces are allowed);
where ``unshare`` is unavailable it runs on the real ports 4150/4151/4152/4160/4161 under an
exclusive lock file, so two workers (or checkouts) never run it at once.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nsqclient.testing._process import find_nsq_binary

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("go_nsq_suite.py")
LOCK = Path("/tmp/nsqclient-go-nsq-suite-ports.lock")
# go-nsq v1.1.0's 24 tests (config, consumer incl. TLS/snappy/deflate, producer)
EXPECTED = 24


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


@contextmanager
def _ports_lock(needed: bool) -> Iterator[None]:
    if not needed:
        yield
        return
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the pytest timeout bounds the wait
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.mark.timeout(150)
def test_go_nsq_v1_1_0_suite_passes_against_the_shims(tmp_path: Path) -> None:
    built = find_nsq_binary("nsqd").parent
    binary = built / "go-nsq.test"
    assert binary.is_file(), f"no {binary}: run bash test_service/build_nsq.sh"
    shutil.copytree(built / "go-nsq" / "test", tmp_path / "test")  # go-nsq's certificates
    shims = tmp_path / "shims"
    subprocess.run(
        [sys.executable, "-m", "nsqclient.testing", "shims", str(shims)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "NSQ_BIN_DIR"}
    env["PATH"] = f"{shims}:/usr/bin:/bin"  # the shims, and no real nsqd
    env["PYTHONPATH"] = str(REPO)
    netns = _unshare_works()
    argv = [sys.executable, str(RUNNER), "--binary", str(binary), "--workdir", str(tmp_path)]
    if netns:
        argv = ["unshare", "-rn", *argv, "--netns"]
    with _ports_lock(not netns):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=140)
    out = done.stdout + done.stderr
    failed = re.findall(r"^\s*--- FAIL: (\S+)", out, re.M)
    passed = re.findall(r"^--- PASS: (\S+)", out, re.M)
    assert done.returncode == 0 and not failed, f"failed: {failed}\n{out[-6000:]}"
    assert len(passed) == EXPECTED, (passed, out[-3000:])
    assert "go-nsq suite: exit 0" in out
