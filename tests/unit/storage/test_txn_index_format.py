"""The ``.txnindex`` bytes a PartitionLog writes, read back by a parser written from the
reference alone (docs/kafka-behaviours.md#transaction-index), not by ``records.log_layout``'s codec.

The scenarios are Kafka's (UnifiedLogTest.testTransactionIndexUpdated, LogLoaderTest's
testFullTransactionIndexRecovery and testRecoverOnlyLastSegment) with Kafka's expected entries,
plus aborts across a roll, and recovery after the files were deleted or the process stopped
uncleanly: the rebuilt files must equal the originals byte for byte.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage import PartitionLog

T0 = 1_700_000_000_000

# docs/kafka-behaviours.md#transaction-index: 34-byte entries, no header: version int16 (Kafka reads
# byte 0 only and rejects > 0), producerId int64, firstOffset int64, lastOffset int64,
# lastStableOffset int64, big-endian.
ENTRY_BYTES = 34


class Entry(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def parse_txn_index(data: bytes) -> list[Entry]:
    """Every whole entry of a ``.txnindex``; trailing bytes short of an entry are ignored."""
    entries = []
    for start in range(0, len(data) - len(data) % ENTRY_BYTES, ENTRY_BYTES):
        assert data[start] <= 0x7F and data[start] == 0, f"version byte {data[start]} at {start}"
        entries.append(Entry(*struct.unpack(">qqqq", data[start + 2 : start + ENTRY_BYTES])))
    return entries


def test_the_parser_reads_the_references_example() -> None:
    example = bytes.fromhex("0000" "00000000000f01c5" "0000000000000089" "000000000000012b"
                            "00000000000000c8")
    assert parse_txn_index(example + b"\x00" * 33) == [Entry(983493, 137, 299, 200)]


# ------------------------------------------------------------------- writing a log


class Writer:
    """Appends to a PartitionLog the way Kafka's LogTestUtils helpers do: transactional batches
    with a sequence per producer, plain batches, markers from coordinator epoch 0."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}

    def txn(self, producer_id: int, count: int) -> None:
        sequence = self.sequences.get(producer_id, 0)
        self.log.append(build_batch(
            [(T0, None, b"t%d" % i, ()) for i in range(count)], producer_id=producer_id,
            producer_epoch=0, base_sequence=sequence, is_transactional=True,
        ))
        self.sequences[producer_id] = sequence + count

    def plain(self, count: int) -> None:
        self.log.append(build_batch([(T0, None, b"p%d" % i, ()) for i in range(count)]))

    def abort(self, producer_id: int) -> None:
        self.log.write_txn_marker(producer_id, 0, 0, commit=False)

    def commit(self, producer_id: int) -> None:
        self.log.write_txn_marker(producer_id, 0, 0, commit=True)


def kafka_transaction_index_scenario(writer: Writer) -> None:
    """UnifiedLogTest.testTransactionIndexUpdated's appends (log end offsets in comments)."""
    writer.txn(1, 5)  # 5
    writer.plain(3)  # 8
    writer.txn(2, 2)  # 10
    writer.txn(1, 4)  # 14
    writer.txn(3, 3)  # 17
    writer.plain(2)  # 19
    writer.txn(1, 10)  # 29
    writer.abort(1)  # 30
    writer.txn(2, 6)  # 36
    writer.txn(4, 3)  # 39
    writer.plain(10)  # 49
    writer.txn(3, 9)  # 58
    writer.commit(3)  # 59
    writer.txn(4, 8)  # 67
    writer.txn(2, 7)  # 74
    writer.abort(2)  # 75
    writer.plain(10)  # 85
    writer.txn(4, 4)  # 89
    writer.commit(4)  # 90


# Kafka's expected entries for that scenario.
KAFKA_ABORTED = [Entry(1, 0, 29, 8), Entry(2, 8, 74, 36)]


def txn_index_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.txnindex"))}


def all_entries(directory: Path) -> list[Entry]:
    return [entry for data in txn_index_files(directory).values()
            for entry in parse_txn_index(data)]


