"""``stratalog delete-records TOPIC --offset OFFSET``: move partitions' log start (DeleteRecords).

Kafka's ``kafka-delete-records.sh`` in one command line instead of its ``--offset-json-file``:
every record below ``--offset`` in the partitions ``--partition`` names (repeatable, or
``N,M``; default every partition of the topic) becomes unreadable, and whole segments below it
are deleted by the server's next retention pass (docs/storage.md). ``--offset latest`` (or
``-1``, Kafka's value) means each partition's high watermark: everything written so far.

Prints what Kafka's tool prints, one line per partition with its new log start offset::

    Records delete operation completed:
    partition: events-0	low_watermark: 42

An offset past a partition's end is refused by the server (exit 1, naming the partition and
its range); partitions before it in the list were already trimmed (each is one RPC, as each of
Kafka's is one partition's request). An offset below the log start leaves it where it is.
"""

from __future__ import annotations

import argparse
import json

from .connection import EXIT_REFUSED, add_target_argument, connect, fail, run_client_command
from .kafka_habits import add_topic_argument
from .output_format import add_format_argument, wants_json
from .partitions import add_partition_argument, chosen_or_all

__all__ = ["add_parser", "run"]

#: DeleteRecords' "the high watermark" (docs/api.md), as Kafka's JSON file writes it.
_HIGH_WATERMARK = -1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "delete-records",
        help="delete a partition's records below an offset (as kafka-delete-records.sh)",
        description="Move the log start offset of partitions to --offset: the records below "
                    "it can no longer be read, and their segments are deleted.",
    )
    add_topic_argument(parser)
    add_partition_argument(parser, repeatable=True,
                           help="this partition (repeatable, or N,M; default every partition)")
    parser.add_argument("--offset", required=True, metavar="OFFSET",
                        help="the new log start offset, or latest (-1): the high watermark, "
                             "deleting every record written so far")
    add_format_argument(parser, json_help="a list of {topic, partition, low_watermark}")
    add_target_argument(parser)
    parser.set_defaults(run=run)


def _offset(text: str) -> int:
    """The DeleteRecords offset of ``--offset``.

    Raises:
        ValueError: neither ``latest``, ``-1`` nor an offset >= 0.
    """
    stripped = text.strip()
    if stripped.lower() in ("latest", "end", str(_HIGH_WATERMARK)):
        return _HIGH_WATERMARK
    if stripped.isascii() and stripped.isdigit():
        return int(stripped)
    raise ValueError(f"--offset takes an offset >= 0, latest or -1 (the high watermark); "
                     f"got {text!r}")


def run(args: argparse.Namespace) -> int:
    try:
        before_offset = _offset(args.offset)
    except ValueError as exc:
        return fail("delete-records", str(exc))

    async def body() -> int:
        async with connect(args) as client:
            count = (await client.describe_topic(args.topic)).num_partitions
            partitions = chosen_or_all(args.partitions, count)
            missing = [p for p in partitions if p >= count]
            if missing:
                return fail("delete-records", f"partitions {missing} do not exist: topic "
                                              f"{args.topic!r} has {count} partitions",
                            EXIT_REFUSED)
            rows = []
            for partition in partitions:
                low_watermark = await client.delete_records(args.topic, partition, before_offset)
                rows.append((partition, low_watermark))
        if wants_json(args):
            print(json.dumps([{"topic": args.topic, "partition": p, "low_watermark": low}
                              for p, low in rows]))
        else:
            print("Records delete operation completed:")
            for partition, low_watermark in rows:
                print(f"partition: {args.topic}-{partition}\tlow_watermark: {low_watermark}")
        return 0

    return run_client_command("delete-records", body)
