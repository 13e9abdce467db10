"""Topic names and partition directory names, with the storage engine's error type.

Every partition lives in a directory named ``<topic>-<partition>`` inside a log directory, so a
topic name typed by a user becomes a path component. The rules that keep that input inside the
data directories (Kafka's ``Topic.validate``), the four directory name forms (``LocalLog``) and
their parser are defined once in :mod:`stratalog.records.partition_dirs`, which the Spark file
reader uses too. This module gives them to the engine and the server with the engine's error,
:class:`~.errors.InvalidTopicError` (which ``server/rpc/status.py`` maps to ``INVALID_TOPIC``), and
adds what is the engine's own: the random id of a deleted directory, and Kafka's rule that two
topic names may not differ only in ``.`` versus ``_``. (It calls them through
:mod:`stratalog.records.log_layout`, the map of the formats, which re-exports them.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from stratalog.records import log_layout
from stratalog.records.errors import InvalidTopicNameError
from stratalog.records.log_layout import (
    DELETE_DIR_SUFFIX,
    DIR_NAME_LENGTH_MAX,
    FUTURE_DIR_SUFFIX,
    PARTITION_MAX,
    STRAY_DIR_SUFFIX,
    TOPIC_NAME_LENGTH_MAX,
    PartitionDirKind,
    is_deleted_dir_name,
    is_future_dir_name,
    is_stray_dir_name,
    is_valid_topic_name,
)

from .errors import InvalidTopicError

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
    "topic_collision_key",
    "validate_partition",
    "validate_topic_name",
]


@contextmanager
def _as_invalid_topic() -> Iterator[None]:
    """Re-raise the layout's InvalidTopicNameError as the engine's InvalidTopicError."""
    try:
        yield
    except InvalidTopicNameError as exc:
        raise InvalidTopicError(str(exc)) from exc


def validate_topic_name(name: str) -> str:
    """Check that ``name`` is a legal topic name and return it.

    Legal: 1 to 249 characters from ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``.

    Raises:
        InvalidTopicError: with a message naming the problem: empty, too long (with the length),
            the offending character (with its code point and index), or ``.``/``..``.
    """
    with _as_invalid_topic():
        return log_layout.validate_topic_name(name)


def validate_partition(partition: int) -> int:
    """Check that ``partition`` is a partition number (an int in 0 .. 2^31 - 1) and return it.

    Raises:
        InvalidTopicError: not an int (bools are refused too), negative, or above 2^31 - 1.
    """
    with _as_invalid_topic():
        return log_layout.validate_partition(partition)


def topic_collision_key(name: str) -> str:
    """The key under which two topic names collide: ``.`` and ``_`` unified (Kafka's rule).

    Kafka refuses to create ``a.b`` when ``a_b`` exists (and the reverse), because its metric
    names cannot tell them apart; a LogManager that wants the same rule compares these keys.
    """
    return name.replace(".", "_")


def partition_dir_name(topic: str, partition: int) -> str:
    """The directory name of a live partition: ``<topic>-<partition>``.

    Raises:
        InvalidTopicError: an invalid topic or partition, or a name over 255 characters (a
            249-character topic leaves room for partitions up to 99999 only).
    """
    with _as_invalid_topic():
        return log_layout.partition_dir_name(topic, partition)


def deleted_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """The name a partition directory is renamed to when it is deleted.

    ``<topic>-<partition>.<unique_id>-delete``, where ``unique_id`` defaults to a random UUID
    as 32 hex digits, so that deleting a topic twice never collides. Capped at 255 characters by
    truncating the topic (Kafka's ``logDirNameWithSuffixCappedLength``).

    Raises:
        InvalidTopicError: an invalid topic or partition, or a ``unique_id`` that is not 1 to 32
            lowercase hex digits.
    """
    with _as_invalid_topic():
        return log_layout.deleted_dir_name(
            topic, partition, uuid.uuid4().hex if unique_id is None else unique_id
        )


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """The (topic, partition) of a partition directory name, in any of its four forms.

    Raises:
        InvalidTopicError: ``name`` is not a partition directory name (see
            :func:`stratalog.records.partition_dirs.parse_partition_dir_name` for the rules).
    """
    with _as_invalid_topic():
        return log_layout.parse_partition_dir_name(name)


def partition_dir_kind(name: str) -> PartitionDirKind:
    """Which of the four forms ``name`` has; it must parse (see :func:`parse_partition_dir_name`).

    Raises:
        InvalidTopicError: ``name`` is not a partition directory name.
    """
    with _as_invalid_topic():
        return log_layout.partition_dir_kind(name)
