"""The on-disk layout around the record batches: names, index entries, snapshots, checkpoints.

Kafka stores a partition as a directory of segments; each segment is a ``.log`` of record batches
(:mod:`stratalog.records.batch` owns their layout) with index files beside it, all named after the
segment's base offset. A log directory holds the partition directories and two offset
checkpoints::

    <log dir>/
        recovery-point-offset-checkpoint    offset checkpoint text, §7
        log-start-offset-checkpoint         offset checkpoint text, §7
        replication-offset-checkpoint       offset checkpoint text, §7 (high watermarks)
        orders-0/                           a partition directory, <topic>-<partition>, §2
            00000000000000000000.log        record batches; base offset in 20 digits, §1
            00000000000000000000.index      offset index entries, §3
            00000000000000000000.timeindex  time index entries, §4
            00000000000000000000.txnindex   aborted transactions, §5
            00000000000000004096.snapshot   producer state as of offset 4096 (exclusive), §6
            leader-epoch-checkpoint         leader epochs and their start offsets, §8
        orders-1.<32 hex>-delete/           a deleted partition, removed in the background

This module holds every name, number and byte layout of those files once, so that the storage
engine, ``stratalog dump-log`` and the Spark file reader cannot drift apart. It is sans-IO like
the rest of :mod:`stratalog.records`: names and bytes in, values out, nothing opened. The storage
engine joins the names with directories (``server/storage/files.py``) and turns the errors below
(:class:`~stratalog.records.errors.LayoutError`) into its own, adding the path.

§1 Segment file names (Kafka's ``LogFileUtils``). The base offset, zero-padded to 20 digits so
that ``ls`` sorts files in offset order, then a suffix::

    00000000000000000000.log          offset 0 -> 20 zero digits
    00000000000000001234.index        offset 1234
    09223372036854775807.timeindex    2^63 - 1 (19 digits, one leading zero)
    00000000000000000100.log.swap     temporary suffixes go after the normal one

Suffixes ``.log``, ``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``; temporary suffixes
``.deleted`` (scheduled for asynchronous deletion), ``.cleaned`` (cleaner or split output not yet
swapped in) and ``.swap`` (ready to replace the files it covers), which log recovery resolves.

§2 Partition directory names (Kafka's ``LocalLog``) and the topic names they are made of
(Kafka's ``Topic.validate``)::

    <topic>-<partition>                         a live partition, e.g. "orders-0"
    <topic>-<partition>.<32 hex>-delete         renamed for deletion, removed in the background
    <topic>-<partition>.<32 hex>-future         target of a move between log directories
    <topic>-<partition>.<32 hex>-stray          a replica the cluster no longer assigns here

A topic name typed by a user becomes a path component, so the rules keep it inside the data
directories: 1 to 249 characters of ASCII letters, digits, ``.``, ``_`` and ``-``, never ``.`` or
``..`` alone. The ``<32 hex>`` part is a random UUID without dashes (two deletions never collide);
``-delete`` and ``-stray`` names are capped at 255 characters (Linux's NAME_MAX) by truncating the
topic: they are only ever removed, never parsed back into a live partition. Parsing splits at the
LAST ``-``, because topics may contain ``-`` but partitions cannot. Stricter than Kafka so that a
partition has exactly one name: the partition must be canonical decimal (``7``, not ``+7`` or
``007``, which Java's ``Integer.parseInt`` takes) and the topic part a valid topic name.

§3 Offset index (``.index``, Kafka's ``OffsetIndex``): entries of 8 bytes, big-endian, no header,
no checksum::

    offset size field
         0    4 relative_offset   int32, offset - base_offset, in [0, 2^31 - 1]
         4    4 position          int32, byte position of the append in the .log

    base offset 100, entry (offset 105, position 4096) -> 00000005 00001000

§4 Time index (``.timeindex``, Kafka's ``TimeIndex``): entries of 12 bytes, big-endian, no
header, no checksum::

    offset size field
         0    8 timestamp         int64, milliseconds since the epoch
         8    4 relative_offset   int32, offset - base_offset, in [0, 2^31 - 1]

    base offset 100, entry (timestamp 1700000000000, offset 105) -> 0000018bcfe56800 00000005

§5 Transaction index (``.txnindex``, Kafka's ``AbortedTxn``): entries of 34 bytes, big-endian,
no header, no checksum; trailing bytes short of a whole entry are ignored by readers::

    offset size field
         0    2 version             int16, 0 (Kafka reads only byte 0, signed, and rejects > 0)
         2    8 producer_id         int64
        10    8 first_offset        int64, first offset of the aborted transaction
        18    8 last_offset         int64, offset of the ABORT marker
        26    8 last_stable_offset  int64

    (983493, 137, 299, 200) -> 0000 00000000000f01c5 0000000000000089 000000000000012b
                               00000000000000c8

§6 Producer snapshot (``.snapshot``, Kafka's ``ProducerSnapshot.json`` v1): a 10-byte header,
then ``entry_count`` entries of 46 bytes, big-endian; the CRC-32C covers bytes [6, end)::

    offset size field                     entry:  offset size field
         0    2 version      int16, 1                  0    8 producer_id               int64
         2    4 crc          uint32                    8    2 producer_epoch            int16
         6    4 entry_count  int32                    10    4 last_sequence             int32
        10      entries                               14    8 last_offset               int64
                                                      22    4 offset_delta              int32
                                                      26    8 timestamp                 int64
                                                      34    4 coordinator_epoch         int32
                                                      38    8 current_txn_first_offset  int64

§7 Offset checkpoint text (Kafka's ``CheckpointFile`` with ``OffsetCheckpointFile``'s
formatter), UTF-8, ``\\n`` line ends::

    0                              line 1: the format version, always 0
    2                              line 2: the number of entry lines that follow
    orders 0 1234                  "<topic> <partition> <offset>", single spaces
    orders 1 0

Parsing follows Kafka exactly, so that text Kafka accepts is accepted and text it rejects is
rejected: no lines, or only the version line, is empty; a version other than 0, a line that is
not a decimal int where one is expected (Java's ``parseInt``/``parseLong``: an optional sign and
ASCII digits), an entry line that does not split on whitespace into exactly three fields, or an
entry count that does not match the count line are errors. Lines end at ``\\n``, ``\\r`` or
``\\r\\n`` (``BufferedReader.readLine``); a partition listed twice takes its last offset.
``replication-offset-checkpoint`` (the high watermarks) is one more file in this format.

§8 ``leader-epoch-checkpoint`` (Kafka's ``LeaderEpochCheckpointFile``), one per partition
directory: the same container (version 0, count line, then entries, same parsing rules), each
entry ``"<leader epoch> <start offset>"``: the epoch a Java int, the offset a Java long, exactly
two whitespace-separated fields::

    0                              version
    2                              entry count
    0 0                            epoch 0 began at offset 0
    3 1200                         epoch 3 began at offset 1200

Entries are written in increasing epoch (and start offset) order; what the entries mean and the
rules they keep are the storage engine's (``server/storage/leader_epoch_cache.py``).
"""

