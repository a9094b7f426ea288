"""The conftest fixtures seen from outside: a pytest run inside the test (pytester).

Checks what a test cannot see about its own fixtures: that teardown leaves no process, that a
failing test's report carries the daemons' logs, and that missing binaries fail (never skip).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsqclient.testing._process import find_nsq_binary

REPO = Path(__file__).resolve().parents[2]
CONFTEST = REPO / "tests" / "conftest.py"

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def bin_dir() -> str:
    """Where this run finds nsqd ($NSQ_BIN_DIR, this checkout's test_service/.bin or PATH);
    module-scoped so it is looked up from the checkout, before pytester changes the folder."""
    return str(find_nsq_binary("nsqd").parent)


@pytest.fixture
def inner(
    bin_dir: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """A pytester folder with our conftest, importing this repository's packages."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    # the inner run's folder is outside the checkout, so the binaries this run uses are named
    monkeypatch.setenv("NSQ_BIN_DIR", bin_dir)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "nsq_backend = real\nnsq_cluster_size = 3\n"  # as the suite's pyproject.toml says
        "nsq_binaries_hint = In nsqclient's checkout: `bash test_service/build_nsq.sh` builds"
        " them.\n"
    )
    return pytester


def pid_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def test_failing_test_shows_logs_and_teardown_leaves_no_process(inner: pytest.Pytester) -> None:
    record = inner.path / "record.json"
    inner.makepyfile(
        f"""
        import json, socket, time
        import pytest
        from nsqclient.testing.daemons import NsqlookupdProcess

        @pytest.fixture(scope="module")
        def shared_lookupd():
            with NsqlookupdProcess() as lookupd:
                yield lookupd

        def test_before(shared_lookupd):
            assert shared_lookupd.running

        def test_uses_daemons(nsq_cluster, nsqd_tls, nsqd_auth, nsqd_factory, shared_lookupd):
            extra = nsqd_factory()
            daemons = [nsq_cluster.lookupd, *nsq_cluster.nsqds, nsqd_tls, nsqd_auth, extra]
            # make the module-scoped lookupd log a line during this test
            size = shared_lookupd.log_size()
            host, port = shared_lookupd.tcp_address.split(":")
            with socket.create_connection((host, int(port))):
                deadline = time.monotonic() + 10
                while shared_lookupd.log_size() == size and time.monotonic() < deadline:
                    time.sleep(0.02)
            with open({str(record)!r}, "w") as f:
                json.dump({{"pids": [d.pid for d in daemons], "shared": repr(shared_lookupd)}}, f)
            assert False, "deliberate failure"

        def test_passes(nsqd):
            assert nsqd.running
        """
    )
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=2)
    output = result.stdout.str()
    recorded = json.loads(record.read_text())
    sections = output.split("daemon logs (call): ")[1:]
    assert len(sections) == 8  # lookupd + 3 cluster nsqd + 3 other nsqd + the shared lookupd
    assert sum(s.startswith("<NsqdProcess") for s in sections) == 6
    assert all("nsqd v1.3.0" in s for s in sections if s.startswith("<NsqdProcess"))
    (shared,) = [s for s in sections if s.startswith(recorded["shared"])]
    assert "TCP: new client" in shared
    assert "nsqlookupd v1.3.0" not in shared  # only what it logged during the failing test
    pids = recorded["pids"]
    assert len(pids) == 7 and all(pid_gone(pid) for pid in pids)


def test_missing_binaries_fail_the_fixture_instead_of_skipping(
    inner: pytest.Pytester, tmp_path: Path
) -> None:
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    inner.makepyfile(
        f"""
        import pytest

        @pytest.fixture(autouse=True)
        def hide_binaries(monkeypatch):
            monkeypatch.setenv("NSQ_BIN_DIR", {str(empty)!r})
            monkeypatch.setenv("PATH", {str(empty)!r})

        def test_nsqd(nsqd):
            pass

        def test_cluster(nsq_cluster):
            pass
        """
    )
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    assert "bash test_service/build_nsq.sh" in result.stdout.str()
