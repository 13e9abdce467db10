"""``stratalog dump-log``: print log, index and snapshot files as Kafka's kafka-dump-log.sh does.

The output follows Kafka's ``DumpLogSegments`` line for line, so that operators can diff a dump of
a stratalog directory against one made by Kafka's own tool:

    Dumping <file>
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 ...
    | offset: 0 CreateTime: 1700000000000 keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] ...

``.snapshot`` files print one line per producer as Kafka's ``dumpProducerIdSnapshot`` (Kafka
3.9/4.0) does: ``currentTxnFirstOffset`` as Java prints an ``OptionalLong``
(``OptionalLong[90]``, ``OptionalLong.empty``), and a producer without batch metadata (last
offset -1: only a marker of its epoch was seen) ends its line after ``lastTimestamp: <t> ``,
trailing space included (each example below is one line)::

    producerId: 7 producerEpoch: 1 coordinatorEpoch: 5 currentTxnFirstOffset: OptionalLong[90]
      lastTimestamp: 1700000000000 firstSequence: 39 lastSequence: 41 lastOffset: 99
      offsetDelta: 2 timestamp: 1700000000000
    producerId: 8 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong.empty
      lastTimestamp: 1700000000001

``--offsets-decoder`` prints the records of a ``__consumer_offsets-N`` segment as Kafka's
``OffsetsMessageParser`` does (``core/src/main/scala/kafka/tools/DumpLogSegments.scala``): the key
as ``{"type":"<record type>","data":{...}}``, the value as ``{"version":"<v>","data":{...}}`` (or
``<DELETE>`` for a tombstone), each the JSON Kafka's generated JsonConverter writes; the
subscription and assignment of a "consumer" group's members decoded when they parse, kept as
base64 when not. A record of unknown type prints "Unknown record type <t> at offset <o>,
skipping."; one that does not parse, "Error at offset <o>, skipping. ..." with the cause, in
our words after "due to: " (the codec is :mod:`stratalog.records.consumer_offsets`). A record
without a key (Kafka's tool stops there with an exception) is reported on stderr and the dump
goes on, exit status 1.

File names print as ``java.io.File`` prints the argument (``Dumping ./a//b.log`` shows
``./a/b.log``), so that the header lines match too.

Problems found while verifying indexes against their log go to stderr in Kafka's words
("Mismatches in :<file>", "Found timestamp mismatch in :<file>", ...), and make the command exit 1;
so do Kafka's snapshot errors ("Snapshot is corrupt (CRC is no longer valid). Stored crc: ...",
"Snapshot failed schema validation: ..."). Where this tool differs from Kafka's, it is on purpose:
control records other than transaction markers print their type (``controlType:
LEADER_CHANGE(2)``) instead of Kafka's KRaft JSON; a corrupt batch is reported and skipped instead
of ending the run with a stack trace; a snapshot too short for its header or its entries says so
after "Snapshot failed schema validation: " where Kafka prints the null message of a
``BufferUnderflowException``; and any of these problems makes the exit status 1 (Kafka's is 0).

The files are only read (mapped read-only); dumping the files of a running server is safe.
"""

from __future__ import annotations

import argparse
import base64
import mmap
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from stratalog.records.batch import (
    COMPRESSION_CODEC_MASK,
    NO_SEQUENCE,
    BatchHeader,
    Compression,
    TimestampType,
    compute_crc,
    decrement_sequence,
    increment_sequence,
)
from stratalog.records.batch_walk import iter_batch_headers
from stratalog.records.consumer_offsets import (
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    key_schema,
    value_schema,
)
from stratalog.records.control import ControlRecordType, EndTransactionMarker, decode_control_key
from stratalog.records.crc import crc32c
from stratalog.records.entry_field import SanityRule
from stratalog.records.errors import (
    CorruptMessageError,
    CorruptSnapshotError,
    InvalidFileNameError,
    RecordError,
    UnknownRecordTypeError,
)
from stratalog.records.file_names import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SNAPSHOT_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    offset_from_file_name,
)
from stratalog.records.message_schema import MessageSchema, jackson_json
from stratalog.records.offset_index_file import (
    OFFSET_INDEX_ENTRY,
    OffsetIndexEntry,
    offset_index_sanity,
    unpack_offset_index,
)
from stratalog.records.producer_snapshot import (
    PRODUCER_SNAPSHOT_CRC_START,
    unpack_producer_snapshot,
)
from stratalog.records.reader import iter_records
from stratalog.records.time_index_file import (
    TIME_INDEX_ENTRY,
    TimeIndexEntry,
    time_index_sanity,
    unpack_time_index,
)
from stratalog.records.txn_index_file import unpack_txn_index