from __future__ import annotations

import enum
import os
import re
import struct
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .crc import crc32c
from .errors import (
    CorruptIndexEntryError,
    CorruptOffsetCheckpointError,
    CorruptSnapshotError,
    InvalidFileNameError,
    InvalidTopicNameError,
)

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "DELETED_FILE_SUFFIX",
    "DELETE_DIR_SUFFIX",
    "DIR_NAME_LENGTH_MAX",
    "FUTURE_DIR_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "LOG_FILE_SUFFIX",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "OFFSET_CHECKPOINT_VERSION",
    "OFFSET_INDEX_ENTRY",
    "OFFSET_INDEX_POSITION",
    "OFFSET_INDEX_RELATIVE_OFFSET",
    "PARTITION_MAX",
    "PRODUCER_SNAPSHOT_CRC_START",
    "PRODUCER_SNAPSHOT_ENTRY",
    "PRODUCER_SNAPSHOT_HEADER",
    "PRODUCER_SNAPSHOT_VERSION",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "SNAPSHOT_FILE_SUFFIX",
    "STRAY_DIR_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TIME_INDEX_ENTRY",
    "TIME_INDEX_FILE_SUFFIX",
    "TIME_INDEX_RELATIVE_OFFSET",
    "TIME_INDEX_TIMESTAMP",
    "TOPIC_NAME_LENGTH_MAX",
    "TXN_INDEX_ENTRY",
    "TXN_INDEX_FILE_SUFFIX",
    "TXN_INDEX_VERSION",
    "EntryField",
    "OffsetIndexEntry",
    "PartitionDirKind",
    "ProducerSnapshot",
    "ProducerSnapshotEntry",
    "TimeIndexEntry",
    "TxnIndexEntry",
    "deleted_dir_name",
    "filename_prefix_from_offset",
    "format_leader_epoch_checkpoint",
    "format_offset_checkpoint",
    "is_deleted_dir_name",
    "is_future_dir_name",
    "is_index_file",
    "is_log_file",
    "is_stray_dir_name",
    "is_valid_topic_name",
    "offset_from_file_name",
    "pack_producer_snapshot",
    "pack_txn_index_entry",
    "parse_leader_epoch_checkpoint",
    "parse_offset_checkpoint",
    "parse_partition_dir_name",
    "partition_dir_kind",
    "partition_dir_name",
    "segment_file_name",
    "unpack_offset_index",
    "unpack_producer_snapshot",
    "unpack_time_index",
    "unpack_txn_index",
    "unpack_txn_index_entry",
    "validate_partition",
    "validate_topic_name",
]

