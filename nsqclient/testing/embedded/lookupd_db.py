"""nsqlookupd's registration database (``nsqlookupd/registration_db.go``), in memory.

Registrations are ``(category, key, subkey)``: ``("client", "", "")`` per connected nsqd,
``("topic", t, "")`` and ``("channel", t, c)``. Each maps producer ids (the nsqd's remote address)
to producers; a registration may exist with no producer (created over HTTP, or left behind when
its nsqd disconnected).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

__all__ = ["PeerInfo", "Producer", "Registration", "RegistrationDB"]

Registration = tuple[str, str, str]


@dataclasses.dataclass
class PeerInfo:
    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: float = dataclasses.field(default_factory=time.monotonic)

    def to_json(self) -> dict[str, Any]:
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


@dataclasses.dataclass
class Producer:
    peer: PeerInfo
    tombstoned_at: float | None = None

    def is_tombstoned(self, lifetime: float) -> bool:
        return self.tombstoned_at is not None and time.monotonic() - self.tombstoned_at < lifetime


class RegistrationDB:
    def __init__(self) -> None:
        self.map: dict[Registration, dict[str, Producer]] = {}

    def add_registration(self, key: Registration) -> None:
        self.map.setdefault(key, {})

    def add_producer(self, key: Registration, peer: PeerInfo) -> bool:
        producers = self.map.setdefault(key, {})
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        return True

    def remove_producer(self, key: Registration, peer_id: str) -> tuple[bool, int]:
        producers = self.map.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, key: Registration) -> None:
        self.map.pop(key, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != "*" and subkey != "*":
            wanted = (category, key, subkey)
            return [wanted] if wanted in self.map else []
        return [r for r in self.map if _match(r, category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        if key != "*" and subkey != "*":
            return list(self.map.get((category, key, subkey), {}).values())
        seen: dict[str, Producer] = {}
        for r, producers in self.map.items():
            if _match(r, category, key, subkey):
                for pid, producer in producers.items():
                    seen.setdefault(pid, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        return [r for r, producers in self.map.items() if peer_id in producers]


def _match(r: Registration, category: str, key: str, subkey: str) -> bool:
    return r[0] == category and key in ("*", r[1]) and subkey in ("*", r[2])


def filter_active(
    producers: list[Producer], inactive_timeout: float, tombstone_lifetime: float
) -> list[Producer]:
    """``FilterByActive``: drop producers not pinged lately or tombstoned lately."""
    now = time.monotonic()
    return [
        p
        for p in producers
        if now - p.peer.last_update <= inactive_timeout and not p.is_tombstoned(tombstone_lifetime)
    ]
