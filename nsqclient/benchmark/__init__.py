"""nsqclient's benchmark: ``nsqclient bench`` (``python -m nsqclient.benchmark``).

``nsqclient bench [--profile quick|pr|stress] ...`` measures every scenario against a running
cluster (:mod:`.runner`) and exits non-zero when any message is lost, duplicated, times out or is
not recovered. Measurement uses only the public API; the accounting every result is judged by is
:mod:`.accounting`. An application of the library: nothing else in nsqclient imports it. The
soak, the charts, the multi-process scenarios and the comparison with other clients are
repository tooling (``benchmarks/`` in a source checkout), not installed.
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
