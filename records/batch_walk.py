"""The batch-header walk: how every reader steps from one record batch to the next.

A ``.log``, a fetch response and a Produce request are all record batches laid back to back. A
walk reads a batch's header (:mod:`stratalog.records.batch` owns its layout), steps over the
batch by its size field, and goes on until the bytes end. The walks of the project are here:
the storage engine's reads and recovery (``server/storage/log_file.py`` reads the blocks; the
batches of a block are walked by :func:`find_in_block` and :func:`collect_in_block`), the
validation of client batches, the follower append's check, the cleaner's reads, the records
reader, the client's decoding of fetched batches (``client/fetched.py``), ``stratalog dump-log``
and the Spark connector (:func:`iter_batch_headers`; a Produce's one batch in one call,
:func:`single_batch_header`), the cut of a fetched range at the high watermark or the LSO
(:func:`batches_below`), and a ``max_records`` fetch's cut and slicing in one pass
(:func:`slice_below`). So the framing rules and the tail rules below are written once:
``check_framing`` says which rule a batch breaks, ``_end_walk`` holds the header walks' tail
rules. Every walk's common case, a whole v2 batch (size field at least 14 and the 61-byte
header, magic 2, not past the end), is one test made inline in each hot loop, so that a batch
costs no call (the tests check that each walk agrees with :func:`iter_batch_headers` on
whole, partial and broken batches).
(``tests/unit/records/test_batch_walk.py`` fails on any other module that steps from batch to
batch.)

Framing rules, per batch, in Kafka's order (``FileLogInputStream.nextBatch``, then
``DefaultRecordBatch``; :func:`~stratalog.records.batch.check_framing`)::

    17 bytes or fewer left               the tail: a walk ends here (offset, size, epoch, magic
                                         do not fit: the bytes cannot say what they are)
    size field below 14                  CorruptRecordError
    the batch runs past the end          a partial tail
    magic other than 2                   InvalidRecordError (legacy v0/v1 messages included)
    a v2 batch below its 61-byte header  CorruptRecordError

Tail rules, what a walk does at its end (the last bytes are not a whole batch):

    partial tail     17 bytes or fewer left, or a batch running past the end: a write in
                     progress, the torn end of a crash, a fetch response cut at its size limit.
                     Ends the walk quietly (``partial_tail_ok``, the default), or raises
                     CorruptRecordError "partial record batch at position P" where whole
                     batches are promised (a segment that is not the last, a decoded response).
    zeros            a size field of 0 with 12 zero bytes (offset and size) where the next
                     batch should start: the preallocated tail of a segment file read from disk
                     (``zeros_end``; for file readers that see past the published size).
    malformed        a framing rule broken: raises (the storage engine's LENIENT and RECOVERY
                     walks turn that into a quiet stop or a warning: ``log_file.py``).

A batch longer than the buffer or file is a partial tail by the rules above; a batch longer
than a read block is a block matter (:func:`collect_in_block` hands it to the caller's check).
CRCs are checked only where a walk says so (recovery's :func:`collect_in_block`); readers that
decode a batch check it whole (:func:`stratalog.records.validate_batch`).

Sans-IO: every function takes a buffer (``bytes``, ``bytearray``, ``memoryview``, an ``mmap``)
and positions; the storage engine reads the blocks and passes them in. Costs: one ``struct``
unpack per batch; nothing else is built per batch by the block walks.

Crash behaviour: what a crash leaves at the end of a ``.log`` (a torn batch, preallocated zeros)
is a tail by the rules above: the walks end there, and recovery cuts it off. Concurrency: the
functions hold no state; they may run in any thread, on bytes that do not change under them
(the storage engine walks only the published part of a file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from crc32c import crc32c as _crc32c  # the C function: recovery's hot loop skips our wrapper

from .batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LENGTH_FIELD,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
    SCAN_FIELDS,
    BatchHeader,
    check_framing,
)
from .errors import CorruptRecordError, RecordError
from .slicing import slice_batch

__all__ = [
    "END",
    "READ_ON",
    "STOP",
    "BlockStep",
    "FoundBatch",
    "ScannedBatch",
    "SliceError",
    "SlicedWalk",
    "at_tail",
    "batches_below",
    "collect_in_block",
    "find_in_block",
    "iter_batch_headers",
    "single_batch_header",
    "slice_below",
]

# A batch a collecting walk took: its header fields as SCAN_FIELDS unpacks them
# (SCAN_FIELD_NAMES: base_offset, length, magic, crc, last_offset_delta, max_timestamp,
# records_count); the unpacked tuple itself, so that collecting a batch builds nothing.
ScannedBatch = tuple[int, int, int, int, int, int, int]

# How a block walk ended (the first field of a BlockStep).
READ_ON = 1  # the next header is not whole in the block, and the bytes go on: read from there
END = 2  # the walk is over: the end, or a tail of 17 bytes or fewer
STOP = 3  # the batch at this position breaks a framing rule or runs past the end (a partial tail)

# (how, position, size_bytes). ``position``: where to read on from (READ_ON), the batch at fault
# (STOP). ``size_bytes`` is the size of the last batch stepped over (a read-size guess: batches
# of one producer are alike), or the ``size_bytes`` the caller passed when none was.
BlockStep = tuple[int, int, int]
# A batch find_in_block found: (position, size_bytes, last_offset, records_count,
# max_timestamp, block, block_start); ``block`` is the bytes walked, from position
# ``block_start`` of the log, and holds the batch's header.
FoundBatch = tuple[int, int, int, int, int, bytes, int]

# Size fields below this cannot be a whole v2 batch: the hot loops' one test for the rare cases
# (size field < 14, a batch below 61 bytes) before check_framing says which.
_MIN_V2_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
_ZERO_PREFIX = bytes(LOG_OVERHEAD)
_unpack_header = HEADER.unpack_from
_unpack_length = LENGTH_FIELD.unpack_from


def at_tail(position: int, end: int) -> bool:
    """Whether 17 bytes or fewer are left before ``end``: the end of a walk, whatever they hold
    (Kafka's ``FileLogInputStream.nextBatch`` returns null there)."""
    return position >= end - HEADER_SIZE_UP_TO_MAGIC


def iter_batch_headers(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    partial_tail_ok: bool = True,
    zeros_end: bool = False,
) -> Iterator[BatchHeader]:
    """Yield the header of every whole batch in ``buf[start:end]``, in order.

    ``start`` is a batch boundary. The walk ends at ``end`` (default: the end of ``buf``), at a
    partial tail (quietly with ``partial_tail_ok``; otherwise it raises), or, with
    ``zeros_end``, at 12 zero bytes where a batch should start (a preallocated file tail). See
    the module docstring for the rules. CRCs are not checked. O(batches) header unpacks.

    Raises:
        CorruptRecordError: a size field below 14 or below the v2 header size; a partial tail
            without ``partial_tail_ok`` ("partial record batch at position P: N bytes remain,
            fewer than the batch needs").
        InvalidRecordError: a batch with magic other than 2.
    """
    end = len(buf) if end is None else min(end, len(buf))
    position = start
    # A header starting at or before this lies whole in the walked bytes.
    header_limit = end - RECORD_BATCH_OVERHEAD
    while position < end:
        if position <= header_limit:
            # The common case in one unpack and one test (a whole v2 batch): the header's
            # fields are read once, and are the header yielded.
            fields = _unpack_header(buf, position)
            length = fields[1]
            if (length >= _MIN_V2_LENGTH and fields[3] == MAGIC
                    and position + length + LOG_OVERHEAD <= end):
                yield BatchHeader(*fields, position)
                position += length + LOG_OVERHEAD
                continue
        _end_walk(buf, position, end, partial_tail_ok, zeros_end)
        return


def _end_walk(
    buf: bytes | bytearray | memoryview,
    position: int,
    end: int,
    partial_tail_ok: bool = True,
    zeros_end: bool = False,
) -> None:
    """The bytes at ``position`` (before ``end``) are not a whole v2 batch: raise for the
    framing rule they break, or return where the walk ends quietly (a partial tail with
    ``partial_tail_ok``; zeros with ``zeros_end``). The tail rules of the module docstring,
    for every header walk."""
    if position < end - HEADER_SIZE_UP_TO_MAGIC:  # (not at_tail: inlined)
        if zeros_end and buf[position : position + LOG_OVERHEAD] == _ZERO_PREFIX:
            return
        # Not a whole v2 batch: check_framing says which rule fails (it raises), or
        # returns False at a partial tail. (A batch it would pass took the walk's test.)
        check_framing(buf, position, end)
    if partial_tail_ok:
        return
    raise CorruptRecordError(
        f"partial record batch at position {position}: {end - position} bytes remain, "
        "fewer than the batch needs"
    )


def single_batch_header(buf: bytes | bytearray | memoryview) -> BatchHeader | None:
    """The header of the one batch ``buf`` holds, when ``buf`` is exactly one whole v2 batch
    (the batch :func:`iter_batch_headers` would yield alone, by the same test); None for
    anything else: several batches, a tail, a broken framing rule (walk with
    :func:`iter_batch_headers` to read them or to have the error raised).

    The common case of a Produce (one batch a partition) in one call: no generator is
    started. O(1): the size field, then the header when it says one batch (so a walk that
    follows a None parses no header twice).
    """
    end = len(buf)
    if end < RECORD_BATCH_OVERHEAD or _unpack_length(buf, LENGTH_OFFSET)[0] + LOG_OVERHEAD != end:
        return None
    fields = _unpack_header(buf, 0)
    if fields[1] < _MIN_V2_LENGTH or fields[3] != MAGIC:
        return None
    return BatchHeader(*fields, 0)


def batches_below(
    data: bytes | memoryview, upper_offset: int, offset: int
) -> tuple[bytes | memoryview, int, int]:
    """The whole batches at the start of ``data`` that begin below ``upper_offset`` (a high
    watermark or an LSO cut of a read at ``offset``): ``(bytes, next offset, records)``;
    ``(b"", offset, 0)`` when none does.

    ``data`` holds whole batches (a read of the log); a partial tail ends the walk, a malformed
    header raises, as :func:`iter_batch_headers` does (and only below the cut: the walk stops
    at the first batch at or above ``upper_offset``). The bytes kept are ``data`` itself when
    nothing is cut, else a ``memoryview`` of its start, not a copy (it keeps ``data`` alive).

    The cut of every bounded fetch (a READ_COMMITTED read past the LSO, a consumer's past the
    high watermark), so it builds nothing per batch: one unpack of the scan fields and the
    test of a whole v2 batch inline, as the block walks make it. O(batches below the cut).

    Raises:
        CorruptRecordError, InvalidRecordError: a malformed header below the cut.
    """
    end = len(data)
    # A header starting at or before this lies whole in ``data``.
    header_limit = end - RECORD_BATCH_OVERHEAD
    unpack = SCAN_FIELDS.unpack_from
    position = 0
    next_offset = offset
    records = 0
    while position <= header_limit:
        base_offset, length, magic, _, last_offset_delta, _, count = unpack(data, position)
        following = position + length + LOG_OVERHEAD
        if length < _MIN_V2_LENGTH or magic != MAGIC or following > end:
            break  # not a whole v2 batch: _end_walk below says what it is
        if base_offset >= upper_offset:
            return _start_of(data, position), next_offset, records
        next_offset = base_offset + last_offset_delta + 1
        records += count
        position = following
    if position < end:
        _end_walk(data, position, end)  # raises for a broken framing rule
    return _start_of(data, position), next_offset, records


def _start_of(data: bytes | memoryview, position: int) -> bytes | memoryview:
    """``data[:position]`` without a copy: ``data`` whole, a view of its start, or b""."""
    if position == len(data):
        return data
    if position == 0:
        return b""
    return memoryview(data)[:position]


class SlicedWalk(NamedTuple):
    """What :func:`slice_below` took: the answer of a ``max_records`` read."""

    data: bytes  # v2 batches back to back (b"" when no record was taken)
    next_offset: int  # where the next read starts
    records_count: int  # records in ``data``
    # Where each batch of ``data`` starts, in order: a reader decodes them from there without
    # walking ``data`` again.
    positions: tuple[int, ...] = ()
    # The bytes of the whole batches read that start below the bound, from the start: what the
    # read would have answered without ``max_records`` (a long poll compares it with min_bytes),
    # counted only as far as the caller's ``whole_bytes_enough``.
    whole_bytes: int = 0


class SliceError(Exception):
    """A batch :func:`slice_below` could not read: ``position`` where it starts in the walked
    bytes (or, for a broken header, where the batch before it ended), ``error`` the
    :class:`~stratalog.records.errors.RecordError` (also the ``__cause__``)."""

    def __init__(self, position: int, error: RecordError) -> None:
        super().__init__(f"batch at position {position}: {error}")
        self.position = position
        self.error = error


def slice_below(
    buf: bytes | memoryview,
    offset: int,
    max_records: int,
    max_bytes: int,
    max_decompressed_bytes: int,
    upper_offset: int | None = None,
    skip: Callable[[bytes | memoryview, BatchHeader], bool] | None = None,
    whole_bytes_enough: int | None = None,
) -> SlicedWalk:
    """The records a read of at most ``max_records`` (> 0) records from ``offset`` takes from
    the whole batches ``buf`` (a fetch's, starting with the batch holding ``offset``), in one
    walk of their headers: the cut at ``upper_offset`` (a high watermark or an LSO: the batches
    starting at or above it are left out, as :func:`batches_below` does) and each batch's share
    re-framed by :func:`~stratalog.records.slicing.slice_batch` (a valid v2 batch: the first may
    start inside a stored batch, the last end inside one).

    ``skip(buf, header)`` says which batches a reader drops (a READ_COMMITTED reader's aborted
    transactions; it sees the control batches too, whose markers end them); without it the
    control batches are dropped. A dropped batch, or one with no record at or after ``offset``
    (compacted away), moves ``next_offset`` past it. The records stop at ``max_records``, or
    once ``max_bytes`` bytes of batches are taken (the first record is always taken whole).
    ``next_offset`` is after the last record taken, or after the last batch read when none was
    taken or a batch was taken to its end (``offset`` for no data). Past the last record taken,
    the walk goes on over the headers only as far as the cut (``whole_bytes``), or until
    ``whole_bytes`` reaches ``whole_bytes_enough`` (a long poll asks only whether its
    ``min_bytes`` came: ``whole_bytes`` is then at least that, and not exact); with no
    ``upper_offset`` (the caller knows nothing is cut) ``whole_bytes`` is ``len(buf)``.

    A partial tail is damage here (whole batches were read): it raises. O(headers walked) plus
    the slicing's O(bytes of the batches sliced).

    Raises:
        SliceError: a batch does not decode, or its header breaks a framing rule (the
            :class:`~stratalog.records.errors.RecordError` and where).
    """
    parts: list[bytes] = []
    positions: list[int] = []
    taken = 0
    used_bytes = 0
    next_offset = offset
    whole_bytes = len(buf)
    batch_position = 0
    # Whole batches were read: a cut one is damage, not a tail (partial_tail_ok=False).
    walk = iter_batch_headers(buf, partial_tail_ok=False)
    header = None
    cut = upper_offset is None  # whether whole_bytes is known
    try:
        while taken < max_records and (taken == 0 or used_bytes < max_bytes):
            if header is not None:
                batch_position = header.end_position  # (where the walk's own error would be)
            header = next(walk, None)
            if header is None:
                cut = True
                break
            batch_position = header.position
            if upper_offset is not None and header.base_offset >= upper_offset:
                whole_bytes = header.position
                cut = True
                break
            if skip(buf, header) if skip is not None else header.is_control:
                next_offset = header.next_offset
                continue
            sliced = slice_batch(
                buf, header, offset, max_records - taken, max(max_bytes - used_bytes, 0),
                max_decompressed_bytes,
            )
            if sliced is None:  # no record at or after the offset (compacted away)
                next_offset = header.next_offset
                continue
            positions.append(used_bytes)
            parts.append(sliced.data)
            taken += sliced.records_count
            used_bytes += len(sliced.data)
            next_offset = sliced.next_offset
        if not cut:
            # The records are taken; the same walk goes on to the cut, over the headers only,
            # as far as the caller needs to know.
            enough = len(buf) if whole_bytes_enough is None else whole_bytes_enough
            whole_bytes = batch_position = header.end_position if header is not None else 0
            if whole_bytes < enough:
                for header in walk:
                    if header.base_offset >= upper_offset:  # type: ignore[operator]
                        break
                    whole_bytes = batch_position = header.end_position
                    if whole_bytes >= enough:
                        break
    except RecordError as exc:
        raise SliceError(batch_position, exc) from exc
    return SlicedWalk(b"".join(parts), next_offset, taken, tuple(positions), whole_bytes)


def find_in_block(
    buf: bytes,
    buf_start: int,
    position: int,
    end: int,
    offset: int,
    timestamp: int,
    size_bytes: int = 0,
    _unpack: Callable[[bytes, int], ScannedBatch] = SCAN_FIELDS.unpack_from,
) -> FoundBatch | BlockStep:
    """Walk the batches whose header lies in ``buf`` (the bytes from position ``buf_start`` of
    a log ending at ``end``) from ``position`` on, to the first whose last offset is ``>=
    offset`` and max timestamp ``>= timestamp``.

    Returns the batch as a :data:`FoundBatch` (7 fields; its header is in ``buf``), or a
    :data:`BlockStep` (3 fields): READ_ON (the next header is not whole in ``buf`` and ``buf``
    ends before ``end``), END (nothing more: the end, or 17 bytes or fewer before it) or STOP
    (the batch at that position breaks a framing rule or runs past ``end``:
    :func:`~stratalog.records.batch.check_framing` says which). O(batches stepped over).
    """
    # (The hot loop of every read by offset or time: a found batch is returned in the shape the
    # storage engine hands on, so that nothing is built twice; ``_unpack`` is bound once.)
    unpack = _unpack
    buf_end = buf_start + len(buf)
    # A header starting at or before this lies whole in the block.
    header_end = buf_end - RECORD_BATCH_OVERHEAD
    while position <= header_end:
        base_offset, length, magic, _, last_offset_delta, max_timestamp, count = unpack(
            buf, position - buf_start
        )
        size_bytes = length + LOG_OVERHEAD
        if length < _MIN_V2_LENGTH or magic != MAGIC or position + size_bytes > end:
            return STOP, position, size_bytes
        last_offset = base_offset + last_offset_delta
        if last_offset >= offset and max_timestamp >= timestamp:
            return position, size_bytes, last_offset, count, max_timestamp, buf, buf_start
        position += size_bytes
    return _block_end(buf_end, position, end, size_bytes)


def collect_in_block(
    buf: bytes | bytearray | memoryview,
    buf_start: int,
    position: int,
    end: int,
    into: list[ScannedBatch],
    check: Callable[[int, int, int], bool] | None = None,
    max_message_bytes: int = 0,
) -> BlockStep:
    """Append to ``into`` the :data:`ScannedBatch` of every batch of ``buf`` (the bytes from
    position ``buf_start`` of a log ending at ``end``) from ``position`` on whose header lies in
    ``buf``; the batches are consecutive, their positions follow from their sizes.

    ``check`` (recovery): each batch must also be whole in ``buf`` and pass its CRC-32C and
    ``max_message_bytes``. A batch that is not whole in ``buf`` ends the block (READ_ON from
    it), unless it is the block's first (larger than a block): then, and for a batch failing
    its CRC or the size limit, ``check(relative position in buf, size_bytes, stored crc)``
    decides (a caller that reads the batch in pieces, and logs what fails): True takes the
    batch, False ends the walk (END).

    Returns a :data:`BlockStep` (``size_bytes`` 0): READ_ON, END or STOP as for
    :func:`find_in_block`. O(batches) unpacks; with ``check``, O(bytes) CRC work.
    """
    unpack = SCAN_FIELDS.unpack_from
    append = into.append
    buf_length = len(buf)
    relative = position - buf_start
    end_relative = end - buf_start
    header_limit = buf_length - RECORD_BATCH_OVERHEAD
    while relative <= header_limit:
        fields = unpack(buf, relative)
        _, length, magic, crc, _, _, _ = fields
        following = relative + length + LOG_OVERHEAD
        if length < _MIN_V2_LENGTH or magic != MAGIC or following > end_relative:
            return STOP, buf_start + relative, 0
        if check is not None:
            if following <= buf_length:
                actual = _crc32c(memoryview(buf)[relative + ATTRIBUTES_OFFSET : following])
            elif relative:
                return READ_ON, buf_start + relative, 0  # not whole: read on
            else:
                actual = None  # larger than a block: the caller checksums it in pieces
            if (actual != crc or following - relative > max_message_bytes) and not check(
                relative, following - relative, crc
            ):
                return END, buf_start + relative, 0
        append(fields)
        relative = following
    return _block_end(buf_start + buf_length, buf_start + relative, end, 0)


def _block_end(buf_end: int, position: int, end: int, size_bytes: int) -> BlockStep:
    """The header at ``position`` is not all in the block ending at ``buf_end``: read on, or
    the end. 17 bytes or fewer left are the end; more, but fewer than a header: only a framing
    rule can apply (STOP)."""
    if buf_end < end:
        return READ_ON, position, size_bytes
    if not at_tail(position, end):
        return STOP, position, size_bytes
    return END, position, size_bytes
