"""File mode: reading partitions straight from a log directory, one Spark task per segment.

Intuition: stratalog stores every partition in Kafka's on-disk format, so the records can be
read from the files without any server, by every executor at once (offline analysis, archived
copies, a directory too big for one server to stream). The layout read is Kafka's::

    <log dir>/
        log-start-offset-checkpoint       "0", count, then "topic partition offset" lines
        <topic>-<partition>/              e.g. events-0
            00000000000000000000.log      segments, named by their base offset (20 digits)
            00000000000000004096.log
            ...

``path`` may be such a log directory or one partition directory. Directories that are not
live partitions (``events-0.<id>-delete`` of a deleted topic, ``-future`` moves, anything else)
and files that are not live segments (``.log.deleted``, ``.log.swap``, ``.log.cleaned``, indexes)
are ignored. The names, and the checkpoint text, are read by :mod:`stratalog.records.file_names`,
:mod:`~stratalog.records.partition_dirs` and :mod:`~stratalog.records.offset_checkpoint`, the
definitions the server writes them with, so both accept and refuse the same directories.
Segment ``i`` holds offsets ``[base_i, base_(i+1))``, so the planner knows every
task's range from the file names alone; the indexes are not needed (a task scans batch
headers up to its start, which costs about a microsecond per batch).

The log start offset is the first segment's base offset, raised by the log directory's
``log-start-offset-checkpoint`` when it names the partition (records below it were deleted by
DeleteRecords and are not readable, as on the server; the server writes that file
periodically, so a very recent DeleteRecords may not be in it yet). A checkpoint that does not
parse is ignored with a warning, as the server ignores it at startup.

The last segment may be the active one, still being written: a partial batch at its end ends
the read. A partial batch anywhere else is corruption and fails the task, naming the file.

Under read_committed (the default ``isolationLevel``) the planner first reads what the files say
about transactions (:mod:`stratalog.spark.file_transactions`): the partition's last stable
offset, which ends every range (an ending offset above it comes down to it, with a warning),
and the aborted transactions, of which each task gets those overlapping its range, to drop
their batches as a read_committed fetch's reader does.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from stratalog.client import TopicPartition
from stratalog.records import AbortedTransactionFilter
from stratalog.records.errors import (
    CorruptOffsetCheckpointError,
    InvalidFileNameError,
    InvalidTopicNameError,
)
from stratalog.records.file_names import (
    LOG_FILE_SUFFIX,
    is_log_file,
    offset_from_file_name,
    segment_file_name,
)
from stratalog.records.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    parse_offset_checkpoint,
)
from stratalog.records.partition_dirs import (
    PartitionDirKind,
    parse_partition_dir_name,
    partition_dir_kind,
)

from .columns import RecordColumns
from .errors import OptionError, report_data_loss
from .file_transactions import scan_transactions
from .options import EARLIEST, LATEST, ReadOptions, Subscription
from .ranges import OffsetRange

__all__ = [
    "PartitionFiles",
    "SegmentPartition",
    "find_partitions",
    "plan_segments",
    "read_segment",
]

logger = logging.getLogger(__name__)

#: Records per Arrow batch yielded by a segment task.
ARROW_BATCH_RECORDS = 65_536


class PartitionFiles(NamedTuple):
    """One partition directory: its live segments ``(base_offset, path)`` in offset order, and
    its log start offset."""

    topic_partition: TopicPartition
    segments: list[tuple[int, str]]
    log_start_offset: int


def _live_partition(name: str) -> TopicPartition | None:
    """The partition a directory name stands for, or None if it is not a live partition's."""
    try:
        if partition_dir_kind(name) is not PartitionDirKind.LIVE:
            return None
        return TopicPartition(*parse_partition_dir_name(name))
    except InvalidTopicNameError:
        return None


def _segments(directory: Path) -> list[tuple[int, str]]:
    """The live segments of a partition directory: files named as the server names them."""
    found = []
    for entry in os.scandir(directory):
        if not is_log_file(entry.name):
            continue  # indexes, snapshots, .log.deleted/.swap/.cleaned
        try:
            base_offset = offset_from_file_name(entry.name)
        except InvalidFileNameError:
            continue  # e.g. a copy named "backup.log"
        # Only the 20-digit names segments have: "5.log" parses, but no segment is named so.
        if entry.name == segment_file_name(base_offset, LOG_FILE_SUFFIX) and entry.is_file():
            found.append((base_offset, entry.path))
    return sorted(found)


