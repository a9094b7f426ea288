"""What every ``nsqclient`` subcommand shares: address flags with their environment fallbacks,
connection options passed through to :class:`~nsqclient.config.Config`, signal handling, and
the exit codes.

Addresses: when any address flag of a command is given on the command line, only the flags
count; otherwise the environment variables that ``test_service/start.sh`` writes to its
``cluster.env`` (``NSQD_TCP_ADDRESSES``, ``NSQD_HTTP_ADDRESSES``, ``NSQLOOKUPD_HTTP_ADDRESSES``,
comma-separated); otherwise nsqd on localhost. Mixing the two silently would connect to a cluster
nobody asked for.

Exit codes: 0 success, 1 an NSQ (or I/O) error reported as one line, 2 bad usage, 128 + the
signal number when a signal ended the command (130 for Ctrl-C, 143 for SIGTERM; see
:mod:`._running`).
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from ..config import Config
from ..errors import ConfigError
from ..protocol.names import validate_channel, validate_topic

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_address_flags",
    "add_connection_flags",
    "add_https_flags",
    "channel_name",
    "check_lookupds",
    "config_from_args",
    "delimiter",
    "error_line",
    "http_addresses",
    "http_verify",
    "not_found",
    "report",
    "require_reachable",
    "resolve_addresses",
    "topic_name",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

# address kind -> (flag, environment variable, what it names)
ADDRESS_KINDS: dict[str, tuple[str, str, str]] = {
    "nsqd_tcp": ("--nsqd-tcp-address", "NSQD_TCP_ADDRESSES", "nsqd TCP address"),
    "nsqd_http": ("--nsqd-http-address", "NSQD_HTTP_ADDRESSES", "nsqd HTTP address"),
    "lookupd_http": (
        "--lookupd-http-address",
        "NSQLOOKUPD_HTTP_ADDRESSES",
        "nsqlookupd HTTP address",
    ),
}
DEFAULTS = {"nsqd_tcp": "127.0.0.1:4150", "nsqd_http": "127.0.0.1:4151"}
AUTH_SECRET_ENV = "NSQ_AUTH_SECRET"


class UsageError(Exception):
    """Bad usage found after parsing (exit code 2)."""


# -- reporting errors ----------------------------------------------------------------------------


def error_line(command: str, exc: BaseException) -> str:
    """``nsqclient COMMAND: error: ...``, the one line an error is said in."""
    if isinstance(exc, OSError) and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    return f"nsqclient {command}: error: {text}"


def not_found(what: str, where: Sequence[str]) -> Exception:
    """The error (exit code 1) for a ``--topic``/``--channel`` that nothing holds: a silent
    empty answer would read as "exists, and is empty"."""
    from ..errors import NSQError

    places = ", ".join(where) or "no nsqd (lookupd lists none)"
    return NSQError(
        f"{what} does not exist on {places}: check the name (`nsqclient topics` lists them), "
        "or create it first"
    )


def report(debug: bool, text: str, exc: BaseException | None = None) -> None:
    """The one place every command says an error: ``exc``'s traceback first under ``--debug``,
    then ``text`` on stderr. Commands that go on after an error, or say more than the
    exception does, call it themselves; the rest raise and :func:`nsqclient.cli.main` calls it."""
    if debug and exc is not None:
        traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# -- argument types ------------------------------------------------------------------------------


def topic_name(text: str) -> str:
    """argparse type: a topic nsqd accepts (checked before anything connects)."""
    try:
        validate_topic(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def channel_name(text: str) -> str:
    try:
        validate_channel(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def delimiter(text: str) -> bytes:
    r"""argparse type: a byte string with backslash escapes (``\n``, ``\0``, ``\x1e``)."""
    try:
        value = codecs.escape_decode(text.encode("utf-8"))[0]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad delimiter {text!r}: {exc}") from None
    if not isinstance(value, bytes) or not value:
        raise argparse.ArgumentTypeError("the delimiter must not be empty")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


# -- addresses -----------------------------------------------------------------------------------


def add_address_flags(parser: argparse.ArgumentParser, kinds: Sequence[str]) -> None:
    group = parser.add_argument_group(
        "addresses (repeat a flag or separate by commas; without any address flag the "
        + ", ".join(f"${ADDRESS_KINDS[k][1]}" for k in kinds)
        + " variables are used, else nsqd on 127.0.0.1)"
    )
    for kind in kinds:
        flag, _env, what = ADDRESS_KINDS[kind]
        group.add_argument(
            flag, dest=kind, action="append", default=None, metavar="HOST:PORT", help=what
        )


def _split(values: Sequence[str] | str | None) -> list[str]:
    if not values:
        return []
    items = [values] if isinstance(values, str) else values
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def resolve_addresses(
    args: argparse.Namespace,
    kinds: Sequence[str],
    *,
    default: str | None,
    environ: dict[str, str] | None = None,
) -> dict[str, list[str]]:
    """Addresses of each kind: the flags, else the environment, else ``default`` (a kind)."""
    env = os.environ if environ is None else environ
    found = {kind: _split(getattr(args, kind, None)) for kind in kinds}
    if not any(found.values()):
        found = {kind: _split(env.get(ADDRESS_KINDS[kind][1])) for kind in kinds}
    if not any(found.values()) and default is not None:
        found[default] = [DEFAULTS[default]]
    return found


def http_addresses(addresses: Sequence[str]) -> list[str]:
    """``host:port`` or ``https://host:port`` -> base URLs our HTTP clients take."""
    from ..addresses import parse_http_address

    return [parse_http_address(a, 4151) for a in addresses]


