"""Benchmark profiles (quick, pr, stress) and how command-line overrides apply to them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["PROFILES", "Profile", "resolve_profile"]


@dataclasses.dataclass(frozen=True)
class Profile:
    """Sizes for one run. ``messages``/``payload_size``/``concurrency``/``batch_size`` are the
    headline numbers; the others size the scenarios that would be too slow or too heavy at the
    full count (HTTP publishing, fan-out to 100 channels, graceful-close requeue)."""

    name: str
    messages: int
    payload_size: int
    concurrency: int
    batch_size: int
    max_in_flight: int
    mpub_concurrency: int
    threads: int
    http_messages: int
    fanout_messages: int
    requeue_messages: int
    timeout: float

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "name":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{field.name} must be a positive number, got {value!r}")
        if self.payload_size < 16:
            raise ValueError("payload_size must be at least 16 bytes (sequence id + timestamp)")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PROFILES: dict[str, Profile] = {
    "quick": Profile(
        name="quick",
        messages=5_000,
        payload_size=256,
        concurrency=64,
        batch_size=100,
        max_in_flight=256,
        mpub_concurrency=4,
        threads=8,
        http_messages=2_000,
        fanout_messages=1_000,
        requeue_messages=1_000,
        timeout=60.0,
    ),
    "pr": Profile(
        name="pr",
        messages=50_000,
        payload_size=512,
        concurrency=256,
        batch_size=250,
        max_in_flight=1_024,
        mpub_concurrency=8,
        threads=16,
        http_messages=10_000,
        fanout_messages=5_000,
        requeue_messages=5_000,
        timeout=180.0,
    ),
    "stress": Profile(
        name="stress",
        messages=250_000,
        payload_size=1_024,
        concurrency=512,
        batch_size=500,
        max_in_flight=2_048,
        mpub_concurrency=8,
        threads=32,
        http_messages=10_000,
        fanout_messages=25_000,
        requeue_messages=10_000,
        timeout=600.0,
    ),
}


def resolve_profile(name: str, overrides: Mapping[str, Any] | None = None) -> Profile:
    """The named profile with ``overrides`` (None values ignored) applied and validated.

    ``messages`` also caps the derived counts (HTTP, fan-out, requeue), so ``--messages 100``
    really runs 100 messages everywhere.
    """
    try:
        base = PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}") from None
    changes = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(changes) - {f.name for f in dataclasses.fields(Profile)} - {"name"}
    if unknown:
        raise ValueError(f"unknown profile field(s): {', '.join(sorted(unknown))}")
    profile = dataclasses.replace(base, **changes)
    if "messages" in changes:
        capped = {
            key: min(getattr(profile, key), profile.messages)
            for key in ("http_messages", "fanout_messages", "requeue_messages")
            if key not in changes
        }
        profile = dataclasses.replace(profile, **capped)
    return profile