def _read_log_start_checkpoint(log_dir: Path) -> dict[TopicPartition, int]:
    """The log directory's log start offsets; empty (with a warning) if unreadable."""
    path = log_dir / LOG_START_OFFSET_CHECKPOINT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        logger.warning("cannot read %s (%s); log start offsets from segment names only",
                       path, exc)
        return {}
    try:
        entries = parse_offset_checkpoint(data)
    except CorruptOffsetCheckpointError as exc:
        logger.warning("malformed %s (%s); log start offsets from segment names only", path, exc)
        return {}
    return {TopicPartition(*topic_partition): offset for topic_partition, offset in entries.items()}


def find_partitions(
    path: str, subscription: Subscription | None
) -> dict[TopicPartition, PartitionFiles]:
    """The partition directories under ``path`` (a log dir or one partition dir) that the
    subscription selects (all of them without one), in topic-partition order.

    Raises:
        OptionError: ``path`` is not a directory or holds no partition; an unknown topic or
            partition in ``subscribe``/``assign``.
    """
    root = Path(path)
    if not root.is_dir():
        raise OptionError("path", f"{path!r} is not a directory")
    root_partition = _live_partition(root.name)
    if root_partition is not None and _segments(root):
        candidates = [(root, root_partition)]
        checkpoint = _read_log_start_checkpoint(root.parent)
    else:
        candidates = [
            (Path(entry.path), tp)
            for entry in os.scandir(root)
            if entry.is_dir() and (tp := _live_partition(entry.name)) is not None
        ]
        checkpoint = _read_log_start_checkpoint(root)
    if not candidates:
        raise OptionError(
            "path", f"{path!r} holds no partition directory (<topic>-<partition>/ with .log "
            "segment files) and is not one"
        )
    found: dict[TopicPartition, PartitionFiles] = {}
    for directory, tp in candidates:
        if subscription is not None and not subscription.matches(tp.topic):
            continue
        segments = _segments(directory)
        first = segments[0][0] if segments else 0
        found[tp] = PartitionFiles(tp, segments, max(first, checkpoint.get(tp, first)))
    if subscription is not None and subscription.option != "subscribePattern":
        wanted = (
            subscription.assignment if subscription.option == "assign"
            else [TopicPartition(t, -1) for t in subscription.topics]
        )
        for tp in wanted:
            if not any(f.topic == tp.topic for f in found):
                raise OptionError(
                    subscription.option, f"topic {tp.topic!r} has no partition directory in "
                    f"{path!r}"
                )
            if tp.partition >= 0 and tp not in found:
                raise OptionError(
                    "assign", f"partition {tp.partition} of topic {tp.topic!r} has no "
                    f"directory in {path!r}"
                )
        if subscription.option == "assign":
            found = {tp: f for tp, f in found.items() if tp in subscription.assignment}
    return {tp: found[tp] for tp in sorted(found, key=lambda t: (t.topic, t.partition))}