def open_log(directory: Path, **kwargs: object) -> PartitionLog:
    config = kwargs.pop("config", None)
    return PartitionLog.open(directory, config, time_ms=lambda: T0, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------- the bytes written


def test_aborts_of_several_producers_are_laid_out_as_the_reference_says(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    with open_log(directory) as log:
        kafka_transaction_index_scenario(Writer(log))
        assert log.last_stable_offset == log.log_end_offset == 90
    files = txn_index_files(directory)
    assert list(files) == ["00000000000000000000.txnindex"]
    assert parse_txn_index(files["00000000000000000000.txnindex"]) == KAFKA_ABORTED
    assert len(files["00000000000000000000.txnindex"]) == 2 * ENTRY_BYTES


def test_an_abort_after_a_roll_goes_to_the_markers_segment(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    with open_log(directory) as log:
        writer = Writer(log)
        writer.txn(1, 2)  # 0-1: producer 1's transaction starts in segment 0
        writer.txn(2, 1)  # 2
        log.roll()  # segment 3
        writer.txn(1, 1)  # 3
        writer.abort(2)  # 4: producer 1 is still open from 0
        writer.plain(1)  # 5
        log.roll()  # segment 6
        writer.abort(1)  # 6: nothing else open
        writer.txn(3, 1)  # 7
        log.roll()  # segment 8
        writer.commit(3)  # 8: commits write no entry
    files = txn_index_files(directory)
    # A segment without an abort has no file at all (created on the first entry).
    assert list(files) == ["00000000000000000003.txnindex", "00000000000000000006.txnindex"]
    assert parse_txn_index(files["00000000000000000003.txnindex"]) == [Entry(2, 2, 4, 0)]
    assert parse_txn_index(files["00000000000000000006.txnindex"]) == [Entry(1, 0, 6, 7)]


# ------------------------------------------------------------------- recovery: byte-equal files


def written_with_rolls(directory: Path) -> dict[str, bytes]:
    """Kafka's scenario in segments of 640 bytes (testFullTransactionIndexRecovery); returns
    the ``.txnindex`` files after a clean close."""
    with open_log(directory, config={"segment.bytes": "640"}) as log:
        kafka_transaction_index_scenario(Writer(log))
        assert len(log.segments) >= 4
    files = txn_index_files(directory)
    assert [entry for data in files.values() for entry in parse_txn_index(data)] == KAFKA_ABORTED
    # The two aborts sit in different segments, each after its transaction's first segment.
    assert len(files) == 2
    for name, data in files.items():
        assert all(entry.first_offset < int(name.split(".")[0]) for entry in parse_txn_index(data))
    return files


def test_full_recovery_rebuilds_deleted_txn_indexes_byte_for_byte(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    original = written_with_rolls(directory)
    for name in original:
        (directory / name).unlink()
    for path in directory.glob("*.index"):
        path.unlink()  # Kafka's test deletes the offset indexes too
    with open_log(directory, config={"segment.bytes": "5120"}, had_clean_shutdown=False,
                  recovery_point=0) as log:
        assert log.recovered_segments == len(log.segments)
    assert txn_index_files(directory) == original


def test_recovering_only_the_last_segments_uses_the_snapshot_before_them(tmp_path: Path) -> None:
    # LogLoaderTest.testRecoverOnlyLastSegment: the transactions the recovered segments abort
    # started in segments that are not recovered; their first offsets come from a snapshot.
    directory = tmp_path / "t-0"
    original = written_with_rolls(directory)
    last_abort_file = max(original)
    (directory / last_abort_file).unlink()
    recovery_point = int(last_abort_file.split(".")[0])
    with open_log(directory, had_clean_shutdown=False, recovery_point=recovery_point) as log:
        assert 0 < log.recovered_segments < len(log.segments)
    assert txn_index_files(directory) == original


def crash_image(directory: Path, into: Path, scenario: Callable[[Writer], None]) -> Path:
    """Run ``scenario`` on a log and copy its directory while the log is still open: the copy
    holds what the page cache held, as after a process crash (no close, no final snapshot)."""
    log = open_log(directory, config={"segment.bytes": "640"})
    try:
        scenario(Writer(log))
        shutil.copytree(directory, into)
    finally:
        log.close()
    return into


@pytest.mark.parametrize("delete_txn_indexes", [False, True])
@pytest.mark.parametrize("recovery_point", [0, None])
def test_unclean_stop_then_recovery_gives_the_same_bytes(
    tmp_path: Path, delete_txn_indexes: bool, recovery_point: int | None
) -> None:
    def scenario(writer: Writer) -> None:
        kafka_transaction_index_scenario(writer)
        writer.txn(5, 3)  # 93: open at the crash
        writer.txn(6, 2)  # 95
        writer.abort(6)  # 96: its entry's LSO is producer 5's first offset, in the active segment

    image = crash_image(tmp_path / "t-0", tmp_path / "crash" / "t-0", scenario)
    original = txn_index_files(tmp_path / "t-0")
    assert all_entries(tmp_path / "t-0") == [*KAFKA_ABORTED, Entry(6, 93, 95, 90)]
    assert txn_index_files(image) == original
    active = max(int(path.name.split(".")[0]) for path in image.glob("*.log"))
    assert max(original) == f"{active:020d}.txnindex"  # the last abort is in the active segment
    if delete_txn_indexes:
        for name in original:
            # Without a clean-shutdown marker only the active segment is recovered.
            if recovery_point is not None or int(name.split(".")[0]) == active:
                (image / name).unlink()
    if recovery_point is None:
        reopened = open_log(image)
    else:
        reopened = open_log(image, had_clean_shutdown=False, recovery_point=recovery_point)
    with reopened as log:
        assert log.log_end_offset == 96
        assert log.last_stable_offset == 90  # producer 5's transaction is still open
    assert txn_index_files(image) == original
