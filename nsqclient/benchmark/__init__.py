"""nsqclient's benchmark: ``nsqclient-benchmark`` (``python -m nsqclient.benchmark``, ``nsqclient
bench``).

``nsqclient-benchmark [--profile quick|pr|stress] ...`` measures every scenario against a
running cluster (:mod:`.runner`) and exits non-zero when any message is lost, duplicated, times
out or is not recovered. Measurement uses only the public API; the accounting every result is
judged by is :mod:`.accounting`. The comparison with other clients (their drivers, the go-nsq
program, the orchestration) is repository tooling in ``benchmarks/compare``, not installed.
"""

from __future__ import annotations

from .profiles import PROFILES, Profile, resolve_profile
from .results import ScenarioResult, exit_code, markdown_table

__all__ = [
    "PROFILES",
    "Profile",
    "ScenarioResult",
    "exit_code",
    "markdown_table",
    "resolve_profile",
]