class SegmentPartition(InputPartition):
    """One Spark task of a file-mode read: the records of ``offset_range`` in one segment file.

    ``is_last``: the partition's newest segment (possibly still being written), the only one
    whose end may be a partial batch. ``aborted``: None under read_uncommitted; under
    read_committed the ``(producer_id, first_offset)`` of the aborted transactions overlapping
    the range. Pickled to the executor; holds only plain values.
    """

    def __init__(
        self,
        offset_range: OffsetRange,
        path: str,
        *,
        is_last: bool,
        include_headers: bool,
        aborted: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        super().__init__((path, offset_range.from_offset))
        self.offset_range = offset_range
        self.path = path
        self.is_last = is_last
        self.include_headers = include_headers
        self.aborted = aborted

    def __repr__(self) -> str:
        r = self.offset_range
        return f"SegmentPartition({self.path} [{r.from_offset}, {r.until_offset}))"


def _bound(
    options: ReadOptions, files: PartitionFiles, starting: bool
) -> int | None:
    spec = options.starting if starting else options.ending
    tp = files.topic_partition
    if spec is None or spec.kind == ("earliest" if starting else "latest"):
        return files.log_start_offset if starting else None
    if tp not in spec.offsets:
        raise OptionError(
            spec.option, f"must name every partition the query reads: no entry for "
            f"{tp.topic}-{tp.partition}"
        )
    offset = spec.offsets[tp]
    if offset == EARLIEST:
        return files.log_start_offset
    if offset == LATEST:
        return None
    return offset


def plan_segments(options: ReadOptions) -> list[SegmentPartition]:
    """The tasks of a file-mode read: one per segment holding offsets the query reads.

    Raises:
        OptionError: see :func:`find_partitions`; JSON offsets naming other partitions.
        DataLossError: a starting offset below a partition's log start offset (only with
            failOnDataLoss; otherwise the start moves up, with a warning).
    """
    assert options.path is not None
    partitions = find_partitions(options.path, options.subscription)
    for spec in (options.starting, options.ending):
        if spec is not None and spec.kind == "offsets":
            extra = [tp for tp in spec.offsets if tp not in partitions]
            if extra:
                raise OptionError(
                    spec.option, "names partitions the query does not read: "
                    + ", ".join(f"{t}-{p}" for t, p in extra)
                )
    tasks: list[SegmentPartition] = []
    for tp, files in partitions.items():
        start = _bound(options, files, starting=True)
        end = _bound(options, files, starting=False)
        assert start is not None
        if start < files.log_start_offset:
            message = (
                f"offsets from {start} of {tp.topic}-{tp.partition} are below its log start "
                f"offset {files.log_start_offset} in {options.path!r}"
            )
            report_data_loss(message, options.fail_on_data_loss, "skip them")
            start = files.log_start_offset
        if end is not None and start > end:
            raise OptionError(
                options.starting.option, f"starting offset {start} of {tp.topic}-"
                f"{tp.partition} is after its ending offset {end}"
            )
        transactions = scan_transactions(files.segments) if options.read_committed else None
        if transactions is not None:
            stable = transactions.last_stable_offset
            if end is not None and end > stable:
                assert options.ending is not None
                logger.warning(
                    "%s: ending offset %d of %s-%d is above its last stable offset %d in %r "
                    "(a transaction with no marker in the files begins there); reading up to "
                    "it (isolationLevel=read_committed)",
                    options.ending.option, end, tp.topic, tp.partition, stable, options.path,
                )
            end = stable if end is None else min(end, stable)
        segments = files.segments
        for i, (base, segment_path) in enumerate(segments):
            next_base = segments[i + 1][0] if i + 1 < len(segments) else None
            seg_from = max(start, base)
            seg_until = next_base if end is None else (
                end if next_base is None else min(end, next_base)
            )
            if seg_until is not None and seg_from >= seg_until:
                continue
            aborted = None
            if transactions is not None:
                assert seg_until is not None  # read_committed always ends at the LSO
                aborted = transactions.aborted_overlapping(seg_from, seg_until)
            tasks.append(
                SegmentPartition(
                    OffsetRange(tp.topic, tp.partition, seg_from, seg_until),
                    segment_path,
                    is_last=next_base is None,
                    include_headers=options.include_headers,
                    aborted=aborted,
                )
            )
    return tasks


def read_segment(partition: SegmentPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of one segment task, about :data:`ARROW_BATCH_RECORDS` per batch.

    Raises:
        stratalog.records.RecordError: corrupt bytes (the message names the file and position).
        OSError: the file cannot be opened or mapped.
    """
    r = partition.offset_range
    columns = RecordColumns(r.topic, r.partition, partition.include_headers)
    # One filter for the whole segment: it sees the segment's batches in order.
    aborted = None if partition.aborted is None else AbortedTransactionFilter(partition.aborted)
    with open(partition.path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return
        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ)
        try:
            position = 0
            while True:
                walk = columns.append_batches(
                    mapped,
                    position,
                    r.from_offset,
                    r.until_offset,
                    source=partition.path,
                    records_max=ARROW_BATCH_RECORDS,
                    partial_tail_ok=partition.is_last,
                    aborted=aborted,
                )
                if len(columns):
                    yield columns.to_arrow()
                if walk.done or walk.end:
                    break
                position = walk.position
        finally:
            mapped.close()