async def check_lookupds(args: argparse.Namespace, addresses: Sequence[str]) -> None:
    """Fail at once when no lookupd answers (a Reader or Writer would poll them forever)."""
    from ..http import LookupdHTTPClient

    errors: list[BaseException] = []
    for address in http_addresses(addresses):
        async with LookupdHTTPClient(address, timeout=3.0, verify=http_verify(args)) as client:
            try:
                await client.ping()
                return
            except Exception as exc:
                errors.append(exc)
    if errors:
        raise errors[0]


async def require_reachable(addresses: Sequence[str], timeout: float) -> None:
    """Fail at once (ConnectError) when no nsqd TCP address accepts a connection.

    Readers and Writers retry an unreachable nsqd in the background, right for a service
    started before its nsqd; a command typed at a shell should instead say at once that
    nothing is there. This opens a plain TCP connection (sending the protocol magic, so nsqd
    logs a normal disconnect), nothing more: TLS or AUTH refusals are raised by the client.
    """
    from ..addresses import format_address, parse_address
    from ..errors import ConnectError

    failures: list[str] = []
    for text in addresses:
        host, port = parse_address(text, 4150)
        try:
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            failures.append(f"{format_address(host, port)} ({exc or 'timed out'})")
            continue
        writer.write(b"  V2")
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass
        return
    if failures:
        raise ConnectError(
            "cannot connect to nsqd " + "; ".join(failures) + ": is nsqd running there?"
        )


# -- connection options ---------------------------------------------------------------------------


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """TLS, compression and AUTH with the names of our Config fields (``--tls-v1`` etc.)."""
    group = parser.add_argument_group("connection options (named as nsqclient.Config fields)")
    group.add_argument("--tls-v1", action="store_true", help="upgrade connections to TLS")
    group.add_argument("--tls-ca-file", metavar="PATH", help="CA bundle to verify nsqd with")
    group.add_argument("--tls-cert-file", metavar="PATH", help="client certificate")
    group.add_argument("--tls-key-file", metavar="PATH", help="client certificate's key")
    group.add_argument(
        "--tls-insecure-skip-verify", action="store_true", help="do not verify nsqd (testing only)"
    )
    group.add_argument("--tls-server-hostname", metavar="NAME", help="name to verify instead")
    group.add_argument("--tls-min-version", metavar="V", help="tls1.2 or tls1.3")
    group.add_argument("--snappy", action="store_true", help="snappy compression")
    group.add_argument("--deflate", action="store_true", help="deflate compression")
    group.add_argument("--deflate-level", type=int, metavar="N", help="1..9 (default 6)")
    group.add_argument(
        "--auth-secret",
        metavar="SECRET",
        help=f"AUTH secret (default ${AUTH_SECRET_ENV}; the variable keeps it out of `ps`)",
    )
    group.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other Config field, e.g. --opt dial_timeout=3000 (durations in ms; repeat)",
    )


_PASSED = (
    "tls_v1",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_insecure_skip_verify",
    "tls_server_hostname",
    "tls_min_version",
    "snappy",
    "deflate",
    "deflate_level",
)


def _option_value(text: str) -> object:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def config_from_args(
    args: argparse.Namespace, environ: dict[str, str] | None = None, **options: Any
) -> Config:
    """The Config for this command line; a bad value raises ConfigError (exit code 2)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name in _PASSED:
        value = getattr(args, name, None)
        if value not in (None, False):
            values[name] = value
    secret = getattr(args, "auth_secret", None) or env.get(AUTH_SECRET_ENV) or None
    if secret is not None:
        values["auth_secret"] = secret
    for item in getattr(args, "opt", []):
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--opt takes NAME=VALUE, got {item!r}")
        values[name.strip().replace("-", "_")] = _option_value(text.strip())
    values.update(options)
    return Config.from_options(**values)


def add_https_flags(parser: argparse.ArgumentParser) -> None:
    """For commands that only speak HTTP: how to verify ``https://`` addresses."""
    group = parser.add_argument_group("HTTPS (for https:// addresses)")
    group.add_argument("--tls-ca-file", metavar="PATH", help="CA bundle to verify the server with")
    group.add_argument(
        "--tls-insecure-skip-verify", action="store_true", help="do not verify (testing only)"
    )


def http_verify(args: argparse.Namespace) -> Any:
    """``verify`` for the HTTP clients: our TLS flags applied to ``https://`` addresses."""
    if getattr(args, "tls_insecure_skip_verify", False):
        return False
    return getattr(args, "tls_ca_file", None) or True
