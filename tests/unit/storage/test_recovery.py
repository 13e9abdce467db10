"""The LogLoader (Kafka LogLoader.load; docs/kafka-behaviours.md#log-loading): every pass, and
recovery from the damage a crash or a bad disk leaves, checked by what a log serves afterwards
(every offset and timestamp lookup)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from stratalog.records.batch import parse_header, set_base_offset
from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_batches
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.files import (
    log_file,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.recovery import LoadedLog, load_log
from stratalog.server.storage.time_index import TimestampOffset

T0 = 1_700_000_000_000
BATCHES = 30
RECORDS_PER_BATCH = 2


class Clock:
    def __init__(self, now_ms: int = T0 + 10_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def client_batch(index: int) -> bytes:
    """Batch ``index`` holds offsets 2i, 2i+1 with timestamps T0 + 10i, T0 + 10i + 5."""
    return build_batch(
        [(T0 + 10 * index + 5 * r, None, b"v%03d.%d" % (index, r), ()) for r in range(2)]
    )


SEGMENT_BYTES = 5 * len(client_batch(0))  # five batches (ten offsets) per segment
CONFIG = LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=0)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "t-0"


def write_log(directory: Path, batches: int = BATCHES, *, close: bool = True) -> PartitionLog:
    partition_log = PartitionLog.open(directory, CONFIG, time_ms=Clock())
    for index in range(batches):
        partition_log.append(client_batch(index))
    if close:
        partition_log.close()
    return partition_log


def load(
    directory: Path,
    *,
    clean: bool | None,
    recovery_point: int | None = None,
    log_start_offset: int | None = None,
) -> tuple[LoadedLog, PartitionLog]:
    loaded = load_log(
        directory, CONFIG, Clock(), had_clean_shutdown=clean,
        recovery_point_checkpoint=recovery_point, log_start_offset_checkpoint=log_start_offset,
    )
    return loaded, PartitionLog(directory, CONFIG, Clock(), loaded.segments)


def assert_serves(partition_log: PartitionLog, batches: int) -> None:
    """Every offset and timestamp of the first ``batches`` batches is found, nothing after."""
    end_offset = batches * RECORDS_PER_BATCH
    assert partition_log.log_end_offset == end_offset
    for offset in range(end_offset):
        data = partition_log.read(offset, 1)
        header = parse_header(data)
        assert header.base_offset == offset - offset % 2, offset
        records = [r for _, rs in iter_batches(data) for r in rs]
        assert records[offset % 2].value == b"v%03d.%d" % (offset // 2, offset % 2)
    assert partition_log.read(end_offset, 1000) == b""
    for index in range(batches):
        for r in range(2):
            timestamp = T0 + 10 * index + 5 * r
            assert partition_log.offset_for_timestamp(timestamp) == TimestampOffset(
                timestamp, 2 * index + r
            )
            # Between two records: the next one.
            if r == 0:
                assert partition_log.offset_for_timestamp(timestamp + 1) == TimestampOffset(
                    timestamp + 5, 2 * index + 1
                )
    assert partition_log.offset_for_timestamp(T0 + 10 * batches) is None
    if batches:
        last = T0 + 10 * (batches - 1) + 5
        assert partition_log.offset_for_timestamp(-3) == TimestampOffset(last, end_offset - 1)


def append_more_and_check(partition_log: PartitionLog, batches: int) -> None:
    """Appends continue at the right offset after recovery."""
    info = partition_log.append(client_batch(batches))
    assert info.first_offset == batches * RECORDS_PER_BATCH
    assert_serves(partition_log, batches + 1)


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))


# -------------------------------------------------------------------- clean and unclean


def test_clean_load_reads_no_index_of_inactive_segments(directory: Path) -> None:
    write_log(directory)
    loaded, partition_log = load(directory, clean=True)
    assert (loaded.recovered_segments, loaded.truncated_bytes) == (0, 0)
    assert loaded.segments.base_offsets() == [0, 10, 20, 30, 40, 50]
    for segment in list(loaded.segments)[:-1]:
        assert segment.indexes_loaded == (False, False)
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point) == (0, 60, 60)
    assert_serves(partition_log, BATCHES)
    append_more_and_check(partition_log, BATCHES)
    partition_log.close()


def test_unclean_load_recovers_from_the_segment_holding_the_recovery_point(
    directory: Path,
) -> None:
    write_log(directory)
    loaded, partition_log = load(directory, clean=False, recovery_point=35)
    # Segments 30, 40, 50: the floor of 35 and everything after it.
    assert loaded.recovered_segments == 3
    indexes = [segment.indexes_loaded for segment in loaded.segments]
    assert indexes[:3] == [(False, False)] * 3
    assert loaded.recovery_point == 35  # only a flush advances it
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def test_unclean_load_without_checkpoint_recovers_everything(directory: Path) -> None:
    write_log(directory)
    loaded, partition_log = load(directory, clean=False)
    assert loaded.recovered_segments == 6
    assert loaded.recovery_point == 0
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def test_unknown_shutdown_recovers_only_the_active_segment(directory: Path) -> None:
    write_log(directory)
    with log_file(directory, 50).open("ab") as f:
        f.write(b"\x00" * 100)  # preallocated zeros left by a crash
    loaded, partition_log = load(directory, clean=None)
    assert loaded.recovered_segments == 1
    assert loaded.truncated_bytes == 100
    assert loaded.recovery_point == 50
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def test_recovery_point_past_the_active_base_still_scans_the_active_segment(
    directory: Path,
) -> None:
    write_log(directory)
    with log_file(directory, 50).open("ab") as f:
        f.write(b"garbage")
    loaded, partition_log = load(directory, clean=False, recovery_point=60)
    assert loaded.recovered_segments == 1
    assert loaded.truncated_bytes == 7
    assert_serves(partition_log, BATCHES)
    partition_log.close()


# -------------------------------------------------------------------- torn and garbage tails


@pytest.mark.parametrize("seed", range(8))
def test_random_garbage_after_the_active_log_is_cut(directory: Path, seed: int) -> None:
    write_log(directory)
    rng = random.Random(seed)
    garbage = rng.randbytes(rng.randrange(1, 3000))
    with log_file(directory, 50).open("ab") as f:
        f.write(garbage)
    loaded, partition_log = load(directory, clean=False, recovery_point=50)
    assert loaded.truncated_bytes == len(garbage)
    assert log_file(directory, 50).stat().st_size == 5 * len(client_batch(0))
    assert_serves(partition_log, BATCHES)
    append_more_and_check(partition_log, BATCHES)
    partition_log.close()


@pytest.mark.parametrize("cut", [1, 12, 17, 18, 60, 61, 70])
def test_a_torn_last_batch_is_cut(directory: Path, cut: int) -> None:
    write_log(directory)
    path = log_file(directory, 50)
    size = path.stat().st_size
    batch_size = len(client_batch(0))
    os.truncate(path, size - batch_size + cut)  # the last batch keeps only `cut` bytes
    loaded, partition_log = load(directory, clean=False, recovery_point=50)
    assert loaded.truncated_bytes == cut
    assert_serves(partition_log, BATCHES - 1)
    append_more_and_check(partition_log, BATCHES - 1)
    partition_log.close()


def test_a_bit_flip_cuts_at_the_damaged_batch(directory: Path) -> None:
    write_log(directory)
    path = log_file(directory, 50)
    data = bytearray(path.read_bytes())
    batch_size = len(client_batch(0))
    data[2 * batch_size + 70] ^= 0x01  # inside the third batch's records: CRC mismatch
    path.write_bytes(bytes(data))
    loaded, partition_log = load(directory, clean=False, recovery_point=50)
    assert loaded.truncated_bytes == 3 * batch_size
    assert_serves(partition_log, BATCHES - 3)
    partition_log.close()


def test_damage_in_an_earlier_segment_deletes_the_later_ones(directory: Path) -> None:
    write_log(directory)
    path = log_file(directory, 20)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # the last batch of segment 20
    path.write_bytes(bytes(data))
    loaded, partition_log = load(directory, clean=False, recovery_point=15)
    assert loaded.deleted_segments == 3
    assert segment_bases(directory) == [0, 10, 20]
    assert not offset_index_file(directory, 30).exists()
    assert_serves(partition_log, 14)
    append_more_and_check(partition_log, 14)
    partition_log.close()


def test_damage_below_the_recovery_point_is_not_looked_for(directory: Path) -> None:
    # Kafka's contract: data below the recovery point was fsynced and is trusted as is.
    write_log(directory)
    with log_file(directory, 0).open("r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff")
    loaded, partition_log = load(directory, clean=False, recovery_point=40)
    assert loaded.recovered_segments == 2
    assert loaded.truncated_bytes == 0
    partition_log.close()


# -------------------------------------------------------------------- indexes


@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_junk_indexes_of_the_recovered_segments_are_rebuilt(directory: Path, which: str) -> None:
    write_log(directory)
    expected = {
        base: (offset_index_file(directory, base).read_bytes(),
               time_index_file(directory, base).read_bytes())
        for base in (40, 50)
    }
    rng = random.Random(7)
    for base in (40, 50):
        path = offset_index_file(directory, base) if which == "index" else time_index_file(
            directory, base
        )
        path.write_bytes(rng.randbytes(120))
    loaded, partition_log = load(directory, clean=False, recovery_point=40)
    assert loaded.recovered_segments == 2
    assert_serves(partition_log, BATCHES)
    partition_log.close()
    for base, (offset_bytes, time_bytes) in expected.items():
        assert offset_index_file(directory, base).read_bytes() == offset_bytes
        assert time_index_file(directory, base).read_bytes() == time_bytes


def test_an_untrimmed_active_index_after_a_crash_is_rebuilt(directory: Path) -> None:
    partition_log = write_log(directory, close=False)
    partition_log.flush()
    # The process dies: the active segment's preallocated indexes are never trimmed.
    for segment in partition_log.segments:
        segment.close_handlers()
    assert offset_index_file(directory, 50).stat().st_size == CONFIG.segment_index_bytes
    loaded, reopened = load(directory, clean=False, recovery_point=60)
    assert loaded.recovered_segments == 1
    assert_serves(reopened, BATCHES)
    append_more_and_check(reopened, BATCHES)
    reopened.close()


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("which", ["index", "timeindex", "both"])
def test_missing_indexes_are_rebuilt_on_any_segment(
    directory: Path, which: str, clean: bool
) -> None:
    write_log(directory)
    expected = (offset_index_file(directory, 10).read_bytes(),
                time_index_file(directory, 10).read_bytes())
    if which in ("index", "both"):
        offset_index_file(directory, 10).unlink()
    if which in ("timeindex", "both"):
        time_index_file(directory, 10).unlink()
    loaded, partition_log = load(directory, clean=clean, recovery_point=60)
    # After an unclean shutdown the active segment is scanned too.
    assert loaded.recovered_segments == (1 if clean else 2)
    assert [s.base_offset for s in loaded.segments if s.indexes_loaded != (False, False)] == [
        10, 50
    ]
    assert_serves(partition_log, BATCHES)
    partition_log.close()
    assert offset_index_file(directory, 10).read_bytes() == expected[0]
    assert time_index_file(directory, 10).read_bytes() == expected[1]


def test_a_corrupt_transaction_index_makes_its_segment_recover(directory: Path) -> None:
    write_log(directory)
    transaction_index_file(directory, 10).write_bytes(b"\x00" * 34)  # last offset 0 < base 10
    loaded, partition_log = load(directory, clean=True)
    assert loaded.recovered_segments == 1
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def test_orphan_index_files_are_deleted(directory: Path) -> None:
    write_log(directory)
    for path in (offset_index_file(directory, 500), time_index_file(directory, 500),
                 transaction_index_file(directory, 7)):
        path.write_bytes(b"\x00" * 24)
    loaded, partition_log = load(directory, clean=True)
    assert loaded.directory_changed
    assert not offset_index_file(directory, 500).exists()
    assert not time_index_file(directory, 500).exists()
    assert not transaction_index_file(directory, 7).exists()
    assert_serves(partition_log, BATCHES)
    partition_log.close()


# -------------------------------------------------------------------- leftovers of renames


def test_deleted_and_cleaned_leftovers_are_removed(directory: Path) -> None:
    write_log(directory)
    for name in ("00000000000000000060.log.deleted", "00000000000000000060.index.deleted",
                 "00000000000000000070.log.cleaned", "00000000000000000070.timeindex.cleaned"):
        (directory / name).write_bytes(b"junk")
    _loaded, partition_log = load(directory, clean=True)
    # Six segments, and six producer snapshots: one per roll and one at the clean close; and
    # the leader-epoch-checkpoint (no suffix).
    assert sorted(p.suffix for p in directory.iterdir()) == sorted(
        [".log", ".index", ".timeindex", ".snapshot"] * 6 + [""]
    )
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def _make_swap_of(directory: Path, bases: list[int], new_base: int) -> None:
    """A finished compaction/merge output of ``bases``: one ``.log.swap`` holding their data."""
    data = b"".join(log_file(directory, base).read_bytes() for base in bases)
    (directory / (log_file(directory, new_base).name + ".swap")).write_bytes(data)


def test_a_swap_segment_replaces_what_it_covers(directory: Path) -> None:
    # Kafka LogLoader.load (docs/kafka-behaviours.md#log-loading): a crash after the .swap rename
    # and before the old segments went: complete it.
    write_log(directory)
    _make_swap_of(directory, [10, 20], 10)
    loaded, partition_log = load(directory, clean=True)
    assert segment_bases(directory) == [0, 10, 30, 40, 50]
    assert not list(directory.glob("*.swap"))
    assert not offset_index_file(directory, 20).exists()
    # The renamed swap had no index: pass 4 rebuilt it.
    assert loaded.recovered_segments == 1
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def test_a_swap_of_an_incomplete_split_is_rolled_back(directory: Path) -> None:
    # Kafka LogLoader.removeTempFilesAndCollectSwapFiles (docs/kafka-behaviours.md#log-loading):
    # .cleaned files at or below the swap's offset mean the split was not finished.
    write_log(directory)
    _make_swap_of(directory, [20], 20)
    (directory / "00000000000000000015.log.cleaned").write_bytes(b"partial")
    loaded, partition_log = load(directory, clean=True)
    assert segment_bases(directory) == [0, 10, 20, 30, 40, 50]
    assert not list(directory.glob("*.swap")) and not list(directory.glob("*.cleaned"))
    assert loaded.recovered_segments == 0
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def test_a_swap_below_every_cleaned_file_is_kept(directory: Path) -> None:
    write_log(directory)
    _make_swap_of(directory, [0, 10], 0)
    (directory / "00000000000000000030.log.cleaned").write_bytes(b"partial")
    _loaded, partition_log = load(directory, clean=True)
    assert segment_bases(directory) == [0, 20, 30, 40, 50]
    assert_serves(partition_log, BATCHES)
    partition_log.close()


# -------------------------------------------------------------------- offsets


def test_log_start_offset_comes_from_the_checkpoint(directory: Path) -> None:
    write_log(directory)
    loaded, partition_log = load(directory, clean=True, log_start_offset=25)
    assert loaded.log_start_offset == 25
    assert loaded.segments.base_offsets()[0] == 0  # retention deletes them later
    partition_log.close()
    loaded, partition_log = load(directory, clean=True, log_start_offset=None)
    assert loaded.log_start_offset == 0
    partition_log.close()


def test_a_log_ending_below_its_checkpointed_start_is_emptied(directory: Path) -> None:
    write_log(directory)
    loaded, partition_log = load(directory, clean=True, log_start_offset=100)
    assert loaded.deleted_segments == 6
    assert segment_bases(directory) == [100]
    assert (loaded.log_start_offset, loaded.log_end_offset) == (100, 100)
    assert partition_log.append(client_batch(0)).first_offset == 100
    partition_log.close()


def test_an_empty_directory_gets_a_segment_at_the_checkpointed_start(directory: Path) -> None:
    directory.mkdir()
    loaded, partition_log = load(directory, clean=False, log_start_offset=42)
    assert loaded.segments.base_offsets() == [42]
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point) == (42, 42, 0)
    partition_log.close()


def test_loading_twice_is_idempotent(directory: Path) -> None:
    write_log(directory)
    with log_file(directory, 50).open("ab") as f:
        f.write(b"\x01" * 99)
    first, partition_log = load(directory, clean=False, recovery_point=0)
    assert first.truncated_bytes == 99
    for segment in partition_log.segments:
        segment.close_handlers()  # a second crash, right after recovery
    again, partition_log = load(directory, clean=False, recovery_point=0)
    assert again.truncated_bytes == 0
    assert_serves(partition_log, BATCHES)
    partition_log.close()


def test_kafka_written_segment_without_indexes(tmp_path: Path, kafka_written_dir: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    source = kafka_written_dir / "metadata-b-00000000000000000001.log"
    shutil.copy(source, log_file(directory, 1))
    loaded, partition_log = load(directory, clean=False)
    assert (loaded.log_start_offset, loaded.log_end_offset) == (1, 4)
    assert loaded.truncated_bytes == 0
    assert partition_log.read(1, 10_000) == source.read_bytes()
    partition_log.close()


def test_non_monotonic_offsets_empty_the_segment(directory: Path) -> None:
    # Kafka: CRC-valid batches whose offsets go back mean nothing in the segment can be trusted.
    write_log(directory, batches=7)  # segments 0 (5 batches) and 10 (2 batches)
    one = bytearray(client_batch(0))
    set_base_offset(one, 0, 10)
    log_file(directory, 10).write_bytes(bytes(one) * 3)  # offsets 10-11 three times
    loaded, partition_log = load(directory, clean=False, recovery_point=10)
    assert loaded.segments.base_offsets() == [0, 10]
    assert log_file(directory, 10).stat().st_size == 0
    assert_serves(partition_log, 5)
    append_more_and_check(partition_log, 5)
    partition_log.close()


def test_a_segment_rebuilt_for_a_missing_index_is_not_scanned_twice(directory: Path) -> None:
    write_log(directory)
    offset_index_file(directory, 50).unlink()
    with log_file(directory, 50).open("ab") as f:
        f.write(b"\x00" * 10)
    loaded, partition_log = load(directory, clean=False, recovery_point=50)
    assert (loaded.recovered_segments, loaded.truncated_bytes) == (1, 10)
    assert_serves(partition_log, BATCHES)
    partition_log.close()
