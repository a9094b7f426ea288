"""nsqd's and nsqlookupd's command lines, parsed the way Go's ``flag`` package does.

So the embedded server can stand in for ``nsqd`` / ``nsqlookupd`` in another project's test
script: ``-flag``, ``--flag``, ``-flag=value``, ``-flag value`` (not for booleans), parsing stops
at the first non-flag argument or ``--``. Every flag of nsqd 1.3.0 / nsqlookupd 1.3.0 is known
(the lists of their ``--help``); those without meaning in memory are accepted and ignored, the
caller says so under ``--verbose``. An unknown flag is an error, as in Go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ["NSQD_FLAGS", "NSQLOOKUPD_FLAGS", "Flag", "FlagError", "Parsed", "parse", "usage"]


@dataclasses.dataclass(frozen=True)
class Flag:
    """``boolean``: takes no separate value; ``applies``: the embedded server uses it."""

    boolean: bool = False
    applies: bool = True


_B, _V, _IGN, _IGN_B = Flag(True), Flag(), Flag(applies=False), Flag(True, applies=False)

NSQD_FLAGS: Final[Mapping[str, Flag]] = {
    "auth-http-address": _V,
    "broadcast-address": _V,
    "broadcast-http-port": _IGN,
    "broadcast-tcp-port": _IGN,
    "config": _IGN,
    "data-path": _IGN,
    "deflate": _B,
    "e2e-processing-latency-percentile": _IGN,
    "e2e-processing-latency-window-time": _IGN,
    "http-address": _V,
    "http-client-connect-timeout": _V,
    "http-client-request-timeout": _V,
    "https-address": _V,
    "log-level": _V,
    "log-prefix": _IGN,
    "lookupd-tcp-address": _V,
    "max-body-size": _V,
    "max-bytes-per-file": _IGN,
    "max-channel-consumers": _V,
    "max-deflate-level": _V,
    "max-heartbeat-interval": _V,
    "max-msg-size": _V,
    "max-msg-timeout": _V,
    "max-output-buffer-size": _V,
    "max-output-buffer-timeout": _V,
    "max-rdy-count": _V,
    "max-req-timeout": _V,
    "mem-queue-size": _V,
    "min-output-buffer-timeout": _V,
    "msg-timeout": _V,
    "node-id": _V,
    "output-buffer-timeout": _V,
    "queue-scan-selection-count": _IGN,
    "queue-scan-worker-pool-max": _IGN,
    "snappy": _B,
    "statsd-address": _IGN,
    "statsd-exclude-ephemeral": _IGN_B,
    "statsd-interval": _IGN,
    "statsd-mem-stats": _IGN_B,
    "statsd-prefix": _IGN,
    "statsd-udp-packet-size": _IGN,
    "sync-every": _IGN,
    "sync-timeout": _IGN,
    "tcp-address": _V,
    "tls-cert": _V,
    "tls-client-auth-policy": _V,
    "tls-key": _V,
    "tls-min-version": _V,
    "tls-required": _B,  # Go's IsBoolFlag: "-tls-required" alone, or =true/false/tcp-https
    "tls-root-ca-file": _V,
    "verbose": _B,  # nsqd: deprecated, no effect; here: daemon logs on stderr
    "version": _B,
    "worker-id": _IGN_B,
}

NSQLOOKUPD_FLAGS: Final[Mapping[str, Flag]] = {
    "broadcast-address": _V,
    "config": _IGN,
    "http-address": _V,
    "inactive-producer-timeout": _V,
    "log-level": _IGN,
    "log-prefix": _IGN,
    "tcp-address": _V,
    "tombstone-lifetime": _V,
    "verbose": _B,
    "version": _B,
}


class FlagError(ValueError):
    """A command line Go's ``flag`` would refuse (the message names the flag)."""


@dataclasses.dataclass
class Parsed:
    """``values``: (name, value) in order, repeats kept; ``ignored``: flags accepted without
    effect; ``rest``: arguments after the flags (nsqd ignores them too)."""

    values: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)
    rest: list[str] = dataclasses.field(default_factory=list)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The last value given for ``name``."""
        found = [v for n, v in self.values if n == name]
        return found[-1] if found else default

    def truthy(self, name: str) -> bool:
        return (self.get(name) or "false").lower() in ("1", "t", "true")

    def pop(self, name: str) -> list[str]:
        """Every value of ``name``, removed from :attr:`values`."""
        found = [v for n, v in self.values if n == name]
        self.values = [(n, v) for n, v in self.values if n != name]
        return found

    def as_args(self) -> list[str]:
        """The applied flags as ``--name=value`` (what ``extra_args`` takes)."""
        return [f"--{n}={v}" for n, v in self.values]


_HELP: Final = frozenset({"h", "help"})
_BOOL_WORDS: Final = {"tls-required": ("true", "false", "tcp-https")}


def parse(argv: Sequence[str], flags: Mapping[str, Flag]) -> Parsed:
    """Go's ``FlagSet.Parse`` over ``flags``; ``-h``/``--help`` raise :class:`FlagError` with
    ``help`` as message. For compatibility with this CLI's older forms, a boolean flag may also
    take ``true``/``false`` (``tcp-https`` for ``tls-required``) as the next argument (Go would
    stop parsing there)."""
    out = Parsed()
    items = list(argv)
    while items:
        arg = items.pop(0)
        if arg == "--":
            break
        if len(arg) < 2 or not arg.startswith("-"):
            items.insert(0, arg)
            break
        body = arg[2:] if arg.startswith("--") else arg[1:]
        if not body or body.startswith("-") or body.startswith("="):
            raise FlagError(f"bad flag syntax: {arg}")
        name, sep, value = body.partition("=")
        if name in _HELP:
            raise FlagError("help")
        flag = flags.get(name)
        if flag is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if not sep:
            if flag.boolean:
                value = "true"
                if items and items[0].lower() in _BOOL_WORDS.get(name, ("true", "false")):
                    value = items.pop(0)
            elif items:
                value = items.pop(0)
            else:
                raise FlagError(f"flag needs an argument: -{name}")
        if flag.applies:
            out.values.append((name, value))
        else:
            out.ignored.append(name)
    out.rest = items
    return out


def usage(prog: str, flags: Mapping[str, Flag]) -> str:
    """A short ``--help``: the flags, which ones the embedded server ignores."""
    lines = [f"Usage of {prog} (nsqclient's embedded server, nsqd 1.3.0's flags):"]
    for name, flag in flags.items():
        note = "" if flag.applies else "  (accepted, no effect in memory)"
        lines.append(f"  -{name}{'' if flag.boolean else ' value'}{note}")
    return "\n".join(lines)
