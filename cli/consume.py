"""``stratalog consume TOPIC``: print records, from an offset, a timestamp, earliest or latest.

Text output prints one value per line (``--print-key`` puts the key and ``--key-separator``
before it; ``--print-metadata`` prefixes partition, offset and timestamp). JSON output prints one
object per line::

    {"topic": "t", "partition": 0, "offset": 7, "timestamp": 1763800000000,
     "timestamp_type": "CREATE_TIME", "key": "k", "value": "v", "headers": {"h": "x"}}

Keys, values and header values are UTF-8 text; bytes that are not valid UTF-8 are given as
``{"base64": "..."}`` instead, so that no byte is lost. Without ``--follow`` the command stops at
the end of every partition; with it, it waits for new records until interrupted or until
``--max-records`` were printed.

``--isolation-level read_committed`` prints only records of committed transactions (and those
written outside transactions), and without ``--follow`` stops at each partition's last stable
offset; ``read_uncommitted`` (the default, as Kafka's console consumer) prints every record.
Transaction markers are never printed.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys

from stratalog.client import Consumer, ConsumerRecord, IsolationLevel

from .connection import add_target_argument, connection_options, fail, run_client_command
from .timestamps import format_timestamp_ms, parse_timestamp_ms

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("consume", help="print a topic's records")
    parser.add_argument("topic")
    parser.add_argument("--partition", type=int, action="append", dest="partitions",
                        metavar="N", help="read only this partition (repeatable; default all)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from", dest="start", default="earliest", metavar="WHERE",
                       help="earliest (default), latest, or an offset")
    start.add_argument("--from-timestamp", metavar="TIME",
                       help="the first record at or after TIME (ms since the epoch or ISO-8601)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep waiting for new records")
    parser.add_argument("--max-records", type=int, metavar="N", help="stop after N records")
    parser.add_argument("--isolation-level", default="read_uncommitted",
                        choices=("read_uncommitted", "read_committed"),
                        help="read_committed: only records of committed transactions "
                             "(default read_uncommitted)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--print-key", action="store_true", help="text: print keys too")
    parser.add_argument("--print-metadata", action="store_true",
                        help="text: prefix partition, offset and timestamp")
    parser.add_argument("--key-separator", default="\t", metavar="SEP",
                        help="text: between key and value (default a tab)")
    add_target_argument(parser)
    parser.set_defaults(run=run)


def _json_bytes(data: bytes | None) -> str | dict | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _json_line(record: ConsumerRecord) -> str:
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "timestamp_type": record.timestamp_type.name,
            "key": _json_bytes(record.key),
            "value": _json_bytes(record.value),
            "headers": {key: _json_bytes(value) for key, value in record.headers},
        },
        ensure_ascii=False,
    )


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def run(args: argparse.Namespace) -> int:
    start: str | int = args.start
    if start not in ("earliest", "latest"):
        if not str(start).isdigit():
            return fail("consume", f"--from takes earliest, latest or an offset >= 0, got {start!r}")
        start = int(start)
    start_timestamp_ms = None
    if args.from_timestamp is not None:
        try:
            start_timestamp_ms = parse_timestamp_ms(args.from_timestamp)
        except ValueError as exc:
            return fail("consume", f"--from-timestamp: {exc}")
    if args.max_records is not None and args.max_records < 0:
        return fail("consume", f"--max-records must be >= 0, got {args.max_records}")
    if any(p < 0 for p in args.partitions or ()):
        return fail("consume", "--partition must be >= 0")

    async def body() -> int:
        printed = 0
        if args.max_records == 0:
            return 0
        out = sys.stdout
        async with Consumer(
            args.target, args.topic, partitions=args.partitions, start=start,
            start_timestamp_ms=start_timestamp_ms, follow=args.follow,
            isolation_level=IsolationLevel[args.isolation_level.upper()],
            **connection_options(args),
        ) as consumer:
            async for record in consumer:
                if args.format == "json":
                    line = _json_line(record)
                else:
                    line = _text(record.value)
                    if args.print_key:
                        line = f"{_text(record.key)}{args.key_separator}{line}"
                    if args.print_metadata:
                        line = (f"{record.partition}\t{record.offset}\t"
                                f"{format_timestamp_ms(record.timestamp)}\t{line}")
                out.write(line + "\n")
                printed += 1
                if args.follow:
                    out.flush()  # someone is watching: show each record as it comes
                if args.max_records is not None and printed >= args.max_records:
                    break
        out.flush()
        return 0

    return run_client_command("consume", body)