__all__ = ["DumpOptions", "add_parser", "dump_files", "run"]

# Kafka's names, as its tool prints them.
_TIMESTAMP_TYPE_NAMES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
_CODEC_NAMES = {codec: codec.name.lower() for codec in Compression}  # none, gzip, ..., zstd
_RECORD_INDENT = "|"
_INT32_MAX = 2**31 - 1


@dataclass
class DumpOptions:
    """What to print; the fields mirror kafka-dump-log.sh's flags."""

    deep_iteration: bool = False
    print_data_log: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    skip_record_metadata: bool = False
    max_message_size: int = 5 * 1024 * 1024
    max_bytes: int = _INT32_MAX
    #: Decode keys and values as __consumer_offsets records (implies print_data_log).
    offsets_decoder: bool = False


@dataclass
class _Problems:
    """Everything verification found, reported on stderr at the end, as Kafka does."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_offset_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    failures: int = 0

    def any(self) -> bool:
        return bool(
            self.failures
            or self.index_mismatches
            or self.time_mismatches
            or self.time_out_of_order
            or self.time_offset_not_found
            or self.non_consecutive
        )

    def print(self, err: TextIO) -> None:
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for index_offset, log_offset in pairs:
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for index_ts, log_ts in pairs:
                print(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", file=err)
        for name, pairs in self.time_out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=err)
            for index_ts, previous_ts in pairs:
                print(
                    f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous_ts}",
                    file=err,
                )
        for pairs in self.time_offset_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for indexed, found in pairs:
                print(f"Indexed offset: {indexed}, found log offset: {found}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for first, second in pairs:
                print(f"  {first} is followed by {second}", file=err)


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview | bytes]:
    """The file's bytes, mapped read-only (an empty file cannot be mapped: ``b""``)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
            try:
                yield view
            finally:
                view.release()


_TRAILING_DIGITS = re.compile(r"(\d+)$")


def _base_offset_of(path: Path) -> int:
    """The base offset a file's name gives: Kafka's ``offsetFromFileName``.

    Kafka takes the digits before the first dot. Copies of segments are often renamed with a
    prefix (``metadata-a-00000000000000000000.log``), so the trailing digits of the stem are
    accepted too: a leniency of this tool only, which the storage engine does not share.

    Raises:
        ValueError: the name holds no base offset at all.
    """
    try:
        return offset_from_file_name(path.name)
    except InvalidFileNameError:
        pass
    stem = path.name.split(".", 1)[0]
    match = _TRAILING_DIGITS.search(stem)
    if match is None:
        raise ValueError(
            f"file name {path.name!r} does not end its stem with a base offset "
            f"(expected e.g. 00000000000000000000{path.suffix})"
        )
    return int(match.group(1))


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.split(".", 1)[0] + suffix)


_REPEATED_SLASHES = re.compile("/{2,}")


def _java_file_string(name: str) -> str:
    """``name`` as ``new java.io.File(name).toString()`` gives it (Kafka prints files so):
    repeated slashes collapsed, a trailing slash dropped; ``.`` and ``..`` kept, unlike
    ``pathlib``."""
    normal = _REPEATED_SLASHES.sub("/", name)
    return normal[:-1] if len(normal) > 1 and normal.endswith("/") else normal


def _java_absolute_path(shown: str) -> str:
    """``File.getAbsolutePath()`` of a file shown as ``shown``: resolved against the working
    directory, not normalized further."""
    return shown if shown.startswith("/") else _java_file_string(f"{os.getcwd()}/{shown}")


