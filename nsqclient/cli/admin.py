"""``nsqclient topics``, ``channels``, ``topic ACTION`` and ``channel ACTION``: listing and
administering through nsqd's and nsqlookupd's HTTP APIs (the blocking HTTP helpers).

An action goes to every nsqd named directly and every nsqd the lookupds list for the topic (all
nodes for ``create``), as nsqadmin does; ``delete`` then also removes the registration from each
lookupd, so consumers do not rediscover it. ``delete`` and ``empty`` lose messages, so they ask
first unless ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import _common

__all__ = ["add_parsers"]

TOPICS_EXAMPLES = """\
examples:
  nsqclient topics                                   # topics on nsqd 127.0.0.1:4151
  nsqclient topics --lookupd-http-address 127.0.0.1:4161 --json
"""
CHANNELS_EXAMPLES = """\
examples:
  nsqclient channels --topic events
"""
TOPIC_EXAMPLES = """\
examples:
  nsqclient topic create events
  nsqclient topic pause events          # stop copying new messages to its channels
  nsqclient topic delete events --yes   # on every nsqd lookupd lists for it, and in lookupd
"""
CHANNEL_EXAMPLES = """\
examples:
  nsqclient channel create events archive
  nsqclient channel empty events archive   # asks first; --yes to skip the question
