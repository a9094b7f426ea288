"""Fixtures for the blocking facade's tests (all against real nsqd).

Every test here must leave no sync object open and no ``nsqclient-loop`` thread running: the
autouse ``no_leftover_loop_thread`` fixture (``tests/sync/support.py``; tests/observability uses
it too) checks that after each test (lease counting is part of the contract), then cleans up so
one failure does not cascade.
"""

from __future__ import annotations

from .support import no_leftover_loop_thread as no_leftover_loop_thread