Buffer = bytes | bytearray | memoryview

# Java's int and long: Kafka's offsets, timestamps and partitions are one or the other.
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# ----------------------------------------------------------------------- §1 segment file names

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"

# 20 digits hold every non-negative Java long, the range of offsets.
_PREFIX_DIGITS = 20
_INDEX_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)


def filename_prefix_from_offset(offset: int) -> str:
    """Return ``offset`` as the 20-digit, zero-padded base name of a segment's files.

    Raises:
        ValueError: ``offset`` is negative or larger than 2^63 - 1 (no segment can have it).
    """
    if not 0 <= offset <= _INT64_MAX:
        raise ValueError(f"a segment file offset must be in [0, {_INT64_MAX}], got {offset}")
    return f"{offset:0{_PREFIX_DIGITS}d}"


def segment_file_name(offset: int, suffix: str, temp_suffix: str = "") -> str:
    """The name of a segment file: ``segment_file_name(100, ".index", ".swap")`` is
    ``"00000000000000000100.index.swap"``.

    Raises:
        ValueError: as :func:`filename_prefix_from_offset`.
    """
    return f"{filename_prefix_from_offset(offset)}{suffix}{temp_suffix}"


def offset_from_file_name(name: str | os.PathLike[str]) -> int:
    """Parse the offset a segment file name starts with: the digits before the first dot.

    ``"00000000000000001234.index.swap"`` gives 1234. A path is accepted; only its last component
    is parsed (a string operation: nothing is looked up). Stricter than Kafka's
    ``Long.parseLong``: only ASCII digits are accepted (no sign, no spaces, no underscores), since
    no file Kafka or stratalog writes has anything else there.

    Raises:
        InvalidFileNameError: (a ``ValueError``) no dot, no digits before it, something other
            than digits, or a number above 2^63 - 1.
    """
    base = os.path.basename(os.fspath(name))
    dot = base.find(".")
    if dot < 0:
        raise InvalidFileNameError(
            f"segment file name {base!r} has no '.<suffix>' after its offset"
        )
    digits = base[:dot]
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidFileNameError(
            f"segment file name {base!r} does not start with a decimal offset "
            f"(found {digits!r} before the first '.')"
        )
    offset = int(digits)
    if offset > _INT64_MAX:
        raise InvalidFileNameError(
            f"segment file name {base!r} has offset {offset}, above the maximum {_INT64_MAX}"
        )
    return offset


def is_log_file(name: str | os.PathLike[str]) -> bool:
    """True iff the name ends with ``.log`` (so ``x.log.deleted`` is not a log file)."""
    return os.fspath(name).endswith(LOG_FILE_SUFFIX)


def is_index_file(name: str | os.PathLike[str]) -> bool:
    """True iff the name ends with ``.index``, ``.timeindex`` or ``.txnindex``."""
    return os.fspath(name).endswith(_INDEX_SUFFIXES)


# -------------------------------------------------- §2 topic names and partition directory names

# Kafka's Topic.MAX_NAME_LENGTH: 249 leaves room for "-" and a 5-digit partition within 255.
TOPIC_NAME_LENGTH_MAX = 249
# NAME_MAX of Linux file systems (ext4, xfs, btrfs): the longest single path component.
DIR_NAME_LENGTH_MAX = 255
# Partitions are Java ints in Kafka: 0 .. 2^31 - 1.
PARTITION_MAX = _INT32_MAX

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
# Canonical decimal: "0", or digits without a leading zero. ASCII only (re.ASCII), so that no
# Unicode digit such as "٣" passes as a partition.
_PARTITION_RE = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_UNIQUE_ID_RE = re.compile(r"[0-9a-f]{1,32}", re.ASCII)
# Kafka's DeleteDirPattern and friends: ^(\S+)-(\S+)\.(\S+)-delete$ (Java's \S is ASCII-only).
_SPECIAL_DIR_RES = {
    suffix: re.compile(r"(\S+)-(\S+)\.(\S+)" + re.escape(suffix), re.ASCII)
    for suffix in (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)
}


class PartitionDirKind(enum.Enum):
    """What a partition directory name says about the directory."""

    LIVE = "live"  # <topic>-<partition>
    DELETE = "delete"  # pending deletion
    FUTURE = "future"  # alter-log-dir move target
    STRAY = "stray"  # no longer assigned here


