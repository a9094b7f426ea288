"""Helpers for testing code that uses nsqclient: real nsqd/nsqlookupd processes and fixtures."""
