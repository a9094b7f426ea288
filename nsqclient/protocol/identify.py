"""IDENTIFY: what the client asks for, checked against nsqd's ranges, and what nsqd granted.

:class:`IdentifyOptions` holds exactly the fields nsqd reads and refuses a value nsqd would refuse
(with its default limits), naming the field and the range. :class:`IdentifyResponse` is the
negotiation reply; :class:`AuthResponse` the reply to AUTH.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..config import Config, default_client_id, default_user_agent
from ..errors import ConfigError, ProtocolError

__all__ = ["AuthResponse", "IdentifyOptions", "IdentifyResponse", "ServerLimits"]


@dataclasses.dataclass(frozen=True, slots=True)
class ServerLimits:
    """nsqd's limits that bound IDENTIFY values (its defaults; pass yours if you changed them)."""

    max_heartbeat_interval: int = 60_000
    min_output_buffer_timeout: int = 25
    max_output_buffer_timeout: int = 30_000
    max_output_buffer_size: int = 65_536
    max_msg_timeout: int = 900_000


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IdentifyOptions:
    """The IDENTIFY body. Durations in milliseconds, as on the wire."""

    client_id: str = dataclasses.field(default_factory=default_client_id)
    hostname: str = dataclasses.field(default_factory=lambda: __import__("os").uname().nodename)
    user_agent: str = dataclasses.field(default_factory=default_user_agent)
    feature_negotiation: bool = True
    heartbeat_interval: int = 30_000
    output_buffer_size: int = 0  # 0: nsqd's configured default
    output_buffer_timeout: int = 0  # 0: nsqd's configured default
    tls_v1: bool = False
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    sample_rate: int = 0
    msg_timeout: int = 0
    limits: ServerLimits = dataclasses.field(default_factory=ServerLimits, compare=False)

    def __post_init__(self) -> None:
        lim = self.limits
        for name in (
            "heartbeat_interval",
            "output_buffer_size",
            "output_buffer_timeout",
            "deflate_level",
            "sample_rate",
            "msg_timeout",
        ):
            value = getattr(self, name)
            if isinstance(value, float) and value.is_integer():
                object.__setattr__(self, name, int(value))
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {value!r}")
        for name in ("client_id", "hostname", "user_agent"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name} must be a str, got {getattr(self, name)!r}")
        _allowed(
            "heartbeat_interval",
            self.heartbeat_interval,
            (-1, 0),
            1_000,
            lim.max_heartbeat_interval,
            " ms (-1 disables, 0 = nsqd's default)",
        )
        _allowed(
            "output_buffer_timeout",
            self.output_buffer_timeout,
            (-1, 0),
            lim.min_output_buffer_timeout,
            lim.max_output_buffer_timeout,
            " ms (-1 disables timed flushes, 0 = nsqd's default)",
        )
        _allowed(
            "output_buffer_size",
            self.output_buffer_size,
            (-1, 0),
            64,
            lim.max_output_buffer_size,
            " bytes (-1 = unbuffered, 0 = nsqd's default)",
        )
        _allowed("sample_rate", self.sample_rate, (), 0, 99, " percent (0 disables sampling)")
        _allowed(
            "msg_timeout",
            self.msg_timeout,
            (0,),
            1_000,
            lim.max_msg_timeout,
            " ms (0 = nsqd's --msg-timeout)",
        )
        _allowed("deflate_level", self.deflate_level, (0,), 1, 9, " (0 = nsqd's default of 6)")
        if self.snappy and self.deflate:
            raise ConfigError("snappy and deflate cannot both be enabled; nsqd refuses the pair")

    @classmethod
    def from_config(cls, config: Config, limits: ServerLimits | None = None) -> IdentifyOptions:
        return cls(
            client_id=config.client_id if config.client_id is not None else default_client_id(),
            hostname=config.hostname
            if config.hostname is not None
            else __import__("os").uname().nodename,
            user_agent=config.user_agent if config.user_agent is not None else default_user_agent(),
            feature_negotiation=config.feature_negotiation,
            heartbeat_interval=_ms(config.heartbeat_interval),
            output_buffer_size=config.output_buffer_size,
            output_buffer_timeout=_ms(config.output_buffer_timeout),
            tls_v1=config.tls_v1,
            snappy=config.snappy,
            deflate=config.deflate,
            deflate_level=config.deflate_level,
            sample_rate=config.sample_rate,
            msg_timeout=_ms(config.msg_timeout),
            limits=limits or ServerLimits(),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "feature_negotiation": self.feature_negotiation,
            "heartbeat_interval": self.heartbeat_interval,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": self.output_buffer_timeout,
            "tls_v1": self.tls_v1,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "sample_rate": self.sample_rate,
            "msg_timeout": self.msg_timeout,
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True, slots=True)
class IdentifyResponse:
    """What nsqd granted. Defaults are what a server without feature negotiation implies."""

    max_rdy_count: int = 2500
    version: str = ""
    max_msg_timeout: int = 900_000
    msg_timeout: int = 60_000
    tls_v1: bool = False
    deflate: bool = False
    deflate_level: int = 6
    max_deflate_level: int = 6
    snappy: bool = False
    sample_rate: int = 0
    auth_required: bool = False
    output_buffer_size: int = 16_384
    output_buffer_timeout: int = 250
    negotiated: bool = True

    @classmethod
    def parse(cls, data: bytes) -> IdentifyResponse:
        """Parse the reply to IDENTIFY: JSON when negotiated, plain ``OK`` otherwise."""
        if data == b"OK":
            return cls(negotiated=False)
        if not data.startswith(b"{"):
            raise ProtocolError(f"unexpected IDENTIFY reply {data[:80]!r}")
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested JSON
            raise ProtocolError(f"IDENTIFY reply is not valid JSON: {data[:80]!r}") from exc
        if not isinstance(raw, dict):
            raise ProtocolError(f"IDENTIFY reply is not a JSON object: {data[:80]!r}")
        known = {f.name: f for f in dataclasses.fields(cls) if f.name != "negotiated"}
        values: dict[str, Any] = {}
        for name, value in raw.items():
            field = known.get(name)
            if field is None:
                continue
            expected = type(getattr(cls(), name))
            if expected is int and (
                (isinstance(value, int) and not isinstance(value, bool))
                or (isinstance(value, float) and value.is_integer())  # not inf, NaN or 2.5
            ):
                values[name] = int(value)
            elif type(value) is expected and expected in (bool, str):
                values[name] = value
            else:
                raise ProtocolError(f"IDENTIFY reply field {name} has unexpected value {value!r}")
        return cls(**values)


