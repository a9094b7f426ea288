"""``python -m nsqclient.testing`` (also ``nsqclient-embedded-nsqd``): run the embedded nsqd
(and nsqlookupd) from a shell. A test server, not a replacement for nsqd.

Flags mirror nsqd's where they overlap; durations are milliseconds or Go durations (``500ms``,
``2s``, ``1m30s``). Prints the listening addresses, then serves until SIGTERM or Ctrl-C, when it
closes every connection and exits 0.

    python -m nsqclient.testing --tcp-address 127.0.0.1:4150 --http-address 127.0.0.1:4151
    python -m nsqclient.testing --lookupd      # plus an embedded nsqlookupd it registers with
    python -m nsqclient.testing --lookupd --nsqd-count 3 --tcp-address 127.0.0.1:0 \
        --http-address 127.0.0.1:0 --env-file cluster.env   # a small cluster on free ports

``--env-file`` writes the addresses in ``test_service/start.sh``'s ``cluster.env`` format
(``NSQD_TCP_ADDRESSES=...``) once everything listens, for scripts and ``nsqclient-benchmark``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from .embedded import EmbeddedLookupd, EmbeddedNsqd
from .embedded.options import go_duration_ms, split_address


def duration_ms(text: str) -> int:
    """``"60000"`` (ms) or a Go duration (``"60s"``, ``"1m30s"``, ``"500ms"``) in milliseconds."""
    if text.strip().isdigit():
        return int(text)
    try:
        return go_duration_ms(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}") from None


def _prog() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name and name != "__main__.py" else "python -m nsqclient.testing"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=_prog(),
        description="Run nsqclient's embedded nsqd (and optionally nsqlookupd) in-process.",
    )
    p.add_argument("--tcp-address", default="127.0.0.1:4150", help="HOST:PORT for TCP clients")
    p.add_argument("--http-address", default="127.0.0.1:4151", help="HOST:PORT for HTTP clients")
    p.add_argument("--https-address", default=None, help="HOST:PORT for HTTPS (with TLS)")
    p.add_argument("--broadcast-address", default=None, help="address registered with lookupd")
    p.add_argument(
        "--lookupd-tcp-address", action="append", default=[], help="lookupd TCP address (repeat)"
    )
    p.add_argument("--lookupd", action="store_true", help="also run an embedded nsqlookupd")
    p.add_argument(
        "--nsqd-count",
        type=int,
        default=1,
        help="number of nsqd (the i-th listens on the given ports + 100*i, or free ports for 0)",
    )
    p.add_argument(
        "--env-file", default=None, help="write the addresses here (cluster.env format) when up"
    )
    p.add_argument("--lookupd-tcp-listen", default="127.0.0.1:4160", help="its TCP HOST:PORT")
    p.add_argument("--lookupd-http-listen", default="127.0.0.1:4161", help="its HTTP HOST:PORT")
    p.add_argument("--msg-timeout", type=duration_ms, default=60_000)
    p.add_argument("--max-msg-timeout", type=duration_ms, default=900_000)
    p.add_argument("--max-req-timeout", type=duration_ms, default=3_600_000)
    p.add_argument("--max-heartbeat-interval", type=duration_ms, default=60_000)
    p.add_argument("--max-rdy-count", type=int, default=2500)
    p.add_argument("--max-msg-size", type=int, default=1_048_576)
    p.add_argument("--max-body-size", type=int, default=5_242_880)
    p.add_argument("--mem-queue-size", type=int, default=10_000)
    p.add_argument("--max-deflate-level", type=int, default=6)
    p.add_argument("--tls-cert", default=None)
    p.add_argument("--tls-key", default=None)
    p.add_argument("--tls-root-ca-file", default=None)
    p.add_argument("--tls-required", default="false", help="true, false or tcp-https")
    p.add_argument("--auth-http-address", action="append", default=[])
    p.add_argument("--snappy", default="true", choices=["true", "false"])
    p.add_argument("--deflate", default="true", choices=["true", "false"])
    return p


def _shifted(address: str, index: int) -> str:
    """``address`` for the ``index``-th nsqd: port + 100 * index (port 0 stays 0)."""
    host, port = split_address(address)
    port = port + 100 * index if port else 0
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _nsqd(args: argparse.Namespace, index: int, lookupds: list[str]) -> EmbeddedNsqd:
    tls_required: bool | str = args.tls_required
    if args.tls_required in ("true", "false"):
        tls_required = args.tls_required == "true"
    https = _shifted(args.https_address, index) if args.https_address else None
    return EmbeddedNsqd(
        _shifted(args.tcp_address, index),
        _shifted(args.http_address, index),
        https_address=https,
        broadcast_address=args.broadcast_address,
        lookupd_tcp_addresses=lookupds,
        msg_timeout=args.msg_timeout,
        max_msg_timeout=args.max_msg_timeout,
        max_req_timeout=args.max_req_timeout,
        max_heartbeat_interval=args.max_heartbeat_interval,
        max_rdy_count=args.max_rdy_count,
        max_msg_size=args.max_msg_size,
        max_body_size=args.max_body_size,
        mem_queue_size=args.mem_queue_size,
        max_deflate_level=args.max_deflate_level,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_root_ca_file=args.tls_root_ca_file,
        tls_required=tls_required,
        auth_http_address=args.auth_http_address or None,
        snappy=args.snappy == "true",
        deflate=args.deflate == "true",
        node_id=index,
    )


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


async def serve(args: argparse.Namespace) -> None:
    if args.nsqd_count < 1:
        raise ValueError("--nsqd-count must be at least 1")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lookupd: EmbeddedLookupd | None = None
    nsqds: list[EmbeddedNsqd] = []
    lookupds = list(args.lookupd_tcp_address)
    try:
        if args.lookupd:
            lookupd = await EmbeddedLookupd(
                args.lookupd_tcp_listen, args.lookupd_http_listen
            ).start()
            lookupds.append(lookupd.tcp_address)
            print(f"nsqlookupd TCP  {lookupd.tcp_address}", flush=True)
            print(f"nsqlookupd HTTP {lookupd.http_address}", flush=True)
        for index in range(args.nsqd_count):
            nsqd = _nsqd(args, index, lookupds)
            nsqds.append(nsqd)
            await nsqd.start()
            print(f"nsqd TCP  {nsqd.tcp_address}", flush=True)
            print(f"nsqd HTTP {nsqd.http_address}", flush=True)
            if nsqd.https_address:
                print(f"nsqd HTTPS {nsqd.https_address}", flush=True)
        if lookupd is not None:
            await _wait_registered(lookupd, nsqds)
        if args.env_file:
            _write_env(args.env_file, nsqds, lookupds, lookupd.http_address if lookupd else "")
        print("ready (SIGTERM or Ctrl-C stops)", flush=True)
        await stop.wait()
    finally:
        print("stopping", flush=True)
        for nsqd in reversed(nsqds):
            await nsqd.stop()
        if lookupd is not None:
            await lookupd.stop()
        print("stopped", flush=True)


async def _wait_registered(lookupd: EmbeddedLookupd, nsqds: list[EmbeddedNsqd]) -> None:
    """Until the embedded lookupd lists every nsqd (as ``start.sh`` waits for ``/nodes``)."""
    wanted = {(n.broadcast_address, n.tcp_port) for n in nsqds}
    async with asyncio.timeout(10):
        while True:
            seen = {
                (p.peer.broadcast_address, p.peer.tcp_port)
                for p in lookupd.db.find_producers("client", "", "")
            }
            if wanted <= seen:
                return
            await asyncio.sleep(0.01)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        asyncio.run(serve(args))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
