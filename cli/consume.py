"""``stratalog consume TOPIC``: print records, from an offset, a timestamp, earliest or latest.

Text output prints one value per line (``--print-key`` puts the key and ``--key-separator``
before it; ``--print-headers`` puts the headers before that, as Kafka's console consumer's
``print.headers=true`` does: ``KEY:VALUE`` pairs joined by ``,``, or ``NO_HEADERS``;
``--print-metadata`` prefixes partition, offset and timestamp). A null key, value or header value
prints as ``null``. JSON output prints one object per line::

    {"topic": "t", "partition": 0, "offset": 7, "timestamp": 1763800000000,
     "timestamp_type": "CREATE_TIME", "key": "k", "value": "v",
     "headers": [["h", "x"], ["h", "y"]]}

Keys, values and header values are UTF-8 text; bytes that are not valid UTF-8 are given as
``{"base64": "..."}`` instead, so that no byte is lost. Headers are ``[key, value]`` pairs in
record order, as kcat ``-J`` writes them (Kafka allows a key twice). Without ``--follow`` the
command stops at the end of every partition; with it, it waits for new records until interrupted
or until ``--max-records`` were printed.

``--from OFFSET`` outside a partition's log (past its end, or below its start after retention)
is an error, exit 1, naming the partition, the offset and the offsets the log holds, unless
``--reset earliest|latest`` (Kafka's ``auto.offset.reset``) says where to go instead; a reset
prints one line on stderr. ``--from-timestamp`` takes ms, ISO-8601 (a time without a zone is
UTC) or a relative time (``-1h``); the instant it was read as is printed on stderr.

``--isolation-level read_committed`` prints only records of committed transactions (and those
written outside transactions), and without ``--follow`` stops at each partition's last stable
offset; ``read_uncommitted`` (the default, as Kafka's console consumer) prints every record.
Transaction markers are never printed.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
from collections.abc import Sequence

from stratalog.client import (
    Consumer,
    ConsumerRecord,
    IsolationLevel,
    OffsetOutOfRangeError,
    OffsetReset,
)
from stratalog.records import Header

from .connection import (
    EXIT_REFUSED,
    add_target_argument,
    connection_options,
    fail,
    run_client_command,
)
from .output_format import add_format_argument, wants_json
from .partitions import add_partition_argument
from .timestamps import (
    TIMESTAMP_HELP,
    describe_timestamp_ms,
    format_timestamp_ms,
    parse_timestamp_ms,
)

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("consume", help="print a topic's records")
    parser.add_argument("topic")
    add_partition_argument(parser, repeatable=True,
                           help="read only this partition (repeatable: these partitions; "
                                "default all)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from", dest="start", default="earliest", metavar="WHERE",
                       help="earliest (default), latest, or an offset (an error where the "
                            "log does not hold it, unless --reset)")
    start.add_argument("--from-timestamp", metavar="TIME",
                       help=f"the first record at or after TIME: {TIMESTAMP_HELP}")
    parser.add_argument("--reset", choices=("earliest", "latest", "none"), default="none",
                        help="where to go when an offset is outside the log, as Kafka's "
                             "auto.offset.reset: earliest (the log start), latest (the log end), "
                             "or none (default: an error, exit 1)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep waiting for new records")
    parser.add_argument("--max-records", type=int, metavar="N", help="stop after N records")
    parser.add_argument("--isolation-level", default="read_uncommitted",
                        choices=("read_uncommitted", "read_committed"),
                        help="read_committed: only records of committed transactions "
                             "(default read_uncommitted)")
    add_format_argument(parser, json_help="one object per record")
    parser.add_argument("--print-key", action="store_true", help="text: print keys too")
    parser.add_argument("--print-headers", action="store_true",
                        help="text: print headers too, as KEY:VALUE,... (NO_HEADERS when none), "
                             "before the key (JSON output always has them)")
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
            "headers": [[key, _json_bytes(value)] for key, value in record.headers],
        },
        ensure_ascii=False,
    )


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def _text_headers(headers: Sequence[Header]) -> str:
    """Kafka's DefaultMessageFormatter with print.headers=true: ``k1:v1,k2:v2``, or
    ``NO_HEADERS``."""
    if not headers:
        return "NO_HEADERS"
    return ",".join(f"{key}:{_text(value)}" for key, value in headers)


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
        print(f"reading from {describe_timestamp_ms(start_timestamp_ms)}", file=sys.stderr)
    if args.max_records is not None and args.max_records < 0:
        return fail("consume", f"--max-records must be >= 0, got {args.max_records}")

    # The Consumer logs each reset at WARNING, which Python's last-resort handler would print
    # too; tell_reset prints it once, in the command's words.
    logging.getLogger("stratalog.client.consumer").addHandler(logging.NullHandler())

    def tell_reset(reset: OffsetReset) -> None:
        print(f"stratalog consume: {reset.topic}-{reset.partition}: offset {reset.offset} is "
              f"out of range [{reset.log_start_offset}, {reset.log_end_offset}); --reset "
              f"{args.reset}: reading from offset {reset.new_offset}", file=sys.stderr)

    json_output = wants_json(args)

    async def body() -> int:
        try:
            return await read()
        except OffsetOutOfRangeError as exc:
            sys.stdout.flush()  # what was printed before stays printed
            return fail("consume", f"{exc.message}; --reset earliest or --reset latest "
                                   "continues from the log start or end instead", EXIT_REFUSED)

    async def read() -> int:
        printed = 0
        if args.max_records == 0:
            return 0
        out = sys.stdout
        async with Consumer(
            args.target, args.topic, partitions=args.partitions, start=start,
            start_timestamp_ms=start_timestamp_ms, follow=args.follow,
            isolation_level=IsolationLevel[args.isolation_level.upper()],
            auto_offset_reset=args.reset, on_offset_reset=tell_reset,
            **connection_options(args),
        ) as consumer:
            async for record in consumer:
                if json_output:
                    line = _json_line(record)
                else:
                    line = _text(record.value)
                    if args.print_key:
                        line = f"{_text(record.key)}{args.key_separator}{line}"
                    if args.print_headers:
                        line = f"{_text_headers(record.headers)}{args.key_separator}{line}"
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