def _describe_char(char: str) -> str:
    # repr() shows NUL, tabs and look-alikes unambiguously; the code point settles the rest.
    return f"{char!r} (U+{ord(char):04X})"


def _topic_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid topic name, or ``None`` if it is (Kafka's order of checks)."""
    if not isinstance(name, str):
        return f"a topic name must be a string, not {type(name).__name__}"
    if name == "":
        return "the empty string is not allowed"
    if name in (".", ".."):
        return f"{name!r} is not allowed (it names a directory, not a topic)"
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return (
            f"it is {len(name)} characters long, over the limit of {TOPIC_NAME_LENGTH_MAX} "
            f"(starts with {name[:20]!r})"
        )
    for position, char in enumerate(name):
        if char not in _LEGAL_TOPIC_CHARS:
            return (
                f"{name!r} contains {_describe_char(char)} at index {position}; only ASCII "
                "letters, digits, '.', '_' and '-' are allowed"
            )
    return None


def validate_topic_name(name: str) -> str:
    """Check that ``name`` is a legal topic name and return it.

    Legal: 1 to 249 characters from ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``.

    Raises:
        InvalidTopicNameError: with a message naming the problem: empty, too long (with the
            length), the offending character (with its code point and index), or ``.``/``..``.
    """
    problem = _topic_name_problem(name)
    if problem is not None:
        raise InvalidTopicNameError(f"Topic name is invalid: {problem}")
    return name


def is_valid_topic_name(name: str) -> bool:
    """Whether :func:`validate_topic_name` would accept ``name``."""
    return _topic_name_problem(name) is None


def validate_partition(partition: int) -> int:
    """Check that ``partition`` is a partition number (an int in 0 .. 2^31 - 1) and return it.

    Raises:
        InvalidTopicNameError: not an int (bools are refused too), negative, or above 2^31 - 1.
    """
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidTopicNameError(
            f"a partition must be an int, not {type(partition).__name__} {partition!r}"
        )
    if not 0 <= partition <= PARTITION_MAX:
        raise InvalidTopicNameError(f"partition {partition} is outside 0 .. {PARTITION_MAX}")
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    """The directory name of a live partition: ``<topic>-<partition>``.

    Raises:
        InvalidTopicNameError: an invalid topic or partition, or a name over 255 characters (a
            249-character topic leaves room for partitions up to 99999 only).
    """
    validate_topic_name(topic)
    validate_partition(partition)
    name = f"{topic}-{partition}"
    if len(name) > DIR_NAME_LENGTH_MAX:
        raise InvalidTopicNameError(
            f"partition directory name for topic {topic[:20]!r}... partition {partition} would be "
            f"{len(name)} characters, over the file-name limit of {DIR_NAME_LENGTH_MAX}"
        )
    return name


def deleted_dir_name(topic: str, partition: int, unique_id: str) -> str:
    """The name a partition directory is renamed to when it is deleted.

    ``<topic>-<partition>.<unique_id>-delete``, capped at 255 characters by truncating the topic
    (Kafka's ``logDirNameWithSuffixCappedLength``). ``unique_id`` is a random UUID as 32 hex
    digits in Kafka; the caller draws it.

    Raises:
        InvalidTopicNameError: an invalid topic or partition, or a ``unique_id`` that is not 1 to
            32 lowercase hex digits.
    """
    validate_topic_name(topic)
    validate_partition(partition)
    if not _UNIQUE_ID_RE.fullmatch(unique_id):
        raise InvalidTopicNameError(
            f"unique id {unique_id!r} is not 1 to 32 lowercase hex digits"
        )
    full_suffix = f"-{partition}.{unique_id}{DELETE_DIR_SUFFIX}"
    prefix_length = min(len(topic), DIR_NAME_LENGTH_MAX - len(full_suffix))
    return topic[:prefix_length] + full_suffix


def _special_suffix(name: str) -> str | None:
    for suffix in _SPECIAL_DIR_RES:
        if name.endswith(suffix):
            return suffix
    return None


def _not_a_partition_dir(name: str, why: str) -> InvalidTopicNameError:
    return InvalidTopicNameError(
        f"directory name {name!r} is not of the form <topic>-<partition> or "
        f"<topic>-<partition>.<unique id>-delete|-future|-stray: {why}"
    )


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """The (topic, partition) of a partition directory name, in any of its four forms.

    Splits at the last ``-`` of the name (after dropping ``.<unique id>-delete`` and the like),
    as Kafka's ``LocalLog.parseTopicPartitionName`` does. The topic of a capped ``-delete`` or
    ``-stray`` name is the truncated topic.

    Raises:
        InvalidTopicNameError: the name has no ``-``, a special suffix without ``.<unique id>``,
            an empty or invalid topic, or a partition that is not canonical decimal in
            0 .. 2^31 - 1 (``+1``, ``01``, ``-1``, ``1.5``, non-ASCII digits).
    """
    if not isinstance(name, str) or name == "":
        raise _not_a_partition_dir(str(name), "the name is empty")
    if "-" not in name:
        raise _not_a_partition_dir(name, "it contains no '-'")
    suffix = _special_suffix(name)
    if suffix is not None:
        if not _SPECIAL_DIR_RES[suffix].fullmatch(name):
            raise _not_a_partition_dir(name, f"{suffix!r} without '.<unique id>' before it")
        name_part = name[: name.rindex(".")]
    else:
        name_part = name
    topic, _, partition_text = name_part.rpartition("-")
    if topic == "" or partition_text == "":
        raise _not_a_partition_dir(name, "the topic or the partition is empty")
    if not _PARTITION_RE.fullmatch(partition_text):
        raise _not_a_partition_dir(
            name,
            f"partition {partition_text!r} is not a non-negative decimal without leading zeros",
        )
    partition = int(partition_text)
    if partition > PARTITION_MAX:
        raise _not_a_partition_dir(name, f"partition {partition} is over {PARTITION_MAX}")
    problem = _topic_name_problem(topic)
    if problem is not None:
        raise _not_a_partition_dir(name, f"topic {topic!r} is invalid: {problem}")
    return topic, partition


def partition_dir_kind(name: str) -> PartitionDirKind:
    """Which of the four forms ``name`` has; it must parse (see :func:`parse_partition_dir_name`).

    Raises:
        InvalidTopicNameError: ``name`` is not a partition directory name.
    """
    parse_partition_dir_name(name)
    suffix = _special_suffix(name)
    if suffix == DELETE_DIR_SUFFIX:
        return PartitionDirKind.DELETE
    if suffix == FUTURE_DIR_SUFFIX:
        return PartitionDirKind.FUTURE
    if suffix == STRAY_DIR_SUFFIX:
        return PartitionDirKind.STRAY
    return PartitionDirKind.LIVE


def _is_kind(name: str, kind: PartitionDirKind) -> bool:
    try:
        return partition_dir_kind(name) is kind
    except InvalidTopicNameError:
        return False


def is_deleted_dir_name(name: str) -> bool:
    """Whether ``name`` is a partition directory renamed for deletion (``…-delete``)."""
    return _is_kind(name, PartitionDirKind.DELETE)


def is_future_dir_name(name: str) -> bool:
    """Whether ``name`` is the target of a move between log directories (``…-future``)."""
    return _is_kind(name, PartitionDirKind.FUTURE)


def is_stray_dir_name(name: str) -> bool:
    """Whether ``name`` is a stray replica directory (``…-stray``)."""
    return _is_kind(name, PartitionDirKind.STRAY)


# ------------------------------------------------------------------ §3, §4, §5 index entries


class EntryField(NamedTuple):
    """One integer field of a fixed-size entry: its format and its byte offset in the entry.

    The storage engine's indexes search a column of their memory map through these (the same
    shape as ``server/storage/index.py``'s ``Column``); other readers use :meth:`read`.
    """

    fmt: struct.Struct
    field_offset: int

    def read(self, buf: Buffer, entry_position: int = 0) -> int:
        """The field of the entry that starts at byte ``entry_position`` of ``buf``."""
        return self.fmt.unpack_from(buf, entry_position + self.field_offset)[0]


_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

OFFSET_INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # relative_offset
    "i"  # position
)
OFFSET_INDEX_RELATIVE_OFFSET = EntryField(_INT32, 0)
OFFSET_INDEX_POSITION = EntryField(_INT32, struct.calcsize(">i"))  # 4

