"""Segment file names (Kafka's ``LogFileUtils``): the base offset in 20 digits, then a suffix.

Every file of a segment is named after the segment's base offset, zero-padded to 20 digits so
that ``ls`` sorts files in offset order, then a suffix::

    00000000000000000000.log          offset 0 -> 20 zero digits
    00000000000000001234.index        offset 1234
    09223372036854775807.timeindex    2^63 - 1 (19 digits, one leading zero)
    00000000000000000100.log.swap     temporary suffixes go after the normal one

Suffixes ``.log``, ``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``; temporary suffixes
``.deleted`` (scheduled for asynchronous deletion), ``.cleaned`` (cleaner or split output not yet
swapped in) and ``.swap`` (ready to replace the files it covers), which log recovery resolves.

Sans-IO: names in, values out; nothing is looked up on disk. The storage engine joins the names
with directories (``server/storage/files.py``).
"""

from __future__ import annotations

import os

from .errors import InvalidFileNameError

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
    "offset_from_file_name",
    "segment_file_name",
]

# Java's long: the range of offsets.
_INT64_MAX = 2**63 - 1

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
