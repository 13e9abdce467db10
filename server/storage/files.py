"""Segment file naming: the base offset, zero-padded to 20 digits, then a suffix.

Every file of a segment is named after the segment's base offset so that ``ls`` sorts the files of
a partition directory numerically (Kafka's ``LogFileUtils``)::

    00000000000000000000.log          offset 0 -> 20 zero digits
    00000000000000001234.index        offset 1234
    09223372036854775807.timeindex    Long.MAX_VALUE (19 digits, one leading zero)
    00000000000000000100.log.swap     temporary suffixes are appended after the normal one

The normal suffixes are ``.log``, ``.index``, ``.timeindex``, ``.txnindex`` and ``.snapshot`` (a
producer snapshot is named after the offset it ends at, not a segment base). The temporary
suffixes ``.deleted`` (scheduled for asynchronous deletion), ``.cleaned`` (cleaner or split output
not yet swapped in) and ``.swap`` (ready to replace the files it covers) mark the crash-safe
replace protocol that log recovery resolves.

Pure functions of names: nothing here touches the file system.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InvalidSegmentFileNameError

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "DELETED_FILE_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "LOG_FILE_SUFFIX",
    "SNAPSHOT_FILE_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TIME_INDEX_FILE_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "filename_prefix_from_offset",
    "is_index_file",
    "is_log_file",
    "log_file",
    "offset_from_file",
    "offset_from_file_name",
    "offset_index_file",
    "producer_snapshot_file",
    "time_index_file",
    "transaction_index_file",
]

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"

# Offsets are Java longs on disk and in Kafka's names; 20 digits hold every non-negative one.
_OFFSET_MAX = 2**63 - 1
_PREFIX_DIGITS = 20
_INDEX_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)

StrPath = str | os.PathLike[str]


def filename_prefix_from_offset(offset: int) -> str:
    """Return ``offset`` as the 20-digit, zero-padded base name of a segment's files.

    Raises:
        ValueError: ``offset`` is negative or larger than 2^63 - 1 (no segment can have it).
    """
    if not 0 <= offset <= _OFFSET_MAX:
        raise ValueError(f"a segment file offset must be in [0, {_OFFSET_MAX}], got {offset}")
    return f"{offset:0{_PREFIX_DIGITS}d}"


def _segment_file(dir: StrPath, offset: int, kind_suffix: str, suffix: str) -> Path:
    return Path(dir) / f"{filename_prefix_from_offset(offset)}{kind_suffix}{suffix}"


def log_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.log`` file of the segment at ``offset`` in ``dir``, plus an optional temp suffix."""
    return _segment_file(dir, offset, LOG_FILE_SUFFIX, suffix)


def offset_index_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.index`` file of the segment at ``offset`` in ``dir``, plus an optional temp suffix."""
    return _segment_file(dir, offset, INDEX_FILE_SUFFIX, suffix)


def time_index_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.timeindex`` file of the segment at ``offset``, plus an optional temp suffix."""
    return _segment_file(dir, offset, TIME_INDEX_FILE_SUFFIX, suffix)


def transaction_index_file(dir: StrPath, offset: int, suffix: str = "") -> Path:
    """The ``.txnindex`` file of the segment at ``offset``, plus an optional temp suffix."""
    return _segment_file(dir, offset, TXN_INDEX_FILE_SUFFIX, suffix)


def producer_snapshot_file(dir: StrPath, offset: int) -> Path:
    """The ``.snapshot`` file of the producer state as of (exclusive) end offset ``offset``."""
    return _segment_file(dir, offset, SNAPSHOT_FILE_SUFFIX, "")


def offset_from_file_name(name: StrPath) -> int:
    """Parse the offset a segment file name starts with: the digits before the first dot.

    ``"00000000000000001234.index.swap"`` gives 1234. A path is accepted; only its last component
    is parsed. Stricter than Kafka's ``Long.parseLong``: only ASCII digits are accepted (no sign,
    no spaces, no underscores), since no file Kafka or stratalog writes has anything else there.

    Raises:
        InvalidSegmentFileNameError: (a ``ValueError``) no dot, no digits before it, something
            other than digits, or a number above 2^63 - 1.
    """
    base = Path(name).name if isinstance(name, os.PathLike) else os.path.basename(name)
    dot = base.find(".")
    if dot < 0:
        raise InvalidSegmentFileNameError(
            f"segment file name {base!r} has no '.<suffix>' after its offset"
        )
    digits = base[:dot]
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidSegmentFileNameError(
            f"segment file name {base!r} does not start with a decimal offset "
            f"(found {digits!r} before the first '.')"
        )
    offset = int(digits)
    if offset > _OFFSET_MAX:
        raise InvalidSegmentFileNameError(
            f"segment file name {base!r} has offset {offset}, above the maximum {_OFFSET_MAX}"
        )
    return offset


def offset_from_file(path: StrPath) -> int:
    """:func:`offset_from_file_name` of the last component of ``path``."""
    return offset_from_file_name(Path(path))


def is_log_file(path: StrPath) -> bool:
    """True iff the name ends with ``.log`` (so ``x.log.deleted`` is not a log file)."""
    return os.fspath(path).endswith(LOG_FILE_SUFFIX)


def is_index_file(path: StrPath) -> bool:
    """True iff the name ends with ``.index``, ``.timeindex`` or ``.txnindex``."""
    return os.fspath(path).endswith(_INDEX_SUFFIXES)
