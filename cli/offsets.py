"""``stratalog offsets TOPIC``: ListOffsets for every partition (or one).

``--time`` is ``earliest`` (the log start offset), ``latest`` (the log end offset, default),
``max`` (the record with the largest timestamp) or a timestamp (ms or ISO-8601: the earliest
record at or after it). Prints ``topic partition offset timestamp`` per line, or JSON with
``--json``; an offset of -1 means no record matched.
"""

from __future__ import annotations

import argparse
import json

from stratalog.client import EARLIEST, LATEST, MAX_TIMESTAMP

from .connection import add_target_argument, connect, fail, run_client_command
from .timestamps import format_timestamp_ms, parse_timestamp_ms

__all__ = ["add_parser", "run"]

_SPECIAL = {"earliest": EARLIEST, "latest": LATEST, "max": MAX_TIMESTAMP}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("offsets", help="look up offsets by position or timestamp")
    parser.add_argument("topic")
    parser.add_argument("--partition", type=int, metavar="N", help="only this partition")
    parser.add_argument("--time", default="latest", metavar="WHEN",
                        help="earliest, latest (default), max, or a timestamp (ms or ISO-8601)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_target_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.partition is not None and args.partition < 0:
        return fail("offsets", f"--partition must be >= 0, got {args.partition}")
    try:
        target = _SPECIAL.get(args.time.lower()) if args.time.lower() in _SPECIAL else (
            parse_timestamp_ms(args.time)
        )
    except ValueError as exc:
        return fail("offsets", f"--time: {exc}")

    async def body() -> int:
        async with connect(args) as client:
            if args.partition is None:
                partitions = range((await client.describe_topic(args.topic)).num_partitions)
            else:
                partitions = [args.partition]
            rows = []
            for partition in partitions:
                found = await client.list_offsets(args.topic, partition, target)
                rows.append((partition, found.offset, found.timestamp))
        if args.json:
            print(json.dumps([{"topic": args.topic, "partition": p, "offset": o, "timestamp": t}
                              for p, o, t in rows]))
        else:
            for partition, offset, timestamp in rows:
                shown = format_timestamp_ms(timestamp) if timestamp >= 0 else "-"
                print(f"{args.topic}\t{partition}\t{offset}\t{shown}")
        return 0

    return run_client_command("offsets", body)