TIME_INDEX_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp
    "i"  # relative_offset
)
TIME_INDEX_TIMESTAMP = EntryField(_INT64, 0)
TIME_INDEX_RELATIVE_OFFSET = EntryField(_INT32, struct.calcsize(">q"))  # 8

TXN_INDEX_VERSION = 0
TXN_INDEX_ENTRY = struct.Struct(
    ">"
    "h"  # version
    "q"  # producer_id
    "q"  # first_offset
    "q"  # last_offset
    "q"  # last_stable_offset
)
# Kafka's AbortedTxn.version() is buffer.get(0): one signed byte of the two-byte field.
_TXN_INDEX_VERSION_BYTE = EntryField(struct.Struct(">b"), 0)
_TXN_FIELD_NAMES = ("producer_id", "first_offset", "last_offset", "last_stable_offset")


class OffsetIndexEntry(NamedTuple):
    """One ``.index`` entry as stored: the offset relative to the segment's base, a position."""

    relative_offset: int
    position: int


class TimeIndexEntry(NamedTuple):
    """One ``.timeindex`` entry as stored: a timestamp (ms) and a relative offset."""

    timestamp: int
    relative_offset: int


class TxnIndexEntry(NamedTuple):
    """One ``.txnindex`` entry as stored (offsets are absolute in this file)."""

    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def _whole_entries(data: Buffer, entry_size: int) -> memoryview:
    view = memoryview(data).cast("B")
    return view[: len(view) - len(view) % entry_size]


