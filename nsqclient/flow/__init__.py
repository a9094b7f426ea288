"""Decisions with no I/O: RDY distribution, consumer backoff, reconnect delays. Clock injected."""
