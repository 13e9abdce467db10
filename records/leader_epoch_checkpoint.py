"""``leader-epoch-checkpoint`` (Kafka's ``LeaderEpochCheckpointFile``), one per partition
directory: the container of :mod:`~stratalog.records.checkpoint_text` (version 0, count line,
then entries, same parsing rules), each entry ``"<leader epoch> <start offset>"``: the epoch a
Java int, the offset a Java long, exactly two whitespace-separated fields::

    0                              version
    2                              entry count
    0 0                            epoch 0 began at offset 0
    3 1200                         epoch 3 began at offset 1200

Entries are written in increasing epoch (and start offset) order; what the entries mean and the
rules they keep are the storage engine's (``server/storage/leader_epoch_cache.py``).

Sans-IO: bytes in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable

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

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "format_leader_epoch_checkpoint",
    "parse_leader_epoch_checkpoint",
]

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"


def parse_leader_epoch_checkpoint(data: Buffer) -> list[tuple[int, int]]:
    """The ``(leader epoch, start offset)`` entries of leader-epoch checkpoint bytes (§8), in
    file order. Values are checked for their Java type's range only: what the entries must
    satisfy (non-negative, increasing) is the cache's to enforce, as in Kafka.

    Raises:
        CorruptOffsetCheckpointError: the container errors of :func:`parse_offset_checkpoint`;
            an entry line without exactly two whitespace-separated fields; an epoch outside a
            Java int or an offset outside a Java long.
    """
    entry_lines, expected_count = checkpoint_entry_lines(data)
    entries: list[tuple[int, int]] = []
    for line_number, line in entry_lines:
        parts = split_fields(line)
        if len(parts) != 2:
            raise malformed_line(
                line, line_number,
                f"expected '<leader epoch> <start offset>', found {len(parts)} fields",
            )
        epoch = parse_java_int(parts[0], line_number, INT32_MIN, INT32_MAX, line)
        start_offset = parse_java_int(parts[1], line_number, INT64_MIN, INT64_MAX, line)
        entries.append((epoch, start_offset))
    check_entry_count(len(entry_lines), expected_count)
    return entries


def format_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """The leader-epoch checkpoint bytes (§8) of ``(epoch, start offset)`` entries, in the
    order given (the cache's: increasing).

    Raises:
        ValueError: an epoch outside a Java int or an offset outside a Java long.
    """
    lines = [str(OFFSET_CHECKPOINT_VERSION)]
    body = []
    for epoch, start_offset in entries:
        if not INT32_MIN <= epoch <= INT32_MAX:
            raise ValueError(f"leader epoch {epoch} is outside a Java int")
        if not INT64_MIN <= start_offset <= INT64_MAX:
            raise ValueError(f"start offset {start_offset} of epoch {epoch} is outside a Java long")
        body.append(f"{epoch} {start_offset}")
    lines.append(str(len(body)))
    lines.extend(body)
    return ("\n".join(lines) + "\n").encode("utf-8")
