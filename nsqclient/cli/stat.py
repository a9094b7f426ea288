"""``nsqclient stat``: poll nsqd's ``/stats`` and show one table per poll (as ``nsq_stat``).

The nsqd polled are the ``--nsqd-http-address`` ones plus every node the lookupds list, found
again on each poll so that nodes joining or leaving show up. Counts are summed over nsqd per
topic and channel; messages/s comes from the change in ``message_count`` since the previous poll
(so the first poll has none). On a terminal the table is redrawn in place; otherwise each poll is
appended, and ``--json`` prints one JSON object per poll for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from . import _common
from ._running import Stop, run_async

__all__ = ["add_parser", "summarize"]

EXAMPLES = """\
examples:
  nsqclient stat                                   # nsqd on 127.0.0.1:4151, every 2 s
  nsqclient stat --lookupd-http-address lookupd:4161 --topic events --interval 5
  nsqclient stat --count 1 --json | jq '.topics[].depth'
"""

_CHANNEL_FIELDS = {  # our name -> nsqd's /stats name (summed over nsqd)
    "depth": "depth",
    "in_flight": "in_flight_count",
    "deferred": "deferred_count",
    "requeued": "requeue_count",
    "timed_out": "timeout_count",
    "messages": "message_count",
    "clients": "client_count",
}
_TOPIC_FIELDS = {"depth": "depth", "messages": "message_count"}


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "stat",
        parents=[parent],
        help="poll /stats and show depth, in flight, rates per topic/channel (like nsq_stat)",
        description="Poll nsqd's /stats and print a table per topic and channel.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topic", type=_common.topic_name, help="only this topic")
    p.add_argument("--channel", type=_common.channel_name, help="only channels of this name")
    p.add_argument(
        "--interval", type=_common.positive_float, default=2.0, help="seconds between polls (2)"
    )
    p.add_argument("--count", type=_common.positive_int, help="exit after N polls")
    p.add_argument("--json", action="store_true", help="one JSON object per poll")
    _common.add_address_flags(p, ["nsqd_http", "lookupd_http"])
    _common.add_https_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_async(lambda stop: stat(args, stop))


def summarize(
    stats_by_nsqd: list[dict[str, Any]],
    previous: dict[str, Any] | None,
    elapsed: float | None,
    *,
    topic: str | None = None,
    channel: str | None = None,
) -> list[dict[str, Any]]:
    """Topics (each with its channels), counts summed over nsqd; rates against ``previous``."""
    topics: dict[str, dict[str, Any]] = {}
    for stats in stats_by_nsqd:
        for t in stats.get("topics") or []:
            name = t["topic_name"]
            if topic is not None and name != topic:
                continue
            row = topics.setdefault(
                name, {"topic": name, **dict.fromkeys(_TOPIC_FIELDS, 0), "paused": False}
            )
            _add(row, t, _TOPIC_FIELDS)
            row["paused"] = row["paused"] or bool(t.get("paused"))
            channels = row.setdefault("_channels", {})
            for c in t.get("channels") or []:
                cname = c["channel_name"]
                if channel is not None and cname != channel:
                    continue
                crow = channels.setdefault(
                    cname,
                    {"channel": cname, **dict.fromkeys(_CHANNEL_FIELDS, 0), "paused": False},
                )
                _add(crow, c, _CHANNEL_FIELDS)
                crow["paused"] = crow["paused"] or bool(c.get("paused"))
    before = {t["topic"]: t for t in (previous or {}).get("topics", [])}
    result = []
    for name in sorted(topics):
        row = topics[name]
        channels = row.pop("_channels", {})
        old = before.get(name)
        row["msgs_per_sec"] = _rate(row, old, elapsed)
        old_channels = {c["channel"]: c for c in (old or {}).get("channels", [])}
        row["channels"] = []
        for cname in sorted(channels):
            crow = channels[cname]
            crow["msgs_per_sec"] = _rate(crow, old_channels.get(cname), elapsed)
            row["channels"].append(crow)
        result.append(row)
    return result


def _add(row: dict[str, Any], source: dict[str, Any], fields: dict[str, str]) -> None:
    for ours, theirs in fields.items():
        row[ours] += int(source.get(theirs) or 0)


def _rate(row: dict[str, Any], old: dict[str, Any] | None, elapsed: float | None) -> float | None:
    if old is None or not elapsed:
        return None
    delta: int = max(0, row["messages"] - old["messages"])  # nsqd restarted: counts reset
    return round(delta / elapsed, 1)


_COLUMNS = [
    ("depth", "DEPTH"),
    ("in_flight", "IN FLIGHT"),
    ("deferred", "DEFERRED"),
    ("requeued", "REQUEUED"),
    ("timed_out", "TIMED OUT"),
    ("msgs_per_sec", "MSGS/S"),
    ("clients", "CLIENTS"),
]


def table(snapshot: dict[str, Any]) -> str:
    """The human view of one poll."""
    rows: list[list[str]] = []
    for t in snapshot["topics"]:
        rows.append([t["topic"] + (" (paused)" if t["paused"] else ""), *_cells(t)])
        rows.extend(
            ["  " + c["channel"] + (" (paused)" if c["paused"] else ""), *_cells(c)]
            for c in t["channels"]
        )
    header = ["TOPIC / CHANNEL", *(title for _, title in _COLUMNS)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        time.strftime("%H:%M:%S", time.localtime(snapshot["time"]))
        + f"  {len(snapshot['nsqd'])} nsqd: "
        + ", ".join(snapshot["nsqd"])
    ]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    if not snapshot["topics"]:
        lines.append("(no topics)")
    lines.extend(f"error: {e}" for e in snapshot["errors"])
    return "\n".join(lines) + "\n"


def _cells(row: dict[str, Any]) -> list[str]:
    # blank: not a topic's column; "-": no rate yet (first poll)
    return [
        "" if key not in row else "-" if row[key] is None else str(row[key]) for key, _ in _COLUMNS
    ]


async def nsqd_addresses(args: argparse.Namespace, direct: list[str], lookupds: list[str]) -> Any:
    """Base URLs of the nsqd to poll: the direct ones plus every node lookupd lists."""
    from ..http import LookupdHTTPClient

    found = _common.http_addresses(direct)
    errors: list[BaseException] = []
    for address in _common.http_addresses(lookupds):
        async with LookupdHTTPClient(address, verify=_common.http_verify(args)) as client:
            try:
                nodes = await client.nodes()
            except Exception as exc:
                errors.append(exc)
                continue
        for node in nodes:
            url = _common.http_addresses([node.http_address])[0]
            if url not in found:
                found.append(url)
    if errors and len(errors) == len(lookupds) and not direct:
        raise errors[0]
    return found, errors


async def poll(args: argparse.Namespace, addrs: dict[str, list[str]]) -> dict[str, Any]:
    from ..http import NsqdHTTPClient

    urls, errors = await nsqd_addresses(args, addrs["nsqd_http"], addrs["lookupd_http"])
    results: list[dict[str, Any]] = []
    reached: list[str] = []
    for url in urls:
        async with NsqdHTTPClient(url, verify=_common.http_verify(args)) as client:
            try:
                results.append(await client.stats(topic=args.topic, include_clients=False))
            except Exception as exc:
                errors.append(exc)
                continue
        reached.append(url.split("://", 1)[1])
    if urls and not results:
        raise errors[0]
    return {"time": time.time(), "nsqd": reached, "stats": results, "errors": errors}


def _check_found(args: argparse.Namespace, snapshot: dict[str, Any]) -> None:
    """A ``--topic``/``--channel`` missing at the first poll is an error, not an empty table
    (later polls show whatever is there: a topic may be deleted while stat watches)."""
    where = [f"nsqd {a}" for a in snapshot["nsqd"]]
    if args.topic is not None and not snapshot["topics"]:
        raise _common.not_found(f"topic {args.topic!r}", where)
    if args.channel is not None and not any(t["channels"] for t in snapshot["topics"]):
        of = f" of topic {args.topic!r}" if args.topic is not None else ""
        raise _common.not_found(f"channel {args.channel!r}{of}", where)


async def stat(args: argparse.Namespace, stop: Stop) -> int:
    addrs = _common.resolve_addresses(args, ["nsqd_http", "lookupd_http"], default="nsqd_http")
    interactive = sys.stdout.isatty() and not args.json
    previous: dict[str, Any] | None = None
    polls = 0
    while True:
        raw = await poll(args, addrs)
        for error in raw["errors"]:  # shown in the output; under --debug with a traceback
            if args.debug:
                _common.report(True, _common.error_line("stat", error), error)
        elapsed = raw["time"] - previous["time"] if previous else None
        snapshot = {
            "time": raw["time"],
            "nsqd": raw["nsqd"],
            "topics": summarize(
                raw["stats"], previous, elapsed, topic=args.topic, channel=args.channel
            ),
            "errors": [str(e) for e in raw["errors"]],
        }
        if previous is None:
            _check_found(args, snapshot)
        if args.json:
            out = json.dumps(snapshot) + "\n"
        else:
            out = ("\x1b[H\x1b[2J" if interactive else "\n" if previous else "") + table(snapshot)
        sys.stdout.write(out)
        sys.stdout.flush()
        previous = snapshot
        polls += 1
        if args.count is not None and polls >= args.count:
            return _common.EXIT_OK
        if await stop.wait(args.interval):
            return stop.exit_code