def unpack_offset_index(data: Buffer) -> list[OffsetIndexEntry]:
    """Every whole entry of ``.index`` bytes, in slot order (a partial tail is ignored).

    Values are as stored: a zero-filled (preallocated, untrimmed) file gives ``(0, 0)`` entries.
    """
    return [
        OffsetIndexEntry._make(fields)
        for fields in OFFSET_INDEX_ENTRY.iter_unpack(_whole_entries(data, OFFSET_INDEX_ENTRY.size))
    ]


def unpack_time_index(data: Buffer) -> list[TimeIndexEntry]:
    """Every whole entry of ``.timeindex`` bytes, in slot order (a partial tail is ignored)."""
    return [
        TimeIndexEntry._make(fields)
        for fields in TIME_INDEX_ENTRY.iter_unpack(_whole_entries(data, TIME_INDEX_ENTRY.size))
    ]


def pack_txn_index_entry(
    producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int
) -> bytes:
    """The 34-byte ``.txnindex`` entry (version 0) of one aborted transaction.

    Raises:
        ValueError: a field does not fit an int64 (the message names it).
    """
    values = (producer_id, first_offset, last_offset, last_stable_offset)
    for name, value in zip(_TXN_FIELD_NAMES, values, strict=True):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"aborted transaction field {name}={value} does not fit int64")
    return TXN_INDEX_ENTRY.pack(TXN_INDEX_VERSION, *values)


def unpack_txn_index_entry(buf: Buffer, position: int = 0) -> TxnIndexEntry:
    """The ``.txnindex`` entry at byte ``position`` of ``buf``, checked as Kafka checks it.

    Only the first byte of the version is read, as a signed byte (``0x0001`` passes as 0).

    Raises:
        CorruptIndexEntryError: that byte is above 0 (``.version`` holds it).
        struct.error: fewer than 34 bytes from ``position`` (the caller checks the length).
    """
    version = _TXN_INDEX_VERSION_BYTE.read(buf, position)
    if version > TXN_INDEX_VERSION:
        raise CorruptIndexEntryError(
            f"unexpected aborted transaction version {version}", version=version
        )
    return TxnIndexEntry._make(TXN_INDEX_ENTRY.unpack_from(buf, position))


def unpack_txn_index(data: Buffer) -> list[TxnIndexEntry]:
    """Every whole entry of ``.txnindex`` bytes as stored, versions unchecked (for dumps).

    A reader that acts on the entries uses :func:`unpack_txn_index_entry`, which refuses a
    version it does not know.
    """
    return [
        TxnIndexEntry._make(fields)
        for fields in TXN_INDEX_ENTRY.iter_unpack(_whole_entries(data, TXN_INDEX_ENTRY.size))
    ]


# ---------------------------------------------------------------------- §6 producer snapshot

PRODUCER_SNAPSHOT_VERSION = 1
PRODUCER_SNAPSHOT_HEADER = struct.Struct(
    ">"
    "h"  # version
    "I"  # crc (unsigned), CRC-32C of bytes [6, end)
    "i"  # entry_count
)
PRODUCER_SNAPSHOT_CRC_START = struct.calcsize(">hI")  # 6
PRODUCER_SNAPSHOT_ENTRY = struct.Struct(
    ">"
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # last_sequence
    "q"  # last_offset
    "i"  # offset_delta
    "q"  # timestamp
    "i"  # coordinator_epoch
    "q"  # current_txn_first_offset, -1 when no transaction is open
)


