"""Partition directory names (Kafka's ``LocalLog``) and the topic names they are made of
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

Sans-IO: names in, values out. The storage engine (``server/storage/topic_names.py``) and the
Spark file reader both use these rules, so they accept and refuse the same directories.
"""

from __future__ import annotations

import enum
import re

from .errors import InvalidTopicNameError

__all__ = [
    "DELETE_DIR_SUFFIX",
    "DIR_NAME_LENGTH_MAX",
    "FUTURE_DIR_SUFFIX",
    "PARTITION_MAX",
    "STRAY_DIR_SUFFIX",
    "TOPIC_NAME_LENGTH_MAX",
    "PartitionDirKind",
    "deleted_dir_name",
    "is_deleted_dir_name",
    "is_future_dir_name",
    "is_stray_dir_name",
    "is_valid_topic_name",
    "parse_partition_dir_name",
    "partition_dir_kind",
    "partition_dir_name",
    "validate_partition",
    "validate_topic_name",
]

_INT32_MAX = 2**31 - 1

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
