"""benchmarks/coalesce.py runs end to end against real nsqd (two cases, one small round) and
reports each case plain and coalesced, with their ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nsqclient.testing.daemons import NsqdProcess

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_the_coalescing_benchmark_measures_both_modes(nsqd: NsqdProcess, tmp_path: Path) -> None:
    env = tmp_path / "cluster.env"
    env.write_text(
        f"NSQD_TCP_ADDRESSES={nsqd.tcp_address}\nNSQD_HTTP_ADDRESSES={nsqd.http_address}\n"
    )
    out = tmp_path / "table.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.coalesce", "--cluster-env", str(env), "--rounds", "1",
         "--messages", "3000", "--cases", "256 outstanding", "--lingers", "1", "--quiet",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {(r["case"], r["mode"]): r for r in json.loads(out.read_text())}
    assert set(rows) == {
        ("PUB, 256 outstanding", "plain"),
        ("PUB, 256 outstanding", "coalesced"),
        ("publish -> FIN, 256 outstanding", "plain"),
        ("publish -> FIN, 256 outstanding", "coalesced"),
        ("PUB, 16 outstanding, linger 1 ms", "coalesced"),
    }
    assert all(r["msg_per_s"] > 0 and r["p99_ms"] > 0 for r in rows.values())
    assert "| PUB, 256 outstanding | coalesced / plain |" in done.stdout