def _last_sequence(header: BatchHeader) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return increment_sequence(header.base_sequence, header.last_offset_delta)


def _batch_line(header: BatchHeader, position: int, crc_valid: bool) -> str:
    horizon = (
        f"OptionalLong[{header.base_timestamp}]"
        if header.has_delete_horizon
        else "OptionalLong.empty"
    )
    ts_name = _TIMESTAMP_TYPE_NAMES[header.timestamp_type]
    codec_id = header.attributes & COMPRESSION_CODEC_MASK
    codec = _CODEC_NAMES.get(codec_id, f"unknown({codec_id})")
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {_last_sequence(header)} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {str(header.is_transactional).lower()} "
        f"isControl: {str(header.is_control).lower()} deleteHorizonMs: {horizon} "
        f"position: {position} {ts_name}: {header.max_timestamp} size: {header.size_bytes} "
        f"magic: {header.magic} compresscodec: {codec} crc: {header.crc} "
        f"isvalid: {str(crc_valid).lower()}"
    )


def _text(data: bytes) -> str:
    # Kafka's default StringDecoder: UTF-8, invalid sequences replaced.
    return data.decode("utf-8", errors="replace")


def _dump_log(
    path: Path, shown: str, opts: DumpOptions, problems: _Problems, out: TextIO, err: TextIO
) -> None:
    print(f"Log starting offset: {_base_offset_of(path)}", file=out)
    deep = opts.deep_iteration or opts.print_data_log or opts.offsets_decoder
    with _mapped(path) as data:
        end = min(len(data), opts.max_bytes)
        valid_bytes = 0
        last_offset = -1
        try:
            for header in iter_batch_headers(data, 0, end):
                crc_valid = compute_crc(data, header.position, header.size_bytes) == header.crc
                print(_batch_line(header, valid_bytes, crc_valid), file=out)
                if deep:
                    last_offset = _dump_records(
                        shown, data, header, opts, problems, last_offset, out, err
                    )
                valid_bytes += header.size_bytes
        except RecordError as exc:
            print(f"{shown}: {exc}", file=err)
            problems.failures += 1
        trailing = len(data) - valid_bytes
        if trailing > 0 and opts.max_bytes == _INT32_MAX:
            print(f"Found {trailing} invalid bytes at the end of {path.name}", file=out)


def _dump_records(
    shown: str,
    data: memoryview | bytes,
    header: BatchHeader,
    opts: DumpOptions,
    problems: _Problems,
    last_offset: int,
    out: TextIO,
    err: TextIO,
) -> int:
    ts_name = _TIMESTAMP_TYPE_NAMES[header.timestamp_type]
    try:
        records = list(iter_records(data, header.position, verify_crc=False))
    except RecordError as exc:
        print(f"{shown}: cannot decode the records of the batch at position "
              f"{header.position}: {exc}", file=err)
        problems.failures += 1
        return last_offset
    for record in records:
        if last_offset != -1 and record.offset != last_offset + 1:
            problems.non_consecutive.setdefault(_java_absolute_path(shown), []).append(
                (last_offset, record.offset)
            )
        last_offset = record.offset
        parts: list[str] = []
        prefix = f"{_RECORD_INDENT} "
        if not opts.skip_record_metadata:
            key_size = -1 if record.key is None else len(record.key)
            value_size = -1 if record.value is None else len(record.value)
            sequence = (
                NO_SEQUENCE
                if header.base_sequence == NO_SEQUENCE
                else increment_sequence(header.base_sequence, record.offset - header.base_offset)
            )
            header_keys = ",".join(key for key, _ in record.headers)
            parts.append(
                f"{prefix}offset: {record.offset} {ts_name}: {record.timestamp} "
                f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
                f"headerKeys: [{header_keys}]"
            )
            prefix = " "
            if header.is_control:
                parts.append(_control_text(record.key, record.value))
        if opts.offsets_decoder and not header.is_control:
            key_text, payload_text = _offsets_key_and_payload(record.offset, record.key,
                                                              record.value)
            if key_text is None:
                print(f"{shown}: Failed to decode message at offset {record.offset} using "
                      "offset topic decoder (message had a missing key)", file=err)
                problems.failures += 1
            else:
                parts.append(f"{prefix}key: {key_text}")
            if payload_text is not None:
                parts.append(f" payload: {payload_text}")
        elif opts.print_data_log and not header.is_control:
            if record.key is not None:
                parts.append(f"{prefix}key: {_text(record.key)}")
            if record.value is not None:
                parts.append(f" payload: {_text(record.value)}")
        print("".join(parts), file=out)
    return last_offset