class ProducerSnapshotEntry(NamedTuple):
    """The state of one producer in a ``.snapshot`` (Kafka's ``ProducerStateEntry``)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


class ProducerSnapshot(NamedTuple):
    """A parsed ``.snapshot``: its header fields and its entries."""

    version: int
    crc: int
    entries: list[ProducerSnapshotEntry]


def pack_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The bytes of a version-1 ``.snapshot`` holding ``entries``, CRC included.

    Raises:
        struct.error: a field does not fit its width.
    """
    body = b"".join(PRODUCER_SNAPSHOT_ENTRY.pack(*entry) for entry in entries)
    count = len(body) // PRODUCER_SNAPSHOT_ENTRY.size
    data = bytearray(PRODUCER_SNAPSHOT_HEADER.pack(PRODUCER_SNAPSHOT_VERSION, 0, count)) + body
    crc = crc32c(memoryview(data)[PRODUCER_SNAPSHOT_CRC_START:])
    PRODUCER_SNAPSHOT_HEADER.pack_into(data, 0, PRODUCER_SNAPSHOT_VERSION, crc, count)
    return bytes(data)


def unpack_producer_snapshot(data: Buffer, *, verify_crc: bool) -> ProducerSnapshot:
    """Parse ``.snapshot`` bytes. Bytes past the declared entries are ignored.

    Args:
        verify_crc: compare the stored CRC with the CRC-32C of bytes [6, end), as Kafka's
            ``readSnapshot`` does; a dump that shows what is there passes False.
    Raises:
        CorruptSnapshotError: fewer than 10 bytes, a version other than 1 (Kafka's
            ``readSnapshot`` knows no other), a negative entry count or more entries than the
            bytes hold, or (with ``verify_crc``) a CRC mismatch.
    """
    if len(data) < PRODUCER_SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"producer snapshot is truncated ({len(data)} bytes)")
    version, crc, count = PRODUCER_SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        # Kafka's words, so that logs and dumps read alike.
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    needed = PRODUCER_SNAPSHOT_HEADER.size + count * PRODUCER_SNAPSHOT_ENTRY.size
    if count < 0 or needed > len(data):
        raise CorruptSnapshotError(
            f"producer snapshot declares {count} entries but holds {len(data)} bytes"
        )
    if verify_crc:
        computed = crc32c(memoryview(data)[PRODUCER_SNAPSHOT_CRC_START:])
        if computed != crc:
            raise CorruptSnapshotError(
                f"producer snapshot CRC is {crc:#010x} but bytes [{PRODUCER_SNAPSHOT_CRC_START}, "
                f"{len(data)}) give {computed:#010x}"
            )
    entries = [
        ProducerSnapshotEntry._make(
            PRODUCER_SNAPSHOT_ENTRY.unpack_from(
                data, PRODUCER_SNAPSHOT_HEADER.size + slot * PRODUCER_SNAPSHOT_ENTRY.size
            )
        )
        for slot in range(count)
    ]
    return ProducerSnapshot(version, crc, entries)


# ------------------------------------------------------------------ §7 offset checkpoint text

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"  # high watermarks
# The only version of the offset checkpoint format Kafka has ever written.
OFFSET_CHECKPOINT_VERSION = 0

# What Java's Integer.parseInt / Long.parseLong accept, restricted to ASCII digits: Python's int()
# would also take spaces, underscores and non-ASCII digits, which Kafka's files never contain.
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
# More significant digits than any Java long has (19): out of range without parsing.
_DIGITS_MAX = 19
# Java's "\\s+" is ASCII whitespace only: space, \t, \n, \x0b, \f, \r.
_WHITESPACE_RE = re.compile(r"\s+", re.ASCII)
# Java's BufferedReader.readLine ends a line at \n, \r or \r\n.
_LINE_END_RE = re.compile(r"\r\n|\r|\n")
# A malformed line is quoted in the error up to this many characters.
_QUOTED_LINE_CHARS_MAX = 200


def _split_lines(text: str) -> list[str]:
    """Lines as BufferedReader.readLine returns them: a final line end adds no empty line."""
    lines = _LINE_END_RE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _malformed(line: str, line_number: int, why: str) -> CorruptOffsetCheckpointError:
    shown = line if len(line) <= _QUOTED_LINE_CHARS_MAX else line[:_QUOTED_LINE_CHARS_MAX] + "..."
    return CorruptOffsetCheckpointError(
        f"Malformed line {line_number}: {shown!r} ({why})", line_number=line_number
    )


def _parse_int(text: str, line_number: int, low: int, high: int, line: str | None = None) -> int:
    """``text`` as Java's parseInt/parseLong would read it, within [low, high]; ``line`` is the
    whole line to quote in the error (default: ``text``)."""
    shown = line if line is not None else text
    if not _DECIMAL_RE.fullmatch(text):
        raise _malformed(shown, line_number, f"{text!r} is not a decimal integer")
    if len(text.lstrip("+-").lstrip("0")) > _DIGITS_MAX:
        # Out of range for sure; also keeps int() away from its 4300-digit limit.
        raise _malformed(shown, line_number, f"{text[:30]!r}... is far too large")
    value = int(text)
    if not low <= value <= high:
        raise _malformed(shown, line_number, f"{value} is outside {low} .. {high}")
    return value


