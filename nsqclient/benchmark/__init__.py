"""nsqclient's benchmark: ``nsqclient-benchmark`` (``python -m nsqclient.benchmark``).

``nsqclient-benchmark [--profile quick|pr|stress] ...`` measures every scenario against a
running cluster (:mod:`.runner`); ``nsqclient-benchmark compare ...`` runs the same core
scenarios for nsqclient and peer clients, each in its own process and virtualenv, against a fresh
nsqd per (scenario, client) pair (:mod:`.compare`). Both exit non-zero when any message is lost,
duplicated, times out or is not recovered. Measurement uses only the public API.
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