_CONSUMER_PROTOCOL = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


def _offsets_key_and_payload(
    offset: int, key: bytes | None, value: bytes | None
) -> tuple[str | None, str | None]:
    """A ``__consumer_offsets`` record's key and payload text, as Kafka's OffsetsMessageParser
    prints them; ``(None, None)`` for a record without a key."""
    if key is None:
        return None, None
    try:
        record_type, key_text = _offsets_json(key, "key", None)
        if value is None:
            return key_text, "<DELETE>"
        return key_text, _offsets_json(value, "value", record_type)[1]
    except UnknownRecordTypeError as exc:
        return f"Unknown record type {exc.record_type} at offset {offset}, skipping.", None
    except _OffsetsParseError as exc:
        return f"Error at offset {offset}, skipping. {exc}", None


class _OffsetsParseError(Exception):
    """A key or value that does not parse, in the words of Kafka's CoordinatorRecordSerde."""


def _offsets_json(data: bytes, stage: str, record_type: int | None) -> tuple[int, str]:
    """``(version, JSON)`` of a key (``record_type`` None: its version is the record type) or of
    a value of ``record_type``.

    Raises:
        UnknownRecordTypeError: the key's record type has no schema.
        _OffsetsParseError: the bytes do not parse.
    """
    if len(data) < 2:
        raise _OffsetsParseError(f"Could not read version from {stage}'s buffer.")
    version = int.from_bytes(data[:2], "big", signed=True)
    schema = key_schema(version) if record_type is None else value_schema(record_type)
    try:
        values, _ = schema.decode(data, version, 2)
    except CorruptMessageError as exc:
        raise _OffsetsParseError(
            f"Could not read record with version {version} from {stage}'s buffer due to: {exc}."
        ) from None
    tree = schema.to_json_tree(values, version)
    if record_type is None:
        return version, jackson_json({"type": str(version), "data": tree})
    if schema.name == "GroupMetadataValue" and tree.get("protocolType") == _CONSUMER_PROTOCOL:
        # As Kafka's tool: a consumer group's member subscriptions and assignments decoded.
        for member in tree.get("members") or ():
            _replace_embedded(member, "subscription", CONSUMER_PROTOCOL_SUBSCRIPTION)
            _replace_embedded(member, "assignment", CONSUMER_PROTOCOL_ASSIGNMENT)
    return version, jackson_json({"version": str(version), "data": tree})


def _replace_embedded(member: dict, field: str, schema: MessageSchema) -> None:
    """Replace a member's base64 ``field`` by its consumer protocol JSON when it parses (Kafka
    swallows the error and keeps the bytes otherwise)."""
    encoded = member.get(field)
    if not isinstance(encoded, str):
        return
    data = base64.b64decode(encoded)
    try:
        if len(data) < 2:
            return
        version = int.from_bytes(data[:2], "big", signed=True)
        values, _ = schema.decode(data, version, 2)
    except CorruptMessageError:
        return
    member[field] = schema.to_json_tree(values, version)


def _control_text(key: bytes | None, value: bytes | None) -> str:
    try:
        _, control_type = decode_control_key(key)
        if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            marker = EndTransactionMarker.decode(key, value)
            return f" endTxnMarker: {marker.type.name} coordinatorEpoch: {marker.coordinator_epoch}"
        if isinstance(control_type, ControlRecordType):
            return f" controlType: {control_type.name}({int(control_type)})"
        return f" controlType: UNKNOWN({control_type})"
    except (RecordError, ValueError) as exc:
        return f" controlType: unreadable ({exc})"


