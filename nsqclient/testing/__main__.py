"""``python -m nsqclient.testing`` (also ``nsqclient nsqd``): run the embedded nsqd
(and nsqlookupd) from a shell, or stand in for ``nsqd`` / ``nsqlookupd`` in a test script.

    python -m nsqclient.testing --tcp-address 127.0.0.1:4150 --http-address 127.0.0.1:4151
    python -m nsqclient.testing --lookupd      # plus an embedded nsqlookupd it registers with
    python -m nsqclient.testing --lookupd --nsqd-count 3 --tcp-address 127.0.0.1:0 \
        --http-address 127.0.0.1:0 --env-file cluster.env   # a small cluster on free ports
    python -m nsqclient.testing nsqd --data-path=/tmp -lookupd-tcp-address 127.0.0.1:4160
    python -m nsqclient.testing nsqlookupd     # nsqlookupd alone
    python -m nsqclient.testing shims DIR      # DIR/nsqd and DIR/nsqlookupd that run these two

Every form takes nsqd's (or nsqlookupd's) own flags as Go parses them (``-flag``, ``--flag``,
``-flag=value``, ``-flag value``); flags without meaning in memory (``--data-path``,
``--statsd-*``, ...) are accepted and ignored, ``--verbose`` says which and copies the daemons'
log lines to stderr. The server keeps messages in memory only: a persistence flag
(``--data-path``, ``--sync-every``, ...) makes it say at start-up, on stderr (a ``note:`` line,
or a WARNING in nsqd's log format where the daemons' log is shown), that nothing survives a
stop. ``nsqd`` and ``nsqlookupd`` use the daemons' defaults (``0.0.0.0:4150``, ...);
the plain form listens on 127.0.0.1 and adds ``--lookupd``, ``--nsqd-count``, ``--env-file``,
``--lookupd-tcp-listen`` and ``--lookupd-http-listen``. Prints the listening addresses, then
serves until SIGTERM or Ctrl-C, when it closes every connection and exits 0.

``--env-file`` writes the addresses as ``KEY=VALUE`` lines (``NSQD_TCP_ADDRESSES=...``, the
``cluster.env`` format) once everything listens, for scripts and ``nsqclient bench --cluster-env``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import hashlib
import os
import shlex
import signal
import socket
import sys
import traceback
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from .embedded import EmbeddedLookupd, EmbeddedNsqd
from .embedded.config_file import ConfigError, apply_config
from .embedded.goflags import NSQD_FLAGS, NSQLOOKUPD_FLAGS, Flag, FlagError, Parsed, parse, usage
from .embedded.logs import log_line
from .embedded.nsqd import VERSION
from .embedded.options import split_address

#: nsqd's flags about its disk queue: accepted, but the embedded server keeps messages in memory
PERSISTENCE_FLAGS = frozenset({"data-path", "max-bytes-per-file", "sync-every", "sync-timeout"})

_OWN_FLAGS: Mapping[str, Flag] = {
    "lookupd": Flag(boolean=True, kind="bool"),
    "nsqd-count": Flag(kind="int"),
    "env-file": Flag(),
    "lookupd-tcp-listen": Flag(),
    "lookupd-http-listen": Flag(),
}


@dataclasses.dataclass
class Config:
    """What to run: ``mode`` is ``embedded`` (the plain form), ``nsqd`` or ``nsqlookupd``."""

    mode: str
    flags: Parsed
    verbose: bool = False
    echo: bool = True  # the daemons' log lines on stderr (nsqd's default)
    debug: bool = False
    config_file: str | None = None
    unknown_keys: list[str] = dataclasses.field(default_factory=list)
    lookupd: bool = False
    nsqd_count: int = 1
    env_file: str | None = None
    lookupd_tcp_listen: str = "127.0.0.1:4160"
    lookupd_http_listen: str = "127.0.0.1:4161"


def _prog() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and name != "__main__.py" else "python -m nsqclient.testing"


def configure(argv: Sequence[str]) -> Config:
    """The command line as a :class:`Config`; raises FlagError (``help`` for ``-h``)."""
    mode = "embedded"
    if argv and argv[0] in ("nsqd", "nsqlookupd"):
        mode, argv = argv[0], argv[1:]
    table = {"nsqd": NSQD_FLAGS, "nsqlookupd": NSQLOOKUPD_FLAGS}.get(
        mode, {**NSQD_FLAGS, **_OWN_FLAGS}
    )
    flags = parse(argv, table)
    config = Config(mode, flags, verbose=flags.truthy("verbose"))
    flags.pop("verbose")
    if flags.pop("version"):
        raise FlagError("version")
    if config.verbose and flags.get("log-level") is None:
        flags.values.append(("log-level", "debug"))  # nsqd's old --verbose: debug logging
    config_file = flags.pop("config")
    if config_file and config_file[-1]:
        config.config_file = config_file[-1]
        config.unknown_keys = apply_config(config_file[-1], flags, table).unknown
    level = (flags.get("log-level") or "info").lower()
    config.debug = level == "debug"
    # the plain form stays quiet unless asked; nsqd and nsqlookupd log at INFO as the daemons
    config.echo = mode != "embedded" or config.verbose or flags.get("log-level") is not None
    if mode == "embedded":
        config.lookupd = flags.truthy("lookupd")
        flags.pop("lookupd")
        count = flags.pop("nsqd-count")
        if count:
            try:
                config.nsqd_count = int(count[-1])
            except ValueError:
                raise FlagError(f"--nsqd-count: not a number: {count[-1]!r}") from None
        env_file = flags.pop("env-file")
        config.env_file = env_file[-1] if env_file else None
        config.lookupd_tcp_listen = (flags.pop("lookupd-tcp-listen") or ["127.0.0.1:4160"])[-1]
        config.lookupd_http_listen = (flags.pop("lookupd-http-listen") or ["127.0.0.1:4161"])[-1]
    return config


def _shifted(address: str, index: int) -> str:
    """``address`` for the ``index``-th nsqd: port + 100 * index (port 0 stays 0)."""
    host, port = split_address(address)
    port = port + 100 * index if port else 0
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _nsqd(config: Config, index: int, lookupds: list[str]) -> EmbeddedNsqd:
    flags = dataclasses.replace(config.flags, values=list(config.flags.values))
    if config.mode == "nsqd":  # nsqd's own defaults
        tcp = flags.pop("tcp-address")[-1:] or ["0.0.0.0:4150"]
        http = flags.pop("http-address")[-1:] or ["0.0.0.0:4151"]
        https = flags.pop("https-address")[-1:] or (
            ["0.0.0.0:4152"] if flags.get("tls-cert") else []
        )
    else:
        tcp = flags.pop("tcp-address")[-1:] or ["127.0.0.1:4150"]
        http = flags.pop("http-address")[-1:] or ["127.0.0.1:4151"]
        https = flags.pop("https-address")[-1:]
    node_id = flags.pop("node-id")[-1:]
    if not node_id and config.mode == "nsqd":
        node_id = [str(_default_node_id())]
    return EmbeddedNsqd(
        _shifted(tcp[0], index),
        _shifted(http[0], index),
        https_address=_shifted(https[0], index) if https else None,
        lookupd_tcp_addresses=lookupds,
        node_id=int(node_id[0]) + index if node_id else index,
        extra_args=flags.as_args(),
    )


def _default_node_id() -> int:
    """nsqd's default ``--node-id``: CRC-32 of the MD5 of the hostname, modulo 1024."""
    digest = hashlib.md5(socket.gethostname().encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


def _echo(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _write_env(
    path: str, nsqds: list[EmbeddedNsqd], lookupds: list[str], lookupd_http: str
) -> None:
    lines = [
        "NSQD_TCP_ADDRESSES=" + ",".join(n.tcp_address for n in nsqds),
        "NSQD_HTTP_ADDRESSES=" + ",".join(n.http_address for n in nsqds),
        "NSQLOOKUPD_TCP_ADDRESSES=" + ",".join(lookupds),
        "NSQLOOKUPD_HTTP_ADDRESSES=" + lookupd_http,
    ]
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(target)  # atomic: a reader sees all of it or nothing


def memory_only_notice(ignored: Sequence[str]) -> str | None:
    """The start-up notice when a persistence flag was given (None when none was): one who
    asks for a data path expects messages to survive a restart, and here they do not."""
    given = [f"-{name}" for name in dict.fromkeys(ignored) if name in PERSISTENCE_FLAGS]
    if not given:
        return None
    return (
        f"{', '.join(given)} ignored: the embedded server keeps messages in memory only, "
        "so every message it holds is lost when it stops or restarts. For a queue that must "
        "survive a restart, run real nsqd (https://nsq.io/deployment/installing.html)."
    )


async def serve(config: Config) -> None:
    if config.nsqd_count < 1:
        raise ValueError("--nsqd-count must be at least 1")
    notice = memory_only_notice(config.flags.ignored)
    if notice is not None and not config.echo:  # the plain form: its own line on stderr
        _echo(f"note: {notice}")
    if config.debug:
        for name in config.flags.ignored:
            if name not in PERSISTENCE_FLAGS:  # said above, always
                _echo(f"note: -{name} has no effect on the embedded server (ignored)")
        if config.flags.rest:
            _echo(f"note: arguments after the flags ignored: {' '.join(config.flags.rest)}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lookupd: EmbeddedLookupd | None = None
    nsqds: list[EmbeddedNsqd] = []
    lookupds: list[str] = []
    try:
        if config.mode == "nsqlookupd":
            flags = dataclasses.replace(config.flags, values=list(config.flags.values))
            tcp = flags.pop("tcp-address")[-1:] or ["0.0.0.0:4160"]
            http = flags.pop("http-address")[-1:] or ["0.0.0.0:4161"]
            lookupd = EmbeddedLookupd(tcp[0], http[0], extra_args=flags.as_args())
        elif config.lookupd:
            lookupd = EmbeddedLookupd(config.lookupd_tcp_listen, config.lookupd_http_listen)
        if lookupd is not None:
            if config.echo:
                lookupd.log.echo = _echo
            _warn_unknown(config, lookupd)
            await lookupd.start()
            lookupds.append(lookupd.tcp_address)
            print(f"nsqlookupd TCP  {lookupd.tcp_address}", flush=True)
            print(f"nsqlookupd HTTP {lookupd.http_address}", flush=True)
        for index in range(0 if config.mode == "nsqlookupd" else config.nsqd_count):
            nsqd = _nsqd(config, index, lookupds)
            if config.echo:
                nsqd.log.echo = _echo
            if lookupd is None:
                _warn_unknown(config, nsqd)
            if notice is not None and config.echo and index == 0:  # as nsqd logs: on stderr
                nsqd.log("WARN", notice)
            nsqds.append(nsqd)
            await nsqd.start()
            print(f"nsqd TCP  {nsqd.tcp_address}", flush=True)
            print(f"nsqd HTTP {nsqd.http_address}", flush=True)
            if nsqd.https_address:
                print(f"nsqd HTTPS {nsqd.https_address}", flush=True)
        if lookupd is not None and nsqds:
            await _wait_registered(lookupd, nsqds)
        if config.env_file:
            http_address = lookupd.http_address if lookupd else ""
            _write_env(config.env_file, nsqds, lookupds, http_address)
        print("ready (SIGTERM or Ctrl-C stops)", flush=True)
        await stop.wait()
    finally:
        print("stopping", flush=True)
        for nsqd in reversed(nsqds):
            await nsqd.stop()
        if lookupd is not None:
            await lookupd.stop()
        print("stopped", flush=True)


def _warn_unknown(config: Config, daemon: EmbeddedNsqd | EmbeddedLookupd) -> None:
    """Real nsqd ignores config keys it does not know without a word; we say which."""
    if config.unknown_keys:
        keys = ", ".join(config.unknown_keys)
        daemon.log("WARN", f"config file {config.config_file}: unknown keys ignored: {keys}")


async def _wait_registered(lookupd: EmbeddedLookupd, nsqds: list[EmbeddedNsqd]) -> None:
    """Until the embedded lookupd lists every nsqd (as ``start.sh`` waits for ``/nodes``)."""
    wanted = {(n.broadcast_address, n.broadcast_tcp_port) for n in nsqds}
    async with asyncio.timeout(10):
        while True:
            seen = {
                (p.peer.broadcast_address, p.peer.tcp_port)
                for p in lookupd.db.find_producers("client", "", "")
            }
            if wanted <= seen:
                return
            await asyncio.sleep(0.01)


def tune_gc() -> None:
    """A server process's collector for millions of queued messages (``bench_writer``).

    Every queued message is a GC-tracked object, and CPython's default thresholds (700, 10, 10)
    re-scan the growing backlog so often that collection took half of an MPUB's time. Messages
    form no cycles (refcounting frees them), so the young generations are scanned 70x less often
    and the start-up objects are moved out of the scans. Only in the server's own process: the
    threaded and in-loop servers leave their host's collector alone.
    """
    gc.freeze()
    gc.set_threshold(50_000, 100, 1000)


SHIM = """#!/bin/sh
# {name} played by nsqclient's embedded server (written by python -m nsqclient.testing shims)
exec {python} -m nsqclient.testing {name} "$@"
"""


def write_shims(folder: str) -> list[Path]:
    """``folder/nsqd`` and ``folder/nsqlookupd``: executables that run the embedded ones with
    this Python, for a PATH that a script calling ``nsqd`` / ``nsqlookupd`` uses."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("nsqd", "nsqlookupd"):
        path = target / name
        path.write_text(SHIM.format(name=name, python=shlex.quote(sys.executable)), "utf-8")
        path.chmod(0o755)
        written.append(path)
    return written


EXAMPLE = "--lookupd --tcp-address 127.0.0.1:0 --http-address 127.0.0.1:0 --env-file cluster.env"


def main(argv: Sequence[str] | None = None, prog: str | None = None, *, debug: bool = False) -> int:
    """Run the embedded server (or write the PATH shims); ``debug`` prints an error's traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    prog = prog or _prog()
    if args[:1] == ["shims"]:
        if len(args) != 2:
            print(f"usage: {prog} shims DIR", file=sys.stderr)
            return 2
        for path in write_shims(args[1]):
            print(path)
        print(f'put them first on PATH: export PATH="{Path(args[1]).resolve()}:$PATH"')
        return 0
    mode = args[0] if args[:1] in (["nsqd"], ["nsqlookupd"]) else ""
    try:
        config = configure(args)
    except FlagError as exc:
        if str(exc) == "version":
            print(f"{mode or 'nsqd'} v{VERSION} (nsqclient embedded server)")
            return 0
        table = {"nsqd": NSQD_FLAGS, "nsqlookupd": NSQLOOKUPD_FLAGS}.get(
            mode, {**NSQD_FLAGS, **_OWN_FLAGS}
        )
        text = usage(mode or prog, table)
        text += f"\n\nexample:\n  {prog} {EXAMPLE}\n  {prog} nsqd --data-path=/tmp"
        text += f"\n  {prog} nsqlookupd\n  {prog} shims DIR"
        if str(exc) == "help":
            print(text)
            return 0
        print(f"{exc}\n{text}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # nsqd's logFatal: one FATAL line, exit 1
        print(log_line(f"[{mode or 'nsqd'}] ", "FATAL", str(exc)), file=sys.stderr)
        return 1
    tune_gc()
    try:
        asyncio.run(serve(config))
    except BrokenPipeError:
        raise  # the reader of our output left: ``_entry`` (or the nsqclient CLI) ends quietly
    except (OSError, ValueError) as exc:
        if debug:
            traceback.print_exception(exc, file=sys.stderr)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _entry() -> int:
    """``python -m nsqclient.testing``: :func:`main`, and a reader of the output that left
    (``--help | head``) ends it quietly, as the ``nsqclient`` command does (exit 0)."""
    try:
        code = main()
        sys.stdout.flush()  # here, not at exit, where a closed pipe prints a traceback
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(_entry())
