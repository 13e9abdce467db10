"""Segment file paths: a partition directory joined with the names of ``records.log_layout``.

The names themselves (20-digit base offsets, ``.log``/``.index``/... suffixes, the temporary
``.deleted``/``.cleaned``/``.swap`` suffixes) are defined once in
:mod:`stratalog.records.log_layout`, which ``stratalog dump-log`` and the Spark file reader read
too. This module adds what only the storage engine needs: paths in a directory, and offsets parsed
out of names with the engine's own error type::

    log_file(Path("data/orders-0"), 1234)        data/orders-0/00000000000000001234.log
    offset_index_file(d, 100, SWAP_FILE_SUFFIX)  d/00000000000000000100.index.swap

Pure functions of paths: nothing here touches the file system.
"""

from __future__ import annotations

import os
from pathlib import Path

from stratalog.records.errors import InvalidFileNameError
from stratalog.records.log_layout import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SNAPSHOT_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    segment_file_name,
)
from stratalog.records.log_layout import offset_from_file_name as _offset_from_file_name

from .errors import InvalidSegmentFileNameError

__all__ = [
    "log_file",
    "offset_from_file",
    "offset_from_file_name",
    "offset_index_file",
    "producer_snapshot_file",
    "time_index_file",
    "transaction_index_file",
]

StrPath = str | os.PathLike[str]


def log_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.log`` file of the segment at ``offset`` in ``dir``, plus an optional temp suffix."""
    return Path(dir) / segment_file_name(offset, LOG_FILE_SUFFIX, suffix)


def offset_index_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.index`` file of the segment at ``offset`` in ``dir``, plus an optional temp suffix."""
    return Path(dir) / segment_file_name(offset, INDEX_FILE_SUFFIX, suffix)


def time_index_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.timeindex`` file of the segment at ``offset``, plus an optional temp suffix."""
    return Path(dir) / segment_file_name(offset, TIME_INDEX_FILE_SUFFIX, suffix)


def transaction_index_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.txnindex`` file of the segment at ``offset``, plus an optional temp suffix."""
    return Path(dir) / segment_file_name(offset, TXN_INDEX_FILE_SUFFIX, suffix)


def producer_snapshot_file(dir: StrPath, offset: int) -> Path:
    """The ``.snapshot`` file of the producer state as of (exclusive) end offset ``offset``."""
    return Path(dir) / segment_file_name(offset, SNAPSHOT_FILE_SUFFIX)


def offset_from_file_name(name: StrPath) -> int:
    """The offset a segment file name starts with (:func:`log_layout.offset_from_file_name
    <stratalog.records.log_layout.offset_from_file_name>`), for callers in the engine.

    Raises:
        InvalidSegmentFileNameError: (a ``StorageError`` and a ``ValueError``) the name is not
            ``<offset>.<suffix>``; the message names it.
    """
    try:
        return _offset_from_file_name(name)
    except InvalidFileNameError as exc:
        raise InvalidSegmentFileNameError(str(exc)) from exc


def offset_from_file(path: StrPath) -> int:
    """:func:`offset_from_file_name` of the last component of ``path``."""
    return offset_from_file_name(Path(path))
