"""Offset checkpoint text (Kafka's ``CheckpointFile`` with ``OffsetCheckpointFile``'s formatter),
in the container of :mod:`~stratalog.records.checkpoint_text`, UTF-8, ``\\n`` line ends::

    0                              line 1: the format version, always 0
    2                              line 2: the number of entry lines that follow
    orders 0 1234                  "<topic> <partition> <offset>", single spaces
    orders 1 0

Three files of a log directory have this format: ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (the high watermarks).
Parsing follows Kafka exactly: an entry line that does not split on whitespace into exactly
three fields, or an entry count that does not match the count line, is an error; a partition
listed twice takes its last offset.

Sans-IO: bytes in, values out. The storage engine writes and reads the files
(``server/storage/checkpoints.py``); the Spark file reader reads the log start offsets.
"""

from __future__ import annotations

from collections.abc import Mapping

from .checkpoint_text import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    OFFSET_CHECKPOINT_VERSION,
    check_entry_count,
    checkpoint_entry_lines,
    malformed_line,
    parse_java_int,
    split_fields,
)
from .entry_field import Buffer
from .partition_dirs import PARTITION_MAX, validate_topic_name

__all__ = [
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "OFFSET_CHECKPOINT_VERSION",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "format_offset_checkpoint",
    "parse_offset_checkpoint",
]

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"  # high watermarks


def _parse_entry(line: str, line_number: int) -> tuple[str, int, int]:
    parts = split_fields(line)
    if len(parts) != 3:
        raise malformed_line(
            line, line_number, f"expected '<topic> <partition> <offset>', found {len(parts)} fields"
        )
    topic, partition_text, offset_text = parts
    partition = parse_java_int(partition_text, line_number, INT32_MIN, INT32_MAX, line)
    offset = parse_java_int(offset_text, line_number, INT64_MIN, INT64_MAX, line)
    return topic, partition, offset


def parse_offset_checkpoint(data: Buffer) -> dict[tuple[str, int], int]:
    """The ``(topic, partition) -> offset`` entries of offset checkpoint bytes (§7).

    Topics are not checked against the topic name rules on read (Kafka does not either).

    Raises:
        CorruptOffsetCheckpointError: bytes that are not UTF-8, a version other than 0, a line
            that is not a decimal int where one is expected, an entry line without exactly three
            whitespace-separated fields, a partition or offset out of Java's int/long range, or
            fewer or more entry lines than the count line says. ``line_number`` is the 1-based
            line at fault, or None when no one line is (bad UTF-8, a count mismatch).
    """
    entry_lines, expected_count = checkpoint_entry_lines(data)
    entries: dict[tuple[str, int], int] = {}
    for line_number, line in entry_lines:
        topic, partition, offset = _parse_entry(line, line_number)
        entries[(topic, partition)] = offset
    check_entry_count(len(entry_lines), expected_count)
    return entries


def format_offset_checkpoint(entries: Mapping[tuple[str, int], int]) -> bytes:
    """The offset checkpoint bytes (§7) of ``entries``, lines sorted by (topic, partition), so
    that the same entries always give the same bytes.

    Raises:
        InvalidTopicNameError: a topic that is not a valid topic name (it could not be read
            back).
        ValueError: a partition outside 0 .. 2^31 - 1 or an offset outside Java's long range.
    """
    lines = [str(OFFSET_CHECKPOINT_VERSION), str(len(entries))]
    for (topic, partition), offset in sorted(entries.items()):
        validate_topic_name(topic)
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise ValueError(f"partition of {topic!r} must be an int, not {partition!r}")
        if not 0 <= partition <= PARTITION_MAX:
            raise ValueError(f"partition {partition} of {topic!r} is outside 0 .. {PARTITION_MAX}")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError(f"offset of {topic}-{partition} must be an int, not {offset!r}")
        if not INT64_MIN <= offset <= INT64_MAX:
            raise ValueError(f"offset {offset} of {topic}-{partition} is outside a Java long")
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode("utf-8")
