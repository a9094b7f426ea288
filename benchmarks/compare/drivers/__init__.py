"""Benchmark drivers: one standalone script per client, speaking the protocol in _common."""
