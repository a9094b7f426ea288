"""nsqd's and nsqlookupd's command lines, parsed the way Go's ``flag`` package does.

So the embedded server can stand in for ``nsqd`` / ``nsqlookupd`` in another project's test
script: ``-flag``, ``--flag``, ``-flag=value``, ``-flag value`` (not for booleans), parsing stops
at the first non-flag argument or ``--``. Every flag of nsqd 1.3.0 / nsqlookupd 1.3.0 is known
(the lists of their ``--help``) with its Go type; those without meaning in memory are accepted
and ignored, the caller says so under ``--verbose``. An unknown flag, or a value Go would not
parse, is an error with the message Go's ``flag`` prints (the caller exits 2, as Go does).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = [
    "NSQD_FLAGS",
    "NSQLOOKUPD_FLAGS",
    "Flag",
    "FlagError",
    "Parsed",
    "check_value",
    "parse",
    "usage",
]


@dataclasses.dataclass(frozen=True)
class Flag:
    """``boolean``: takes no separate value; ``applies``: the embedded server uses it; ``kind``:
    the Go type, so a bad value gets Go's message (``string``, ``int``, ``duration``, ``bool``,
    ``list``, ``floats``, ``level``, ``tls-version``, ``tls-required``)."""

    boolean: bool = False
    applies: bool = True
    kind: str = "string"


def _f(kind: str, applies: bool = True) -> Flag:
    return Flag(kind in ("bool", "tls-required"), applies, kind)


_S, _I, _D, _B, _L = _f("string"), _f("int"), _f("duration"), _f("bool"), _f("list")
_IGN_S, _IGN_I, _IGN_D, _IGN_B = (
    _f(k, applies=False) for k in ("string", "int", "duration", "bool")
)

NSQD_FLAGS: Final[Mapping[str, Flag]] = {
    "auth-http-address": _L,
    "broadcast-address": _S,
    "broadcast-http-port": _I,
    "broadcast-tcp-port": _I,
    "config": _S,
    "data-path": _IGN_S,
    "deflate": _B,
    "e2e-processing-latency-percentile": _f("floats", applies=False),
    "e2e-processing-latency-window-time": _IGN_D,
    "http-address": _S,
    "http-client-connect-timeout": _D,
    "http-client-request-timeout": _D,
    "https-address": _S,
    "log-level": _f("level"),
    "log-prefix": _S,
    "lookupd-tcp-address": _L,
    "max-body-size": _I,
    "max-bytes-per-file": _IGN_I,
    "max-channel-consumers": _I,
    "max-deflate-level": _I,
    "max-heartbeat-interval": _D,
    "max-msg-size": _I,
    "max-msg-timeout": _D,
    "max-output-buffer-size": _I,
    "max-output-buffer-timeout": _D,
    "max-rdy-count": _I,
    "max-req-timeout": _D,
    "mem-queue-size": _I,
    "min-output-buffer-timeout": _D,
    "msg-timeout": _D,
    "node-id": _I,
    "output-buffer-timeout": _D,
    "queue-scan-selection-count": _I,
    "queue-scan-worker-pool-max": _I,
    "snappy": _B,
    "statsd-address": _IGN_S,
    "statsd-exclude-ephemeral": _IGN_B,
    "statsd-interval": _IGN_D,
    "statsd-mem-stats": _IGN_B,
    "statsd-prefix": _IGN_S,
    "statsd-udp-packet-size": _IGN_I,
    "sync-every": _IGN_I,
    "sync-timeout": _IGN_D,
    "tcp-address": _S,
    "tls-cert": _S,
    "tls-client-auth-policy": _S,
    "tls-key": _S,
    "tls-min-version": _f("tls-version"),
    "tls-required": _f("tls-required"),  # Go's IsBoolFlag: alone, or =true/false/tcp-https
    "tls-root-ca-file": _S,
    "verbose": _B,  # nsqd 1.3.0: deprecated, no effect; here: --log-level=debug
    "version": _B,
    "worker-id": _IGN_B,
}

NSQLOOKUPD_FLAGS: Final[Mapping[str, Flag]] = {
    "broadcast-address": _S,
    "config": _S,
    "http-address": _S,
    "inactive-producer-timeout": _D,
    "log-level": _f("level"),
    "log-prefix": _S,
    "tcp-address": _S,
    "tombstone-lifetime": _D,
    "verbose": _B,
    "version": _B,
}

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_DURATION: Final = re.compile(
    r"[-+]?(?:0|(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)"
)
_LEVELS: Final = ("debug", "info", "warn", "error", "fatal")
_TLS_VERSIONS: Final = ("ssl3.0", "tls1.0", "tls1.1", "tls1.2", "tls1.3")


def _go_int(text: str) -> int:
    """``strconv.ParseInt(text, 0, 64)``: 0x/0o/0b prefixes, a leading 0 for octal, ``_``."""
    body = text.lstrip("+-")
    if len(body) > 1 and body[0] == "0" and body[1].isdigit():
        text = text.replace(body, "0o" + body[1:], 1)
    value = int(text, 0)  # ValueError: Go's "parse error"
    if not -(1 << 63) <= value < 1 << 63:
        raise OverflowError
    return value


def check_value(name: str, flag: Flag, value: str) -> str:
    """``value`` as Go's flag would take it for ``-name`` (normalised: decimal ints,
    ``true``/``false``), else :class:`FlagError` with Go's message."""
    kind = flag.kind
    if kind == "bool":
        if value in _TRUE or value in _FALSE:
            return "true" if value in _TRUE else "false"
        raise FlagError(f'invalid boolean value "{value}" for -{name}: parse error')
    if kind == "tls-required":
        if value.lower() == "tcp-https" or value in _TRUE or value in _FALSE:
            return value.lower() if value.lower() == "tcp-https" else str(value in _TRUE).lower()
        raise FlagError(
            f'invalid boolean value "{value}" for -{name}: '
            f'strconv.ParseBool: parsing "{value}": invalid syntax'
        )
    reason = ""
    if kind == "int":
        try:
            return str(_go_int(value))
        except OverflowError:
            reason = "value out of range"
        except ValueError:
            reason = "parse error"
    elif kind == "duration" and not _DURATION.fullmatch(value):
        reason = "parse error"
    elif kind == "level" and value.lower() not in _LEVELS:
        reason = f"invalid log level '{value}' (debug, info, warn, error, fatal)"
    elif kind == "tls-version" and value and value.lower() not in _TLS_VERSIONS:
        reason = f'unknown tlsVersionOption "{value.lower()}"'
    if reason:
        raise FlagError(f'invalid value "{value}" for flag -{name}: {reason}')
    return value


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
        value = check_value(name, flag, value)
        if flag.applies:
            out.values.append((name, value))
        else:
            out.ignored.append(name)
    out.rest = items
    return out


def usage(prog: str, flags: Mapping[str, Flag]) -> str:
    """A short ``--help``: the flags, which ones the embedded server ignores."""
    lines = [f"Usage of {prog}:", "  (nsqclient's embedded server, with the 1.3.0 daemon's flags)"]
    for name, flag in flags.items():
        note = "" if flag.applies else "  (accepted, no effect in memory)"
        lines.append(f"  -{name}{'' if flag.boolean else ' value'}{note}")
    return "\n".join(lines)