@dataclasses.dataclass(frozen=True, slots=True)
class AuthResponse:
    """nsqd's reply to a successful AUTH."""

    identity: str = ""
    identity_url: str = ""
    permission_count: int = 0

    @classmethod
    def parse(cls, data: bytes) -> AuthResponse:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ProtocolError(f"AUTH reply is not valid JSON: {data[:80]!r}") from exc
        if not isinstance(raw, dict):
            raise ProtocolError(f"AUTH reply is not a JSON object: {data[:80]!r}")
        count = raw.get("permission_count", 0)
        if isinstance(count, bool) or not isinstance(count, int):
            raise ProtocolError(f"AUTH reply permission_count is not an int: {count!r}")
        return cls(
            identity=str(raw.get("identity", "")),
            identity_url=str(raw.get("identity_url", "")),
            permission_count=count,
        )


def _ms(value: float | int | object) -> int:
    if isinstance(value, float):
        return round(value)
    return value  # type: ignore[return-value]


def _allowed(name: str, value: int, specials: tuple[int, ...], lo: int, hi: int, unit: str) -> None:
    if value in specials or lo <= value <= hi:
        return
    extra = "".join(f"{s} or " for s in specials)
    hint = ""
    if unit.startswith(" ms") and 0 < value < lo and lo <= value * 1000 <= hi:
        hint = f"; durations are milliseconds: did you mean {value * 1000}?"
    raise ConfigError(f"{name}={value} is invalid: nsqd accepts {extra}{lo}..{hi}{unit}{hint}")
