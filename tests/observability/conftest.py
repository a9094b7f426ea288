"""The observability tests use the blocking facade too: each must leave no sync object open and
no ``nsqclient-loop`` thread running (the same autouse check as tests/sync)."""

from __future__ import annotations

from tests.sync.support import no_leftover_loop_thread as no_leftover_loop_thread