def _parse_entry(line: str, line_number: int) -> tuple[str, int, int]:
    parts = _split_fields(line)
    if len(parts) != 3:
        raise _malformed(
            line, line_number, f"expected '<topic> <partition> <offset>', found {len(parts)} fields"
        )
    topic, partition_text, offset_text = parts
    partition = _parse_int(partition_text, line_number, _INT32_MIN, _INT32_MAX, line)
    offset = _parse_int(offset_text, line_number, _INT64_MIN, _INT64_MAX, line)
    return topic, partition, offset


def _checkpoint_entry_lines(data: Buffer) -> tuple[list[tuple[int, str]], int]:
    """The entry lines of checkpoint text, each with its 1-based line number, and the count the
    count line declares (§7 and §8 share this container: version line, count line, entries).

    The caller parses every entry line before comparing their number with the count, as Kafka
    does (a malformed line is reported before a count mismatch): :func:`_check_entry_count`.

    Raises:
        CorruptOffsetCheckpointError: bytes that are not UTF-8, a version other than 0, a
            version or count line that is not a decimal int, a negative count.
    """
    raw = bytes(data)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptOffsetCheckpointError(
            f"not UTF-8 text: byte {e.start} of {len(raw)} is {raw[e.start]:#04x}"
        ) from e
    lines = _split_lines(text)
    if not lines:
        return [], 0
    version = _parse_int(lines[0], 1, _INT32_MIN, _INT32_MAX)
    if version != OFFSET_CHECKPOINT_VERSION:
        raise CorruptOffsetCheckpointError(
            f"Unrecognised version {version} on line 1, expected version "
            f"{OFFSET_CHECKPOINT_VERSION}",
            line_number=1,
        )
    if len(lines) == 1:
        return [], 0
    expected_count = _parse_int(lines[1], 2, _INT32_MIN, _INT32_MAX)
    if expected_count < 0:
        # Java's new ArrayList<>(negative) throws here; say what is wrong instead.
        raise _malformed(lines[1], 2, "the entry count is negative")
    return [(index + 3, line) for index, line in enumerate(lines[2:])], expected_count


def _check_entry_count(found_count: int, expected_count: int) -> None:
    if found_count != expected_count:
        raise CorruptOffsetCheckpointError(
            f"Expected [{expected_count}] entries, but found [{found_count}]"
        )


def _split_fields(line: str) -> list[str]:
    """``line.split("\\s+")`` as Java's String.split does it."""
    parts = _WHITESPACE_RE.split(line)
    # Java's String.split drops trailing empty strings but keeps a leading one, and gives the
    # input itself when nothing matches (so "" is one empty field, not none).
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if parts == [""] and line != "":
        parts = []
    return parts


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
    entry_lines, expected_count = _checkpoint_entry_lines(data)
    entries: dict[tuple[str, int], int] = {}
    for line_number, line in entry_lines:
        topic, partition, offset = _parse_entry(line, line_number)
        entries[(topic, partition)] = offset
    _check_entry_count(len(entry_lines), expected_count)
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
        if not _INT64_MIN <= offset <= _INT64_MAX:
            raise ValueError(f"offset {offset} of {topic}-{partition} is outside a Java long")
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode("utf-8")


# ------------------------------------------------------------------ §8 leader-epoch checkpoint

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
    entry_lines, expected_count = _checkpoint_entry_lines(data)
    entries: list[tuple[int, int]] = []
    for line_number, line in entry_lines:
        parts = _split_fields(line)
        if len(parts) != 2:
            raise _malformed(
                line, line_number,
                f"expected '<leader epoch> <start offset>', found {len(parts)} fields",
            )
        epoch = _parse_int(parts[0], line_number, _INT32_MIN, _INT32_MAX, line)
        start_offset = _parse_int(parts[1], line_number, _INT64_MIN, _INT64_MAX, line)
        entries.append((epoch, start_offset))
    _check_entry_count(len(entry_lines), expected_count)
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
        if not _INT32_MIN <= epoch <= _INT32_MAX:
            raise ValueError(f"leader epoch {epoch} is outside a Java int")
        if not _INT64_MIN <= start_offset <= _INT64_MAX:
            raise ValueError(f"start offset {start_offset} of epoch {epoch} is outside a Java long")
        body.append(f"{epoch} {start_offset}")
    lines.append(str(len(body)))
    lines.extend(body)
    return ("\n".join(lines) + "\n").encode("utf-8")