"""

ACTIONS = ("create", "delete", "empty", "pause", "unpause")
_DONE = {
    "create": "created",
    "delete": "deleted",
    "empty": "emptied",
    "pause": "paused",
    "unpause": "unpaused",
}
_KINDS = ["nsqd_http", "lookupd_http"]


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "topics",
        parents=[parent],
        help="list topics (through lookupd or nsqd)",
        description="List the topics lookupd has registered and/or the nsqd hold.",
        epilog=TOPICS_EXAMPLES,
        formatter_class=raw,
    )
    p.add_argument("--json", action="store_true", help="a JSON list")
    _common_flags(p)
    p.set_defaults(run=list_topics)

    p = sub.add_parser(
        "channels",
        parents=[parent],
        help="list a topic's channels (through lookupd or nsqd)",
        description="List the channels of a topic.",
        epilog=CHANNELS_EXAMPLES,
        formatter_class=raw,
    )
    p.add_argument("--topic", required=True, type=_common.topic_name)
    p.add_argument("--json", action="store_true", help="a JSON list")
    _common_flags(p)
    p.set_defaults(run=list_channels)

    for kind, examples in (("topic", TOPIC_EXAMPLES), ("channel", CHANNEL_EXAMPLES)):
        p = sub.add_parser(
            kind,
            parents=[parent],
            help=f"{'|'.join(ACTIONS)} a {kind} through the HTTP API",
            description=f"Create, delete, empty, pause or unpause a {kind} on nsqd.",
            epilog=examples,
            formatter_class=raw,
        )
        p.add_argument("action", choices=ACTIONS)
        p.add_argument("topic", type=_common.topic_name)
        if kind == "channel":
            p.add_argument("channel", type=_common.channel_name)
        p.add_argument("-y", "--yes", action="store_true", help="do not ask before delete/empty")
        _common_flags(p)
        p.set_defaults(run=act, kind=kind)


def _common_flags(p: argparse.ArgumentParser) -> None:
    _common.add_address_flags(p, _KINDS)
    _common.add_https_flags(p)
    p.add_argument(
        "--timeout", type=_common.positive_float, default=5.0, metavar="S", help="per request (5 s)"
    )


def _clients(args: argparse.Namespace) -> tuple[list[Any], list[Any]]:
    from ..http import SyncLookupdHTTPClient, SyncNsqdHTTPClient

    addrs = _common.resolve_addresses(args, _KINDS, default="nsqd_http")
    verify = _common.http_verify(args)
    nsqds = [
        SyncNsqdHTTPClient(a, timeout=args.timeout, verify=verify)
        for a in _common.http_addresses(addrs["nsqd_http"])
    ]
    lookupds = [
        SyncLookupdHTTPClient(a, timeout=args.timeout, verify=verify)
        for a in _common.http_addresses(addrs["lookupd_http"])
    ]
    return nsqds, lookupds


def _print_names(names: set[str], as_json: bool) -> None:
    ordered = sorted(names)
    if as_json:
        print(json.dumps(ordered))
    else:
        for name in ordered:
            print(name)


def list_topics(args: argparse.Namespace) -> int:
    nsqds, lookupds = _clients(args)
    names: set[str] = set()
    for lookupd in lookupds:
        with lookupd:
            names.update(lookupd.topics())
    for nsqd in nsqds:
        with nsqd:
            stats = nsqd.stats(include_clients=False, include_mem=False)
        names.update(t["topic_name"] for t in stats["topics"])
    _print_names(names, args.json)
    return _common.EXIT_OK


def list_channels(args: argparse.Namespace) -> int:
    nsqds, lookupds = _clients(args)
    names: set[str] = set()
    found = False  # a topic without channels prints nothing; a missing one is an error
    for lookupd in lookupds:
        with lookupd:
            found = found or args.topic in lookupd.topics()
            names.update(lookupd.channels(args.topic))
    for nsqd in nsqds:
        with nsqd:
            stats = nsqd.stats(topic=args.topic, include_clients=False, include_mem=False)
        for t in stats["topics"]:
            if t["topic_name"] == args.topic:
                found = True
                names.update(c["channel_name"] for c in t["channels"])
    if not found:
        where = [f"nsqd {c.base_url.split('://', 1)[1]}" for c in nsqds]
        where += [f"lookupd {c.base_url.split('://', 1)[1]}" for c in lookupds]
        raise _common.not_found(f"topic {args.topic!r}", where)
    _print_names(names, args.json)
    return _common.EXIT_OK


def _targets(args: argparse.Namespace, nsqds: list[Any], lookupds: list[Any]) -> list[Any]:
    """The nsqd to act on: the direct ones plus those lookupd knows for this topic."""
    from ..http import SyncNsqdHTTPClient

    known = {c.base_url for c in nsqds}
    targets = list(nsqds)
    for lookupd in lookupds:
        if args.action == "create":
            producers: Any = lookupd.nodes()
        else:
            producers = lookupd.lookup(args.topic).producers
        for producer in producers:
            url = _common.http_addresses([producer.http_address])[0]
            if url not in known:
                known.add(url)
                targets.append(
                    SyncNsqdHTTPClient(url, timeout=args.timeout, verify=_common.http_verify(args))
                )
    return targets


def _confirm(what: str, where: list[str]) -> bool:
    sys.stderr.write(f"{what} on {len(where)} nsqd ({', '.join(where)})? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def act(args: argparse.Namespace) -> int:
    nsqds, lookupds = _clients(args)
    try:
        return _act(args, nsqds, lookupds)
    finally:
        for client in lookupds:
            client.close()


def _act(args: argparse.Namespace, nsqds: list[Any], lookupds: list[Any]) -> int:
    from ..errors import HTTPError, NSQError

    kind: str = args.kind
    names = [args.topic] + ([args.channel] if kind == "channel" else [])
    label = f"{kind} {'/'.join(names)!r}"
    targets = _targets(args, nsqds, lookupds)
    if not targets:
        raise NSQError(f"no nsqd to {args.action} {label} on: lookupd lists none for it")
    where = [c.base_url.split("://", 1)[1] for c in targets]
    if args.action in ("delete", "empty") and not args.yes:
        what = f"{args.action.capitalize()} {label}, losing its messages,"
        if not _confirm(what, where):
            for client in targets:
                client.close()
            sys.stderr.write("nsqclient: nothing done\n")
            return _common.EXIT_ERROR
    failed = 0
    for client, address in zip(targets, where, strict=True):
        with client:
            try:
                getattr(client, f"{args.action}_{kind}")(*names)
            except HTTPError as exc:
                failed += 1
                _common.report(
                    args.debug, f"nsqclient {kind} {args.action}: error on {address}: {exc}", exc
                )
                continue
        print(f"{_DONE[args.action]} {label} on {address}")
    if args.action == "delete":
        for lookupd in lookupds:
            try:
                getattr(lookupd, f"delete_{kind}")(*names)
            except HTTPError as exc:
                if exc.status_code != 404:  # not registered there: nothing to remove
                    failed += 1
                    _common.report(
                        args.debug, f"nsqclient {kind} delete: error on lookupd: {exc}", exc
                    )
    return _common.EXIT_ERROR if failed else _common.EXIT_OK
