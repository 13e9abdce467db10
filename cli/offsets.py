"""``stratalog offsets TOPIC``: ListOffsets for every partition (or those given).

``--time`` is ``earliest`` (the log start offset), ``latest`` (the log end offset, default),
``max`` (the record with the largest timestamp; Kafka's ``-2``, ``-1`` and ``-3`` are accepted
for these three) or a timestamp (ms, ISO-8601 with a time
without a zone read as UTC, or a relative time such as ``-1h``: the earliest record at or after
it; the instant it was read as is printed on stderr). ``--partition`` is repeatable: those
partitions, in the order given (default: all); ``--topic T`` is Kafka's spelling of the topic.

Prints a header and a row per partition, as ``kafka-consumer-groups.sh`` prints its columns,
or a JSON list with ``--format json`` (for scripts)::

    TOPIC   PARTITION  OFFSET  TIMESTAMP
    events  0          33334   -

OFFSET is the offset ``--time`` found (-1: no record is that recent). TIMESTAMP is the
timestamp of the record at that offset where the lookup was by time (``max`` or a timestamp),
and ``-`` for ``earliest`` and ``latest``, which are positions, not records (ListOffsets
answers them without a timestamp, as Kafka's does).
"""

from __future__ import annotations

import argparse
import json
import sys

from stratalog.client import EARLIEST, LATEST, MAX_TIMESTAMP

from .connection import EXIT_REFUSED, add_target_argument, connect, fail, run_client_command
from .kafka_habits import add_topic_argument
from .output_format import add_format_argument, print_table, wants_json
from .partitions import add_partition_argument, chosen_or_all
from .timestamps import (
    TIMESTAMP_HELP,
    describe_timestamp_ms,
    format_timestamp_ms,
    parse_timestamp_ms,
)

__all__ = ["add_parser", "run"]

# Kafka's kafka-get-offsets.sh takes -1, -2 and -3 for latest, earliest and max.
_SPECIAL = {"earliest": EARLIEST, "latest": LATEST, "max": MAX_TIMESTAMP,
            "-1": LATEST, "-2": EARLIEST, "-3": MAX_TIMESTAMP}


#: The text output's columns (module docstring).
_COLUMNS = ("TOPIC", "PARTITION", "OFFSET", "TIMESTAMP")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "offsets", help="look up offsets by position or timestamp",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Look up an offset in each partition (ListOffsets). Prints the columns\n"
                    "  TOPIC PARTITION OFFSET TIMESTAMP\n"
                    "where OFFSET is what --time found (-1: no record is that recent) and\n"
                    "TIMESTAMP the found record's timestamp for --time max or a timestamp\n"
                    "(- for earliest and latest: positions, not records).")
    add_topic_argument(parser)
    add_partition_argument(parser, repeatable=True,
                           help="only this partition (repeatable, or N,M: these partitions; default all)")
    parser.add_argument("--time", default="latest", metavar="WHEN",
                        help=f"earliest (-2), latest (-1, default), max (-3), or a timestamp: "
                             f"{TIMESTAMP_HELP}")
    add_format_argument(parser)
    add_target_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    special = _SPECIAL.get(args.time.strip().lower())
    if special is not None:
        target = special
    else:
        try:
            target = parse_timestamp_ms(args.time)
        except ValueError as exc:
            return fail("offsets", f"--time: {exc}")
        print(f"looking up the first offsets at or after {describe_timestamp_ms(target)}",
              file=sys.stderr)

    async def body() -> int:
        async with connect(args) as client:
            count = (await client.describe_topic(args.topic)).num_partitions
            partitions = chosen_or_all(args.partitions, count)
            missing = [p for p in partitions if p >= count]
            if missing:
                return fail("offsets", f"partitions {missing} do not exist: topic "
                                       f"{args.topic!r} has {count} partitions", EXIT_REFUSED)
            rows = []
            for partition in partitions:
                found = await client.list_offsets(args.topic, partition, target)
                rows.append((partition, found.offset, found.timestamp))
        if wants_json(args):
            print(json.dumps([{"topic": args.topic, "partition": p, "offset": o, "timestamp": t}
                              for p, o, t in rows]))
        else:
            print_table([_COLUMNS] + [
                (args.topic, str(partition), str(offset),
                 format_timestamp_ms(timestamp) if timestamp >= 0 else "-")
                for partition, offset, timestamp in rows
            ])
        return 0

    return run_client_command("offsets", body)
