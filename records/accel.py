"""The record codec's per-record loops, in C when built: which implementation runs; columns.

Decoding or encoding a record in pure Python costs about a microsecond (docs/records.md), a
million records a second at best on one core, so the codec's three per-record loops also exist in
C (``records/_speedups.c``): :func:`decode_records`, :func:`walk_records` and
:func:`encode_record` here are the C functions when the extension was built, and the
pure-Python reference functions of :mod:`stratalog.records.record` otherwise. Both give the same
results and raise the same errors with the same messages (tests/unit/records/test_accel.py
compares them on random, truncated and corrupted input), so callers never need to know which one
runs; :data:`ACCELERATED` says it, for logs and benchmarks.

The reader (:mod:`~stratalog.records.reader`) calls these, so ``decode_batch``,
``iter_records``, ``iter_batches`` and ``summarize_records`` are accelerated without any change
for their callers. :class:`RecordsWriter` is the state of a batch being built (the records
region, the count, the first and largest timestamps) with its ``append``: ``BatchBuilder``
subclasses it, so that ``builder.append`` is the C method itself, with no Python frame per
record (that frame cost more than encoding the record in C). :class:`PyRecordsWriter` is its
pure-Python reference and fallback.

:func:`decode_columns` is the column-oriented decode: five lists (offsets, timestamps, keys,
values, headers) instead of one ``Record`` per record, for consumers that hand records on by
column (Arrow, Spark, gRPC responses): no ``Record`` objects to build and then take apart
(about 10 % less work than :func:`decode_records` in C, and no per-record pass to make the
lists). :func:`stratalog.records.reader.decode_batch_columns` applies it to a batch.

:data:`map_put_records` and :data:`map_retain_records` are the log cleaner's offset map loops
over one records region (a key digest and a probe per record, without the GIL),
:data:`map_clear` zeroes the map in place without the GIL (where `madvise` does not), and
:data:`key_digest_c` the digest (:mod:`~stratalog.records.key_digest`): C only, ``None`` in a
pure-Python install, where the map's per-key Python methods do the same work.

:data:`offset_commit_rows_c` reads the offset commits of one ``__consumer_offsets`` batch's
columns into the rows a group coordinator's load stores (C only, ``None`` without the
extension): :func:`stratalog.records.consumer_offsets.offset_commit_rows` is its caller, and its
pure-Python reference there is the fallback.

Falling back: the extension is optional at build time (``optional=True`` in pyproject.toml), so a
machine without a compiler installs and runs the pure-Python codec. Setting the environment
variable ``STRATALOG_PURE_PYTHON=1`` before the first import forces the fallback (to compare, or
to rule the C code out when chasing a bug). An extension that exists but fails to import is a
``RuntimeWarning``, not a silent fallback.

Sans-IO and thread-safe, as the reference: the C functions keep no state (and hold the GIL, but
for the offset map loops and a large region's first walk).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from array import array
from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

from . import record as _reference
from .record import Header
from .record import encode_record as _encode_record_reference

__all__ = [
    "ACCELERATED",
    "PURE_PYTHON_ENV",
    "ArrowColumns",
    "PyRecordsWriter",
    "RecordColumns",
    "RecordsWriter",
    "decode_arrow",
    "decode_arrow_reference",
    "decode_columns",
    "decode_columns_reference",
    "decode_records",
    "encode_record",
    "find_records",
    "key_digest_c",
    "map_clear",
    "map_put_records",
    "map_retain_records",
    "offset_commit_rows_c",
    "walk_records",
]

PURE_PYTHON_ENV = "STRATALOG_PURE_PYTHON"

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _load_speedups() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    name = f"{__package__}._speedups"
    try:
        # import_module, not "from . import": that one reports a missing module as a plain
        # ImportError, indistinguishable from a broken one.
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None  # not built (no compiler at install time): the pure-Python codec runs
    except ImportError as exc:
        warnings.warn(
            f"{name} exists but does not import ({exc}); using the pure-Python record codec",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


_speedups = _load_speedups()

ACCELERATED: bool = _speedups is not None
"""True when the C loops run, False when the pure-Python reference does."""


class RecordColumns(NamedTuple):
    """The records of one records region as five parallel lists, in record order.

    ``offsets[i]`` and ``timestamps[i]`` are absolute (as ``Record.offset``/``.timestamp``);
    ``keys[i]``/``values[i]`` are ``bytes`` or ``None``; ``headers[i]`` is a tuple of
    ``(str, bytes | None)`` pairs. All five lists have the same length. Plain data.
    """

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[Header, ...]]


def decode_columns_reference(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    timestamp_override: int | None = None,
) -> RecordColumns:
    """The pure-Python columnar decode: :func:`record.decode_records`, transposed.

    The reference the C :func:`decode_columns` is tested against, and its fallback.
    """
    records = _reference.decode_records(
        bytes(data), count, base_offset, base_timestamp, timestamp_override
    )
    return RecordColumns(
        [r.offset for r in records],
        [r.timestamp for r in records],
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
    )


class ArrowColumns(NamedTuple):
    """The records of one records region in Apache Arrow's buffer layout, ready for
    ``pyarrow.Array.from_buffers`` (no Python object per record).

    ``count`` records; ``offsets`` and ``timestamps``: ``count`` little-endian int64s each
    (absolute, as ``Record.offset``/``.timestamp``). Each binary column (keys, values): a
    validity bitmap (bit ``i``, least significant first, set when record ``i`` has the field;
    ``None`` when no record lacks it), its null count, ``count + 1`` little-endian int32
    offsets into the data and the data itself. ``headers``: one tuple of ``(str, bytes |
    None)`` pairs per record when asked for, else ``None``. Plain data.
    """

    count: int
    offsets: bytes
    timestamps: bytes
    key_validity: bytes | None
    key_nulls: int
    key_offsets: bytes
    key_data: bytes
    value_validity: bytes | None
    value_nulls: int
    value_offsets: bytes
    value_data: bytes
    headers: list[tuple[Header, ...]] | None


def _binary_buffers(fields: list[bytes | None]) -> tuple[bytes | None, int, bytes, bytes]:
    """Arrow's validity bitmap, null count, int32 offsets and data of a binary column."""
    validity = bytearray((len(fields) + 7) // 8)
    ends = array("i", [0])
    position = 0
    for index, field in enumerate(fields):
        if field is not None:
            validity[index >> 3] |= 1 << (index & 7)
            position += len(field)
        ends.append(position)
    nulls = fields.count(None)
    if sys.byteorder != "little":
        ends.byteswap()
    return (
        None if nulls == 0 else bytes(validity),
        nulls,
        ends.tobytes(),
        b"".join(field for field in fields if field is not None),
    )


def decode_arrow_reference(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    timestamp_override: int | None = None,
    from_offset: int | None = None,
    until_offset: int | None = None,
    with_headers: bool = False,
) -> ArrowColumns:
    """The pure-Python :func:`decode_arrow`: :func:`decode_columns_reference`, filtered to the
    offset range and laid out as Arrow buffers. The reference the C one is tested against."""
    if timestamp_override is not None and not isinstance(timestamp_override, int):
        raise TypeError(
            f"timestamp_override must be an int or None, not {type(timestamp_override).__name__}"
        )
    columns = decode_columns_reference(
        data, count, base_offset, base_timestamp, timestamp_override
    )
    for index, offset in enumerate(columns.offsets):
        if not _INT64_MIN <= offset <= _INT64_MAX:
            raise _reference.CorruptRecordError(
                f"record {index}: its offset is outside int64 (base offset {base_offset})"
            )
    low = _INT64_MIN if from_offset is None else from_offset
    high = _INT64_MAX if until_offset is None else until_offset
    keep = [i for i, offset in enumerate(columns.offsets) if low <= offset < high]
    offsets = array("q", [columns.offsets[i] for i in keep])
    timestamps = array("q", [_reference.wrap_int64(columns.timestamps[i]) for i in keep])
    if sys.byteorder != "little":
        offsets.byteswap()
        timestamps.byteswap()
    return ArrowColumns(
        len(keep),
        offsets.tobytes(),
        timestamps.tobytes(),
        *_binary_buffers([columns.keys[i] for i in keep]),
        *_binary_buffers([columns.values[i] for i in keep]),
        [columns.headers[i] for i in keep] if with_headers else None,
    )


class PyRecordsWriter:
    """The records region of a batch being built; the pure-Python :class:`RecordsWriter`.

    Holds the encoded records (``_records``, a bytearray), ``records_count`` and the first and
    largest timestamps appended (``_base_timestamp``, ``_max_timestamp``; 0 before the first
    append). Invariant: ``_records`` holds ``records_count`` records with offset deltas
    0 .. records_count - 1 and timestamp deltas from ``_base_timestamp``. Not thread-safe.
    """

    __slots__ = ("_base_timestamp", "_count", "_max_timestamp", "_records")

    def __init__(self) -> None:
        self._records = bytearray()
        self._count = 0
        self._base_timestamp = 0
        self._max_timestamp = 0

    @property
    def records_count(self) -> int:
        """Records appended so far."""
        return self._count

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
    ) -> int:
        """Encode one record at the next offset delta and return that delta.

        ``timestamp`` is in ms, an int64; the delta from the first record's must fit int64.
        Raises ``ValueError`` if the batch would exceed 2**31 - 1 records or a value exceeds
        what the format holds; the writer is unchanged then. O(size of the record).
        """
        # Every timestamp is checked, not only the first: one outside int64 could have a delta
        # that fits and then break the batch header.
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise ValueError(f"timestamp {timestamp} is outside int64")
        count = self._count
        base_timestamp = timestamp if count == 0 else self._base_timestamp
        # encode_record appends only once every field encoded, so a ValueError leaves the
        # writer as it was; the state below changes only after a successful append.
        _encode_record_reference(
            self._records, count, timestamp - base_timestamp, key, value, headers
        )
        if count == 0:
            self._base_timestamp = self._max_timestamp = timestamp
        elif timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        self._count = count + 1
        return count

    def append_values(
        self,
        timestamp: int,
        values: list[bytes | None] | tuple[bytes | None, ...],
        start: int = 0,
        max_bytes: int | None = None,
    ) -> tuple[int, int]:
        """Append ``values[start:]`` as records stamped ``timestamp`` with a null key and no
        headers, in order, while the records region grows by at most ``max_bytes`` in all.

        Returns ``(stop, bytes_added)``: ``stop`` is the index of the first value not appended
        (``len(values)`` when all were). The records are those of :meth:`append` called once
        per value; what this saves is the call per record (a producer's batch-level send).
        ``values`` must be a list or tuple of ``bytes`` (or subclasses) and ``None``.

        All or nothing on error: a ValueError or TypeError (a value of another type, a value
        or a count over int32, a timestamp outside int64) leaves the writer as it was.
        """
        # The checks of the C method, in its order.
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise ValueError(f"timestamp {timestamp} is outside int64")
        if not isinstance(values, list | tuple):
            raise TypeError(f"values must be a list or tuple, not {type(values).__name__}")
        count = len(values)
        if not 0 <= start <= count:
            raise ValueError(f"start {start} is outside [0, {count}]")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
        delta = timestamp - (timestamp if self._count == 0 else self._base_timestamp)
        if not _INT64_MIN <= delta <= _INT64_MAX:
            raise ValueError(f"varlong value {delta} is outside int64")
        records = self._records
        saved = (len(records), self._count, self._base_timestamp, self._max_timestamp)
        limit = saved[0] + max_bytes if max_bytes is not None else None
        stop = start
        try:
            while stop < count:
                value = values[stop]
                if value is not None and not isinstance(value, bytes):
                    raise TypeError(
                        f"values[{stop}] must be bytes or None, not {type(value).__name__}"
                    )
                mark = len(records)
                self.append(timestamp, None, value)
                if limit is not None and len(records) > limit:
                    # Over the budget: take this record back (it is the last one appended).
                    del records[mark:]
                    self._count -= 1
                    if stop == start:
                        self._base_timestamp, self._max_timestamp = saved[2], saved[3]
                    break
                stop += 1
        except (ValueError, TypeError):
            del records[saved[0]:]
            self._count, self._base_timestamp, self._max_timestamp = saved[1:]
            raise
        return stop, len(records) - saved[0]


