"""``stratalog delete-records``: move partitions' log start offsets (DeleteRecords).

Kafka's ``kafka-delete-records.sh``, two ways:

* on the command line: ``delete-records TOPIC --offset OFFSET`` for the partitions
  ``--partition`` names (repeatable, or ``N,M``; default every partition of the topic);
* as Kafka's tool takes it: ``delete-records --offset-json-file FILE``, FILE holding
  ``{"partitions": [{"topic": "T", "partition": 0, "offset": 42}, ...], "version": 1}``.

Every record below the offset becomes unreadable, and whole segments below it are deleted by
the server's next retention pass (docs/storage.md). An offset of ``-1`` (or ``latest`` on the
command line) means each partition's high watermark: everything written so far.

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
from typing import Any

from .connection import EXIT_REFUSED, add_target_argument, connect, fail, run_client_command
from .kafka_habits import add_topic_argument
from .output_format import add_format_argument, wants_json
from .partitions import add_partition_argument, chosen_or_all

__all__ = ["add_parser", "run"]

#: DeleteRecords' "the high watermark" (docs/api.md), as Kafka's JSON file writes it.
_HIGH_WATERMARK = -1
#: The largest offset file read: Kafka's holds one small object per partition, so this is
#: tens of thousands of partitions; a larger file is a mistake (the wrong file).
_OFFSET_JSON_FILE_BYTES_MAX = 16 << 20

#: (topic, partition, offset) to delete below, in the order given.
Deletion = tuple[str, int, int]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "delete-records",
        help="delete a partition's records below an offset (as kafka-delete-records.sh)",
        description="Move the log start offset of partitions to --offset: the records below "
                    "it can no longer be read, and their segments are deleted. Give TOPIC and "
                    "--offset, or Kafka's --offset-json-file.",
    )
    add_topic_argument(parser, required=False)
    add_partition_argument(parser, repeatable=True,
                           help="this partition (repeatable, or N,M; default every partition)")
    parser.add_argument("--offset", metavar="OFFSET",
                        help="the new log start offset, or latest (-1): the high watermark, "
                             "deleting every record written so far")
    parser.add_argument("--offset-json-file", metavar="FILE",
                        help='Kafka\'s file: {"partitions": [{"topic": "T", "partition": 0, '
                             '"offset": 42}], "version": 1}')
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


def _read_offset_json_file(path: str) -> list[Deletion]:
    """The deletions Kafka's ``--offset-json-file`` lists.

    Raises:
        ValueError: the file cannot be read, is larger than _OFFSET_JSON_FILE_BYTES_MAX, is
            not JSON of that shape, or lists no partition; the message names the file and,
            for a bad entry, its position.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(_OFFSET_JSON_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise ValueError(f"--offset-json-file {path}: {exc.strerror or exc}") from None
    if len(data) > _OFFSET_JSON_FILE_BYTES_MAX:
        raise ValueError(f"--offset-json-file {path}: larger than "
                         f"{_OFFSET_JSON_FILE_BYTES_MAX} bytes")
    try:
        document: Any = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"--offset-json-file {path}: not JSON: {exc}") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'--offset-json-file {path}: expected {{"partitions": [{{"topic": '
                         f'"T", "partition": 0, "offset": 42}}, ...]}} with at least one entry')
    deletions: list[Deletion] = []
    for position, entry in enumerate(entries):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        offset = entry.get("offset") if isinstance(entry, dict) else None
        if (not isinstance(topic, str) or not topic
                or type(partition) is not int or partition < 0
                or type(offset) is not int or offset < _HIGH_WATERMARK):
            raise ValueError(f"--offset-json-file {path}: partitions[{position}] is {entry!r}; "
                             "expected a topic, a partition >= 0 and an offset >= -1")
        deletions.append((topic, partition, offset))
    return deletions


def run(args: argparse.Namespace) -> int:
    command = "delete-records"
    if args.offset_json_file is not None:
        if args.topic is not None or args.offset is not None or args.partitions is not None:
            return fail(command, "--offset-json-file lists topics, partitions and offsets: "
                                 "give it alone, or TOPIC with --offset")
        try:
            listed: list[Deletion] | None = _read_offset_json_file(args.offset_json_file)
        except ValueError as exc:
            return fail(command, str(exc))
        before_offset = _HIGH_WATERMARK  # unused: each deletion has its own
    else:
        if args.topic is None or args.offset is None:
            return fail(command, "give TOPIC and --offset OFFSET (or Kafka's "
                                 "--offset-json-file FILE)")
        try:
            before_offset = _offset(args.offset)
        except ValueError as exc:
            return fail(command, str(exc))
        listed = None

    async def body() -> int:
        async with connect(args) as client:
            if listed is not None:
                deletions = listed
            else:
                count = (await client.describe_topic(args.topic)).num_partitions
                partitions = chosen_or_all(args.partitions, count)
                missing = [p for p in partitions if p >= count]
                if missing:
                    return fail(command, f"partitions {missing} do not exist: topic "
                                         f"{args.topic!r} has {count} partitions", EXIT_REFUSED)
                deletions = [(args.topic, p, before_offset) for p in partitions]
            rows = []
            for topic, partition, offset in deletions:
                low_watermark = await client.delete_records(topic, partition, offset)
                rows.append((topic, partition, low_watermark))
        if wants_json(args):
            print(json.dumps([{"topic": t, "partition": p, "low_watermark": low}
                              for t, p, low in rows]))
        else:
            print("Records delete operation completed:")
            for topic, partition, low_watermark in rows:
                print(f"partition: {topic}-{partition}\tlow_watermark: {low_watermark}")
        return 0

    return run_client_command(command, body)
