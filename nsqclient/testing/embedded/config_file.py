"""``--config FILE``: nsqd's and nsqlookupd's TOML config files, resolved as the daemons do.

The daemons decode the file into a map and let ``go-options`` fill each option from, highest
first: the command-line flag, the file's key, the default. A key is the flag's name with ``_``
for ``-`` except where nsqd's ``cfg`` tag renames it (``id``, ``nsqlookupd_tcp_addresses``,
``auth_http_addresses``, ``e2e_processing_latency_percentiles``); durations are Go strings or
integer milliseconds, lists are TOML arrays or comma-separated strings. Keys the daemon does not
know are ignored by real nsqd without a word; here they are ignored too (the daemon starts, as
real does) but named in a ``WARNING`` line, so a typo is not silent. A value the daemon could not
use is an error (exit 1), as real nsqd's fatal ``failed parsing ...`` is.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from typing import Any, Final

from .goflags import Flag, FlagError, Parsed, check_value

__all__ = ["ConfigError", "Resolved", "apply_config"]

_RENAMED: Final = {
    "id": "node-id",
    "nsqlookupd_tcp_addresses": "lookupd-tcp-address",
    "auth_http_addresses": "auth-http-address",
    "e2e_processing_latency_percentiles": "e2e-processing-latency-percentile",
}
_NOT_OPTIONS: Final = frozenset({"version", "config", "verbose", "worker-id"})  # no cfg key


class ConfigError(ValueError):
    """The file cannot be read or holds a value the daemon would refuse (nsqd exits 1)."""


@dataclasses.dataclass
class Resolved:
    """What the file added: ``applied`` flag names, ``unknown`` keys (ignored, as nsqd does)."""

    applied: list[str] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)


def _keys(flags: Mapping[str, Flag]) -> dict[str, str]:
    """config key -> flag name, for the flags that are options of the daemon."""
    names = {name.replace("-", "_"): name for name in flags if name not in _NOT_OPTIONS}
    for key, name in _RENAMED.items():
        if name in flags:
            names.pop(name.replace("-", "_"), None)
            names[key] = name
    return names


def _texts(key: str, flag: Flag, value: Any) -> list[str]:
    """The file's value as command-line value(s) of ``flag`` (go-options' coercion)."""
    kind = flag.kind
    if kind in ("list", "floats"):
        if isinstance(value, str):
            return value.split(",")
        if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
            return [str(v) for v in value]
    elif kind == "duration" and isinstance(value, int) and not isinstance(value, bool):
        return [f"{value}ms"]  # go-options: an integer duration is milliseconds
    elif kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return [str(value)]
    elif kind == "int" and isinstance(value, str) and value.lstrip("+-").isdigit():
        return [value]  # strconv.ParseInt(value, 10, 64)
    elif kind in ("bool", "tls-required") and isinstance(value, bool):
        return [str(value).lower()]
    elif isinstance(value, str) and kind not in ("int", "list", "floats"):
        return [value]
    raise ConfigError(f"{key} = {value!r}: not a valid {kind} value for -{key.replace('_', '-')}")


def apply_config(path: str, parsed: Parsed, flags: Mapping[str, Flag]) -> Resolved:
    """Add the file's settings to ``parsed`` where the command line did not set the flag."""
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"failed to load config file {path} - {exc.strerror}: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"failed to load config file {path} - toml: {exc}") from None
    given = {name for name, _ in parsed.values} | set(parsed.ignored)
    keys = _keys(flags)
    out = Resolved()
    for key, value in document.items():
        name = keys.get(key)
        if name is None:
            out.unknown.append(key)
            continue
        if name in given:
            continue  # the command line wins
        flag = flags[name]
        try:
            texts = [check_value(name, flag, text) for text in _texts(key, flag, value)]
        except FlagError as exc:
            raise ConfigError(f"failed parsing {key} {value} ({exc})") from None
        if flag.applies:
            parsed.values.extend((name, text) for text in texts)
        else:
            parsed.ignored.append(name)
        out.applied.append(name)
    return out