RecordsWriter: type
if _speedups is not None:
    decode_records = _speedups.decode_records
    walk_records = _speedups.walk_records
    find_records = _speedups.find_records
    encode_record = _speedups.encode_record
    _decode_columns = _speedups.decode_columns
    _decode_arrow = _speedups.decode_arrow
    RecordsWriter = _speedups.RecordsWriter
    key_digest_c = _speedups.key_digest
    map_clear = _speedups.map_clear
    map_put_records = _speedups.map_put_records
    map_retain_records = _speedups.map_retain_records
    offset_commit_rows_c = _speedups.offset_commit_rows
else:
    decode_records = _reference.decode_records
    walk_records = _reference.walk_records
    find_records = _reference.find_records
    encode_record = _reference.encode_record
    _decode_columns = None
    _decode_arrow = None
    RecordsWriter = PyRecordsWriter
    # The log cleaner's offset map loops have no pure-Python twin here: their reference is the
    # map's own per-key methods (server/storage/offset_map.py) over decode_columns, which the
    # map runs when these are None; key_digest.key_digest_reference is the digest's.
    key_digest_c = None
    map_clear = None
    map_put_records = None
    map_retain_records = None
    offset_commit_rows_c = None


def decode_columns(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    timestamp_override: int | None = None,
) -> RecordColumns:
    """Decode exactly ``count`` records filling all of ``data`` into five lists.

    ``data`` is a records region after decompression (any buffer); ``timestamp_override``
    replaces every timestamp (LogAppendTime batches). The same checks, errors and messages as
    :func:`stratalog.records.record.decode_records`; ``keys``/``values`` are always ``bytes``.
    O(len(data)); never allocates in proportion to ``count``.

    Raises:
        CorruptRecordError: as ``decode_records``: a record truncated, over-long or with a bad
            length or count, fewer than ``count`` records, or bytes left after the last one.
    """
    if _decode_columns is None:
        return decode_columns_reference(
            data, count, base_offset, base_timestamp, timestamp_override
        )
    return RecordColumns._make(
        _decode_columns(data, count, base_offset, base_timestamp, timestamp_override)
    )


def decode_arrow(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    timestamp_override: int | None = None,
    from_offset: int | None = None,
    until_offset: int | None = None,
    with_headers: bool = False,
) -> ArrowColumns:
    """Decode exactly ``count`` records filling all of ``data`` into Arrow buffers, keeping
    those with ``from_offset <= offset < until_offset`` (None: unbounded).

    The checks and errors of :func:`decode_columns` for every record (those outside the range
    included), plus a :class:`~stratalog.records.CorruptRecordError` for an offset outside
    int64 (Arrow's longs cannot hold it). A timestamp outside int64 (base + delta; or a
    ``timestamp_override`` outside it) is wrapped to 64 bits (:func:`~.record.wrap_int64`), the
    value Kafka's Java reader computes. For readers that hand records to Arrow (the Spark
    connector): in C no Python object is made per record.
    O(len(data)); the buffers are bounded by the size of ``data``, whatever ``count`` says.
    """
    if _decode_arrow is None:
        return decode_arrow_reference(
            data, count, base_offset, base_timestamp, timestamp_override, from_offset,
            until_offset, with_headers,
        )
    return ArrowColumns._make(_decode_arrow(
        data, count, base_offset, base_timestamp, timestamp_override, from_offset,
        until_offset, with_headers,
    ))