def _read_or_empty(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def _dump_index(
    path: Path, shown: str, opts: DumpOptions, problems: _Problems, out: TextIO
) -> None:
    base_offset = _base_offset_of(path)
    data = _read_or_empty(path)
    entries = unpack_offset_index(data)
    if not entries:
        print(f"{shown} is empty.", file=out)
        return
    if opts.index_sanity_check:
        problem = _offset_index_insanity(len(data), entries, base_offset)
        if problem:
            print(f"{shown}: {problem}", file=out)
            problems.failures += 1
        else:
            print(f"{shown} passed sanity check.", file=out)
        return
    log_path = _sibling(path, LOG_FILE_SUFFIX)
    with _mapped(log_path) as log:
        for slot, (relative, position) in enumerate(entries):
            offset = base_offset + relative
            # A preallocated (sparse) index left by a crash is full of zero entries: stop there.
            if offset == base_offset and slot > 0:
                return
            batch_last = _last_offset_of_batch_at(log, position, opts.max_message_size)
            if batch_last != offset:
                problems.index_mismatches.setdefault(_java_absolute_path(shown), []).append(
                    (offset, batch_last)
                )
            if not opts.verify_index_only:
                print(f"offset: {offset} position: {position}", file=out)


def _last_offset_of_batch_at(log: memoryview | bytes, position: int, max_size: int) -> int:
    if position < 0 or position >= len(log):
        return -1
    try:
        end = min(len(log), position + max_size)
        for header in iter_batch_headers(log, position, end):
            return header.last_offset
    except RecordError:
        pass
    return -1


def _offset_index_insanity(
    size_bytes: int, entries: list[OffsetIndexEntry], base_offset: int
) -> str | None:
    # The rules are the storage engine's (offset_index_sanity); the words, and the length
    # reported first, are this tool's.
    last_relative = entries[-1].relative_offset if entries else None
    broken = offset_index_sanity(size_bytes, last_relative)
    if SanityRule.WHOLE_ENTRIES in broken:
        return (
            f"Index file is corrupt: its length {size_bytes} is not a multiple of "
            f"{OFFSET_INDEX_ENTRY.size}"
        )
    if SanityRule.LAST_OFFSET_NOT_BELOW_BASE in broken:
        # Kafka OffsetIndex.sanityCheck (docs/kafka-behaviours.md#sanity-checks): relative offsets
        # are signed on disk, so a corrupt last entry can point below the segment's base offset
        # (lastOffset == baseOffset is legal).
        return (
            f"Index file is corrupt: its last offset {base_offset + last_relative} is below "
            f"the base offset {base_offset}"
        )
    return None


def _time_index_insanity(
    size_bytes: int, entries: list[TimeIndexEntry], base_offset: int
) -> str | None:
    # The rules are the storage engine's (time_index_sanity); the words, and their order
    # (length, timestamps, offset), are this tool's.
    first_timestamp = entries[0].timestamp if entries else None
    last = entries[-1] if entries else None
    broken = time_index_sanity(size_bytes, first_timestamp, last)
    if SanityRule.WHOLE_ENTRIES in broken:
        return (
            f"Time index file is corrupt: its length {size_bytes} is not a multiple of "
            f"{TIME_INDEX_ENTRY.size}"
        )
    if SanityRule.LAST_TIMESTAMP_NOT_BELOW_FIRST in broken:
        return (
            f"Time index is corrupt: the last entry's timestamp {last.timestamp} is below the "
            f"first entry's {first_timestamp}"
        )
    if SanityRule.LAST_OFFSET_NOT_BELOW_BASE in broken:
        return (
            f"Time index is corrupt: the last entry's offset {base_offset + last.relative_offset} "
            f"is below the base offset {base_offset}"
        )
    return None


def _dump_time_index(
    path: Path, shown: str, opts: DumpOptions, problems: _Problems, out: TextIO
) -> None:
    base_offset = _base_offset_of(path)
    data = _read_or_empty(path)
    entries = unpack_time_index(data)
    if opts.index_sanity_check:
        problem = _time_index_insanity(len(data), entries, base_offset)
        if problem:
            print(f"{shown}: {problem}", file=out)
            problems.failures += 1
        else:
            print(f"{shown} passed sanity check.", file=out)
        return
    offset_entries = unpack_offset_index(_read_or_empty(_sibling(path, INDEX_FILE_SUFFIX)))
    name = _java_absolute_path(shown)
    previous_ts = -1
    with _mapped(_sibling(path, LOG_FILE_SUFFIX)) as log:
        for slot, (timestamp, relative) in enumerate(entries):
            offset = base_offset + relative
            if offset == base_offset and slot > 0:
                return
            position = _offset_index_lookup(offset_entries, base_offset, offset)
            batch = _first_batch_ending_at_or_after(log, position, offset)
            if batch is None:
                problems.time_offset_not_found.setdefault(name, []).append((offset, -1))
            elif batch.last_offset != offset:
                problems.time_offset_not_found.setdefault(name, []).append(
                    (offset, batch.last_offset)
                )
            else:
                max_ts = _max_record_timestamp(log, batch)
                if max_ts != timestamp:
                    problems.time_mismatches.setdefault(name, []).append((timestamp, max_ts))
                if previous_ts >= timestamp:
                    problems.time_out_of_order.setdefault(name, []).append(
                        (timestamp, previous_ts)
                    )
            if not opts.verify_index_only:
                print(f"timestamp: {timestamp} offset: {offset}", file=out)
            previous_ts = timestamp


def _offset_index_lookup(entries: list[OffsetIndexEntry], base_offset: int, target: int) -> int:
    """Position of the largest offset-index entry <= target (0 when none): OffsetIndex.lookup.

    The binary search the storage engine's lookup does, probe for probe, so that a corrupt
    (unsorted) index is reported the same way on every run.
    """
    low, high, found = 0, len(entries) - 1, 0
    while low <= high:
        mid = (low + high) // 2
        relative, position = entries[mid]
        if base_offset + relative <= target:
            found, low = position, mid + 1
        else:
            high = mid - 1
    return found


def _first_batch_ending_at_or_after(
    log: memoryview | bytes, position: int, offset: int
) -> BatchHeader | None:
    try:
        for header in iter_batch_headers(log, position):
            if header.last_offset >= offset:
                return header
    except RecordError:
        return None
    return None


def _max_record_timestamp(log: memoryview | bytes, header: BatchHeader) -> int:
    try:
        return max(
            (r.timestamp for r in iter_records(log, header.position, verify_crc=False)),
            default=-1,
        )
    except RecordError:
        return -1


def _dump_txn_index(path: Path, out: TextIO) -> None:
    # Versions are printed as stored, not checked: a dump shows what is there.
    for version, producer_id, first, last, lso in unpack_txn_index(path.read_bytes()):
        print(
            f"version: {version} producerId: {producer_id} firstOffset: {first} "
            f"lastOffset: {last} lastStableOffset: {lso}",
            file=out,
        )


def _dump_snapshot(path: Path, problems: _Problems, out: TextIO, err: TextIO) -> None:
    """Kafka's ``dumpProducerIdSnapshot``: ``ProducerStateManager.readSnapshot`` (schema, then
    CRC), then a line per entry; a snapshot that does not read prints its error only."""
    data = path.read_bytes()
    try:
        snapshot = unpack_producer_snapshot(data, verify_crc=False)
    except CorruptSnapshotError as exc:
        print(f"Snapshot failed schema validation: {exc}", file=err)
        problems.failures += 1
        return
    computed = crc32c(memoryview(data)[PRODUCER_SNAPSHOT_CRC_START:])
    if computed != snapshot.crc:
        print(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {snapshot.crc}. "
              f"Computed crc: {computed}", file=err)
        problems.failures += 1
        return
    for entry in snapshot.entries:
        txn_first = entry.current_txn_first_offset
        line = (
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: "
            f"{'OptionalLong.empty' if txn_first < 0 else f'OptionalLong[{txn_first}]'} "
            f"lastTimestamp: {entry.timestamp} "
        )
        if entry.last_offset >= 0:  # Kafka keeps batch metadata only then
            first_seq = decrement_sequence(entry.last_sequence, entry.offset_delta)
            line += (
                f"firstSequence: {first_seq} lastSequence: {entry.last_sequence} "
                f"lastOffset: {entry.last_offset} offsetDelta: {entry.offset_delta} "
                f"timestamp: {entry.timestamp}"
            )
        print(line, file=out)


#: The files dump_files reads; others are "Ignoring unknown file", unopened, as Kafka's tool.
_DUMPED_SUFFIXES = frozenset({LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
                              TXN_INDEX_FILE_SUFFIX, SNAPSHOT_FILE_SUFFIX})


def dump_files(
    paths: Sequence[str | os.PathLike[str]],
    opts: DumpOptions,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Dump every file; returns 0, or 1 when a file was unreadable or verification found problems.

    ``paths`` are printed as given (as ``java.io.File`` prints them, see the module docstring).
    ``out``/``err`` default to the *current* ``sys.stdout``/``sys.stderr``.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    problems = _Problems()
    for arg in paths:
        shown = _java_file_string(os.fspath(arg))
        path = Path(os.fspath(arg))
        print(f"Dumping {shown}", file=out)
        suffix = path.suffix
        try:
            if suffix in _DUMPED_SUFFIXES:
                # A file that is not there is "No such file or directory", not a complaint
                # about its name (which the dumpers read before they open the file).
                os.stat(path)
            if suffix == LOG_FILE_SUFFIX:
                _dump_log(path, shown, opts, problems, out, err)
            elif suffix == INDEX_FILE_SUFFIX:
                _dump_index(path, shown, opts, problems, out)
            elif suffix == TIME_INDEX_FILE_SUFFIX:
                _dump_time_index(path, shown, opts, problems, out)
            elif suffix == TXN_INDEX_FILE_SUFFIX:
                _dump_txn_index(path, out)
            elif suffix == SNAPSHOT_FILE_SUFFIX:
                _dump_snapshot(path, problems, out, err)
            else:
                print(f"Ignoring unknown file {shown}", file=err)
        except BrokenPipeError:
            raise  # `dump-log ... | head`: main() ends quietly, exit 0 (not a file's problem)
        except OSError as exc:
            print(f"{shown}: {exc.strerror or exc}", file=err)
            problems.failures += 1
        except ValueError as exc:
            print(f"{shown}: {exc}", file=err)
            problems.failures += 1
    problems.print(err)
    return 1 if problems.any() else 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dump-log",
        help="print .log, .index, .timeindex, .txnindex and .snapshot files (as kafka-dump-log.sh)",
        description="Parse log segment and index files and print their contents, as Kafka's "
        "kafka-dump-log.sh does. Exit status 1 when a file is unreadable or an index does not "
        "match its log.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="files to dump")
    parser.add_argument(
        "--files", dest="files_csv", default="", metavar="F1,F2",
        help="comma-separated files, as kafka-dump-log.sh takes them",
    )
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only batch headers")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print record keys and values (implies --deep-iteration)")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="run the index sanity check only")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode records as __consumer_offsets keys and values, as Kafka's "
                        "--offsets-decoder (implies --print-data-log)")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="do not print record metadata with --deep-iteration")
    parser.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024,
                        help="largest batch to read when verifying an index (default 5242880)")
    parser.add_argument("--max-bytes", type=int, default=_INT32_MAX,
                        help="read at most this many bytes of each .log file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    paths = list(args.files) + [p for p in args.files_csv.split(",") if p]
    if not paths:
        print("stratalog dump-log: no files given (FILE... or --files F1,F2)", file=sys.stderr)
        return 2
    if args.max_bytes < 0 or args.max_message_size < 0:
        print("stratalog dump-log: --max-bytes and --max-message-size must be >= 0",
              file=sys.stderr)
        return 2
    opts = DumpOptions(
        deep_iteration=args.deep_iteration,
        print_data_log=args.print_data_log or args.offsets_decoder,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        skip_record_metadata=args.skip_record_metadata,
        max_message_size=args.max_message_size,
        max_bytes=args.max_bytes,
        offsets_decoder=args.offsets_decoder,
    )
    return dump_files(paths, opts)
