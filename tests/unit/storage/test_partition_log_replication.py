"""The storage side of replication (issue 17): follower appends, the leader epoch cache in a
log, the high watermark. Ports of the replication cases of Kafka's UnifiedLogTest and
LogSegmentTest (appendAsFollower at given offsets, past 2^31, truncation by epoch, the cache
after recovery and truncation, high-watermark-bounded reads, retention below the HW)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratalog.records.builder import BatchBuilder, build_batch
from stratalog.records.control import ControlRecordType, EndTransactionMarker
from stratalog.records.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from stratalog.records.log_layout import REPLICATION_OFFSET_CHECKPOINT_FILE
from stratalog.records.reader import iter_batches
from stratalog.server.storage.errors import (
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from stratalog.server.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
)
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.partition_log import IsolationLevel, PartitionLog

T0 = 1_700_000_000_000
INT32_MAX = 2**31 - 1


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_log(directory: Path, clock: Clock | None = None, **config: object) -> PartitionLog:
    mapping = {key.replace("_", "."): value for key, value in config.items()}
    return PartitionLog.open(directory, mapping, time_ms=clock or Clock())  # type: ignore[arg-type]


def leader_batch(base_offset: int, epoch: int, count: int = 1, *, timestamp: int = T0,
                 value: bytes = b"v", **kw: object) -> bytes:
    """A batch as a leader stored it: offsets and epoch stamped."""
    return build_batch(
        [(timestamp, None, value, ())] * count,
        base_offset=base_offset, partition_leader_epoch=epoch, **kw,
    )


def client(count: int = 1, *, timestamp: int = T0) -> bytes:
    return build_batch([(timestamp, None, b"c", ())] * count)


def marker_batch(base_offset: int, epoch: int, producer_id: int, producer_epoch: int,
                 *, commit: bool) -> bytes:
    marker = EndTransactionMarker(
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, 0
    )
    builder = BatchBuilder(
        base_offset=base_offset, partition_leader_epoch=epoch, producer_id=producer_id,
        producer_epoch=producer_epoch, is_transactional=True, is_control=True,
    )
    builder.append(T0, marker.encode_key(), marker.encode_value(), ())
    return builder.build()


def offsets(data: bytes) -> list[int]:
    return [r.offset for _, records in iter_batches(data) for r in records]


def epochs(data: bytes) -> list[int]:
    return [header.partition_leader_epoch for header, _ in iter_batches(data)]


def read_all(log: PartitionLog, start: int | None = None) -> bytes:
    """Every batch from ``start`` (default: the log start) to the log end."""
    out = bytearray()
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        fetched = log.fetch(offset, 1 << 20)
        if not fetched.data:
            break
        out += fetched.data
        offset = fetched.next_offset
    return bytes(out)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


# ---------------------------------------------------------------- follower appends


def test_append_as_follower_keeps_the_leaders_offsets_epochs_and_bytes(directory: Path) -> None:
    batches = [leader_batch(0, 1, 3), leader_batch(3, 1, 2), leader_batch(5, 3, 2)]
    with open_log(directory) as log:
        info = log.append_as_follower(b"".join(batches[:2]))
        assert (info.first_offset, info.last_offset, info.record_count) == (0, 4, 5)
        log.append_as_follower(batches[2])
        assert log.log_end_offset == 7
        assert read_all(log) == b"".join(batches)  # not re-stamped: byte for byte
        assert log.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(3, 5)]
        assert log.end_offset_for_epoch(1) == (1, 5)
        assert log.end_offset_for_epoch(3) == (3, 7)
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes() == b"0\n2\n1 0\n3 5\n"


def test_append_as_follower_accepts_a_gap_left_by_compaction(directory: Path) -> None:
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 0, 2))
        log.append_as_follower(leader_batch(10, 0, 2))  # the leader compacted 2..9 away
        assert log.log_end_offset == 12
        assert offsets(log.fetch(4, 1 << 20).data) == [10, 11]


def test_unexpected_append_offset_is_refused_and_changes_nothing(directory: Path) -> None:
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 0, 5))
        before = read_all(log)
        with pytest.raises(UnexpectedAppendOffsetError, match="below the log end offset 5") as info:
            log.append_as_follower(leader_batch(3, 0, 4))
        assert (info.value.first_offset, info.value.last_offset) == (3, 6)
        assert info.value.log_end_offset == 5
        assert read_all(log) == before and log.log_end_offset == 5


@pytest.mark.parametrize(("bad", "error", "message"), [
    (leader_batch(2, 0) + leader_batch(2, 0), InvalidRecordError, "out of order offsets"),
    (leader_batch(2, -1), InvalidRecordError, "no partition leader epoch"),
    (leader_batch(2, 0, value=b"x" * 300), RecordTooLargeError, "max.message.bytes"),
])
def test_bad_follower_batches_are_refused_whole(
    directory: Path, bad: bytes, error: type, message: str
) -> None:
    with open_log(directory, max_message_bytes=250) as log:
        log.append_as_follower(leader_batch(0, 0, 2))
        with pytest.raises(error, match=message):
            log.append_as_follower(bad)
        assert log.log_end_offset == 2
        assert log.leader_epoch_cache.entries == [EpochEntry(0, 0)]


def test_a_corrupt_follower_batch_is_refused(directory: Path) -> None:
    damaged = bytearray(leader_batch(0, 0, 3))
    damaged[-1] ^= 0xFF
    with open_log(directory) as log:
        with pytest.raises(CorruptRecordError, match="CRC"):
            log.append_as_follower(bytes(damaged))
        # The epoch sits outside the CRC, but a follower's batch must still pass it.
        assert log.log_end_offset == 0 and log.leader_epoch_cache.entries == []


def _magic(batch: bytes, magic: int) -> bytes:
    changed = bytearray(batch)
    changed[16] = magic
    return bytes(changed)


@pytest.mark.parametrize(("bad", "error", "message"), [
    # The leader sends whole batches: a cut one is refused, wherever it is cut.
    (leader_batch(2, 0, 3)[:-5], CorruptRecordError, "partial record batch at position 0"),
    (leader_batch(2, 0) + leader_batch(3, 0)[:40], CorruptRecordError,
     "partial record batch at position 69"),
    (leader_batch(2, 0) + leader_batch(3, 0)[:10], CorruptRecordError,
     "partial record batch at position 69"),
    (leader_batch(2, 0) + _magic(leader_batch(3, 0), 1), InvalidRecordError,
     "position 69 has magic 1"),
], ids=["cut", "cut-after-a-batch", "17-bytes-or-fewer-after-a-batch", "magic-1"])
def test_follower_batches_not_whole_or_not_v2_are_refused_whole(
    directory: Path, bad: bytes, error: type, message: str
) -> None:
    assert len(leader_batch(2, 0)) == 69
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 0, 2))
        with pytest.raises(error, match=message):
            log.append_as_follower(bad)
        assert log.log_end_offset == 2 and read_all(log) == leader_batch(0, 0, 2)


def test_follower_append_larger_than_a_segment_is_refused(directory: Path) -> None:
    big = b"".join(leader_batch(i, 0) for i in range(10))
    with (
        open_log(directory, segment_bytes=len(big) - 1) as log,
        pytest.raises(RecordBatchTooLargeError, match=r"segment\.bytes"),
    ):
        log.append_as_follower(big)


def test_duplicate_sequences_are_accepted_on_the_follower(directory: Path) -> None:
    # Kafka's testDuplicateAppendToFollower: no producer-state check refuses a follower append.
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 0, 2, producer_id=1, producer_epoch=0,
                                            base_sequence=0))
        log.append_as_follower(leader_batch(2, 0, 2, producer_id=1, producer_epoch=0,
                                            base_sequence=0))
        assert log.log_end_offset == 4
        entry = log.producer_state.last_entry(1)
        assert entry is not None and entry.last_seq == 1 and entry.last_data_offset == 3


def test_follower_replays_transactions_and_indexes_aborts(directory: Path) -> None:
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 0, 2, producer_id=7, producer_epoch=0,
                                            base_sequence=0, is_transactional=True))
        assert log.last_stable_offset == 0  # the transaction is open
        log.append_as_follower(leader_batch(2, 0, 1))
        log.append_as_follower(marker_batch(3, 0, 7, 0, commit=False))
        assert log.last_stable_offset == 4
        committed = log.fetch(0, 1 << 20, isolation_level=IsolationLevel.READ_COMMITTED)
        assert [(t.producer_id, t.first_offset, t.last_offset)
                for t in committed.aborted_transactions] == [(7, 0, 3)]
    # The aborted transaction is in the .txnindex: a reopened log reports it too.
    with open_log(directory) as log:
        committed = log.fetch(0, 1 << 20, isolation_level=IsolationLevel.READ_COMMITTED)
        assert [t.producer_id for t in committed.aborted_transactions] == [7]


def test_follower_append_past_2_to_the_31_rolls_a_segment(directory: Path) -> None:
    # LogSegmentTest/UnifiedLogTest: a base offset whose relative offset would overflow the
    # active segment's index goes to a new segment based at it.
    far = INT32_MAX + 10
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 0, 2))
        log.append_as_follower(leader_batch(far, 1, 3))
        assert log.segments.base_offsets() == [0, far]
        assert log.log_end_offset == far + 3
        assert offsets(log.fetch(far + 1, 1 << 20).data) == [far, far + 1, far + 2]
        assert offsets(log.fetch(1, 1 << 20).data) == [0, 1]
        assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(1, far)]
    with open_log(directory) as log:  # recovery reads it back the same
        assert log.log_end_offset == far + 3
        assert offsets(log.fetch(far + 2, 1 << 20).data) == [far, far + 1, far + 2]
        assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(1, far)]


def test_one_follower_append_spanning_more_than_2_to_the_31_goes_to_two_segments(
    directory: Path,
) -> None:
    second = 5 + INT32_MAX + 1
    data = leader_batch(5, 2, 2) + leader_batch(second, 2, 2)
    with open_log(directory) as log:
        info = log.append_as_follower(data)
        assert (info.first_offset, info.last_offset, info.record_count) == (5, second + 1, 4)
        assert log.segments.base_offsets() == [0, second]
        assert read_all(log, 5) == data
        assert log.leader_epoch_cache.entries == [EpochEntry(2, 5)]


def test_follower_append_rolls_by_size_at_the_batch_offset(directory: Path) -> None:
    one = leader_batch(0, 0)
    with open_log(directory, segment_bytes=2 * len(one)) as log:
        for offset in range(5):
            log.append_as_follower(leader_batch(offset, 0))
        assert log.segments.base_offsets() == [0, 2, 4]


# ---------------------------------------------------------------- follower appends on the loop


def _follower_state(log: PartitionLog) -> tuple[object, ...]:
    return (log.log_end_offset, log.high_watermark, log.last_stable_offset,
            log.leader_epoch_cache.entries, log.segments.base_offsets(), read_all(log))


def test_a_follower_append_in_the_current_epoch_is_done_without_blocking(
    directory: Path,
) -> None:
    # The same bytes, offsets, producer state and high watermark as append_as_follower then
    # update_high_watermark, in a log beside it.
    batches = [leader_batch(0, 2, 3), leader_batch(3, 2, 2, producer_id=5, producer_epoch=0,
                                                   base_sequence=0)]
    with open_log(directory) as log, open_log(directory.parent / "topic-1") as twin:
        log.append_as_follower(batches[0])
        twin.append_as_follower(batches[0])
        info = log.try_follow_without_blocking(batches[1], leader_high_watermark=4)
        assert info is not None
        assert (info.first_offset, info.last_offset, info.record_count) == (3, 4, 2)
        twin.append_as_follower(batches[1])
        twin.update_high_watermark(4)
        assert _follower_state(log) == _follower_state(twin)
        assert log.high_watermark == 4
        entry = log.producer_state.last_entry(5)
        assert entry is not None and entry.last_seq == 1
        # Nothing to append: only the high watermark, bounded by the log end.
        assert log.try_follow_without_blocking(b"", leader_high_watermark=99) is not None
        assert log.high_watermark == 5


@pytest.mark.parametrize("why", ["new epoch", "marker", "roll", "flush", "two segments"])
def test_a_follower_append_that_would_block_is_left_undone(directory: Path, why: str) -> None:
    # Each of these writes more than the page cache (a checkpoint, the .txnindex, a new
    # segment, an fsync): the loop leaves it to a thread, which does it whole.
    first = leader_batch(0, 1, 1, producer_id=7, producer_epoch=0, base_sequence=0,
                         is_transactional=True)
    data = {
        "new epoch": leader_batch(1, 2),
        "marker": marker_batch(1, 1, 7, 0, commit=True),
        "roll": leader_batch(1, 1, 3),
        "flush": leader_batch(1, 1),
        "two segments": leader_batch(1, 1) + leader_batch(INT32_MAX + 5, 1),
    }[why]
    config: dict[str, object] = {}
    if why == "roll":
        config["segment_bytes"] = len(first) + len(data) - 1  # both do not fit one segment
    if why == "flush":
        config["flush_messages"] = 2
    with open_log(directory, **config) as log:
        log.append_as_follower(first)
        before = _follower_state(log)
        assert log.try_follow_without_blocking(data, leader_high_watermark=1) is None
        assert _follower_state(log) == before
        log.append_as_follower(data)  # the thread's append takes it
        assert log.log_end_offset > 1


def test_a_bad_follower_append_without_blocking_raises_and_writes_nothing(
    directory: Path,
) -> None:
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 1, 2))
        before = _follower_state(log)
        with pytest.raises(UnexpectedAppendOffsetError):
            log.try_follow_without_blocking(leader_batch(1, 1), leader_high_watermark=2)
        corrupt = bytearray(leader_batch(2, 1))
        corrupt[-1] ^= 0xFF
        with pytest.raises(CorruptRecordError):
            log.try_follow_without_blocking(bytes(corrupt), leader_high_watermark=2)
        assert _follower_state(log) == before


# ---------------------------------------------------------------- leader appends


def test_a_leader_stamps_its_epoch_and_assigns_it(directory: Path) -> None:
    with open_log(directory) as log:
        log.append(client(2))  # the single-server default, epoch 0
        log.append(client(3), leader_epoch=5)
        log.write_txn_marker(9, 0, 0, commit=True, leader_epoch=6)
        assert epochs(read_all(log)) == [0, 5, 6]
        assert log.leader_epoch_cache.entries == [
            EpochEntry(0, 0), EpochEntry(5, 2), EpochEntry(6, 5)
        ]
        assert log.latest_epoch == 6


def test_single_server_log_keeps_epoch_0_from_its_first_offset(directory: Path) -> None:
    with open_log(directory) as log:
        assert not (directory / LEADER_EPOCH_CHECKPOINT_FILE).exists()  # nothing yet
        for _ in range(3):
            log.append(client())
        assert log.leader_epoch_cache.entries == [EpochEntry(0, 0)]
        assert log.end_offset_for_epoch(0) == (0, 3)
        assert log.end_offset_for_epoch(UNDEFINED_EPOCH) == (UNDEFINED_EPOCH,
                                                              UNDEFINED_EPOCH_OFFSET)


def test_truncate_to_end_offset_clears_trivial_epoch_entry(directory: Path) -> None:
    # Kafka's testTruncateToEndOffsetClearsEpochCache.
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(27, 19, 2))
        assert log.leader_epoch_cache.latest_entry == EpochEntry(19, 27)
        assert log.log_end_offset == 29
        log.maybe_assign_epoch_start_offset(20, log.log_end_offset)  # becomes leader
        assert log.leader_epoch_cache.latest_entry == EpochEntry(20, 29)
        # A follower again, truncating to (or past) its log end: no data goes, but the epoch
        # that wrote nothing does.
        assert not log.truncate_to(29)
        assert log.leader_epoch_cache.latest_entry == EpochEntry(19, 27)
        assert log.log_end_offset == 29


# ---------------------------------------------------------------- truncation by epoch


def test_a_diverged_follower_truncates_by_leader_epoch_not_by_high_watermark(
    tmp_path: Path,
) -> None:
    # KIP-101: both replicas have epoch 1 at [0, 5); the old leader (now follower) also wrote
    # [5, 8) in epoch 1 that never replicated; the new leader wrote [5, 7) in epoch 2.
    shared = [leader_batch(0, 1, 5)]
    with open_log(tmp_path / "leader-0") as leader, open_log(tmp_path / "follower-0") as follower:
        leader.append_as_follower(shared[0])
        follower.append_as_follower(shared[0])
        follower.append_as_follower(leader_batch(5, 1, 3, value=b"lost"))
        follower.update_high_watermark(5)
        leader.maybe_assign_epoch_start_offset(2, leader.log_end_offset)
        leader.append(client(2), leader_epoch=2)
        # OffsetsForLeaderEpoch: the follower asks where its latest epoch ended.
        epoch, end_offset = leader.end_offset_for_epoch(follower.latest_epoch)
        assert (epoch, end_offset) == (1, 5)
        follower.truncate_to(min(end_offset, follower.log_end_offset))
        assert follower.log_end_offset == 5
        assert follower.leader_epoch_cache.entries == [EpochEntry(1, 0)]
        follower.append_as_follower(leader.fetch(5, 1 << 20).data)
        assert read_all(follower) == read_all(leader)
        assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [
            EpochEntry(1, 0), EpochEntry(2, 5)
        ]


def test_end_offset_for_an_epoch_older_than_the_log(directory: Path) -> None:
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 3, 2) + leader_batch(2, 5, 2))
        log.maybe_increment_log_start_offset(3)
        assert log.leader_epoch_cache.entries == [EpochEntry(5, 3)]
        assert log.end_offset_for_epoch(4) == (4, 3)  # below every known epoch
        assert log.end_offset_for_epoch(6) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


# ---------------------------------------------------------------- the cache after truncation


def test_truncations_truncate_the_cache(directory: Path) -> None:
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 1, 3) + leader_batch(3, 2, 3) + leader_batch(6, 4, 3))
        log.truncate_to(6)
        assert log.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(2, 3)]
        log.truncate_to(2)
        assert log.leader_epoch_cache.entries == [EpochEntry(1, 0)]
        log.truncate_fully_and_start_at(100)
        assert log.leader_epoch_cache.entries == []
        assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes() == b"0\n0\n"
        log.append_as_follower(leader_batch(100, 7))
        assert log.leader_epoch_cache.entries == [EpochEntry(7, 100)]


def test_retention_moves_the_first_epoch_to_the_new_log_start(directory: Path) -> None:
    one = leader_batch(0, 0)
    clock = Clock()
    with open_log(directory, clock, segment_bytes=2 * len(one), retention_ms=1000) as log:
        for offset in range(6):
            log.append_as_follower(leader_batch(offset, 1 if offset < 3 else 2))
        clock.now_ms = T0 + 5000
        log.update_high_watermark(6)
        log.delete_old_segments()
        assert log.log_start_offset == 6
        assert log.leader_epoch_cache.entries == [EpochEntry(2, 6)]


# ---------------------------------------------------------------- the cache after recovery


def _three_epoch_log(directory: Path) -> list[EpochEntry]:
    with open_log(directory, segment_bytes=200) as log:
        for offset in range(9):
            log.append_as_follower(leader_batch(offset, offset // 3 * 2))
        return log.leader_epoch_cache.entries


def test_a_missing_checkpoint_is_rebuilt_from_the_batches(directory: Path) -> None:
    expected = _three_epoch_log(directory)
    assert expected == [EpochEntry(0, 0), EpochEntry(2, 3), EpochEntry(4, 6)]
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    with open_log(directory) as log:
        assert log.leader_epoch_cache.entries == expected
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes() == b"0\n3\n0 0\n2 3\n4 6\n"


def test_a_corrupt_checkpoint_is_rebuilt_from_the_batches(directory: Path) -> None:
    expected = _three_epoch_log(directory)
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(b"0\n3\n0 0\n2 3")
    with open_log(directory) as log:
        assert log.leader_epoch_cache.entries == expected


def test_a_checkpoint_behind_the_log_is_completed_from_the_batches(directory: Path) -> None:
    expected = _three_epoch_log(directory)
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(b"0\n1\n0 0\n")
    with open_log(directory) as log:
        assert log.leader_epoch_cache.entries == expected


def test_stale_entries_past_the_log_end_are_cut_at_open(directory: Path) -> None:
    # A crash after an assign but before the write (or before a truncation's flush).
    _three_epoch_log(directory)
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(b"0\n4\n0 0\n2 3\n4 6\n9 9\n")
    with open_log(directory) as log:
        assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 3),
                                                  EpochEntry(4, 6)]
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes() == b"0\n3\n0 0\n2 3\n4 6\n"


def test_an_epoch_that_wrote_nothing_is_dropped_at_open(directory: Path) -> None:
    # Kafka's loader cuts the cache at the log end (Kafka LogLoader.load;
    # docs/kafka-behaviours.md#log-loading): an epoch a leader assigned at its log end (makeLeader)
    # and never wrote in is gone after a restart; the replication layer assigns the epoch again when
    # it makes the replica leader.
    _three_epoch_log(directory)
    with open_log(directory) as log:
        log.maybe_assign_epoch_start_offset(9, log.log_end_offset)
        assert log.end_offset_for_epoch(4) == (4, 9)
    with open_log(directory) as log:
        assert log.latest_epoch == 4
        assert log.end_offset_for_epoch(4) == (4, 9)


def test_a_torn_tail_cut_by_recovery_takes_its_epoch_with_it(directory: Path) -> None:
    with open_log(directory) as log:
        log.append_as_follower(leader_batch(0, 1, 2))
        log.append_as_follower(leader_batch(2, 3, 2))
    segment = directory / "00000000000000000000.log"
    data = segment.read_bytes()
    segment.write_bytes(data[:-5])  # the epoch-3 batch is torn
    with open_log(directory) as log:
        assert log.log_end_offset == 2
        assert log.leader_epoch_cache.entries == [EpochEntry(1, 0)]


# ---------------------------------------------------------------- the high watermark


def test_a_single_server_log_has_its_log_end_as_high_watermark(directory: Path) -> None:
    with open_log(directory) as log:
        log.append(client(3))
        assert not log.tracks_high_watermark
        assert log.high_watermark == log.log_end_offset == 3
        assert offsets(log.fetch(0, 1 << 20).data) == [0, 1, 2]


def test_high_watermark_maintenance(directory: Path) -> None:
    # Kafka's testHighWatermarkMaintenance.
    with open_log(directory) as log:
        assert log.update_high_watermark(0) == 0
        log.append(client(3))
        assert log.high_watermark == 0  # not moved by an append
        assert log.maybe_increment_high_watermark(1)
        assert log.high_watermark == 1
        assert log.update_high_watermark(5) == 3  # bounded by the log end
        log.append_as_follower(leader_batch(3, 0, 3))
        log.update_high_watermark(6)
        assert log.high_watermark == 6
        log.truncate_to(3)
        assert log.high_watermark == 3
        log.append(client(3))
        assert (log.high_watermark, log.log_end_offset, log.log_start_offset) == (3, 6, 0)
        log.truncate_fully_and_start_at(4)
        assert log.high_watermark == log.log_end_offset == log.log_start_offset == 4


def test_maybe_increment_high_watermark_as_follower(directory: Path) -> None:
    with open_log(directory) as log:
        for _ in range(100):
            log.append(client())
        log.update_high_watermark(0)
        assert log.maybe_increment_high_watermark(99)
        assert not log.maybe_increment_high_watermark(99)
        assert log.maybe_increment_high_watermark(100)
        with pytest.raises(ValueError, match="above its log end offset 100"):
            log.maybe_increment_high_watermark(101)
    with open_log(directory) as log, pytest.raises(ValueError, match="update_high_watermark"):
        log.maybe_increment_high_watermark(1)


def test_fetch_up_to_high_watermark(directory: Path) -> None:
    # Kafka's testFetchUpToHighWatermark: reads bounded by the HW return nothing at or above
    # it, and every record they return is below it.
    with open_log(directory) as log:
        log.append(client(3))
        log.append(client(2))

        def assert_bounded_fetches() -> None:
            hw = log.high_watermark
            for offset in range(log.log_start_offset, hw):
                fetched = log.fetch(offset, 1 << 20, upper_bound=hw)
                assert fetched.data and all(o < hw for o in offsets(fetched.data))
                assert fetched.next_offset <= hw
            for offset in range(hw, log.log_end_offset + 1):
                fetched = log.fetch(offset, 1 << 20, upper_bound=hw)
                assert (fetched.data, fetched.next_offset) == (b"", offset)

        log.update_high_watermark(0)
        assert_bounded_fetches()
        log.update_high_watermark(3)
        assert_bounded_fetches()
        log.update_high_watermark(5)
        assert_bounded_fetches()
        with pytest.raises(OffsetOutOfRangeError):
            log.fetch(6, 100, upper_bound=5)


def test_read_committed_is_bounded_by_the_high_watermark(directory: Path) -> None:
    with open_log(directory) as log:
        log.append(client(3))
        log.append(client(2))
        log.update_high_watermark(3)
        assert log.last_stable_offset == 3
        fetched = log.fetch(0, 1 << 20, isolation_level=IsolationLevel.READ_COMMITTED)
        assert offsets(fetched.data) == [0, 1, 2]


def test_timestamp_lookups_find_only_records_below_the_high_watermark(directory: Path) -> None:
    # Kafka's fetchOffsetForTimestamp bounds every target by the last fetchable offset (the
    # high watermark for READ_UNCOMMITTED); latest is the high watermark itself.
    with open_log(directory) as log:
        log.append(client(3, timestamp=T0))
        log.append(client(2, timestamp=T0 + 1_000))
        # A single server's log: the log end, as before.
        assert log.offset_for_timestamp(-1).offset == 5
        assert log.offset_for_timestamp(T0 + 1_000).offset == 3
        log.update_high_watermark(3)
        assert log.offset_for_timestamp(-1).offset == 3
        assert log.offset_for_timestamp(T0).offset == 0
        assert log.offset_for_timestamp(T0 + 1_000) is None  # records 3 and 4: not yet
        assert log.offset_for_timestamp(-3) is None  # the max timestamp is at 3
        assert log.offset_for_timestamp(-2).offset == 0
        found, fetched = log.fetch_by_timestamp(T0, 1 << 20)
        assert found is not None and found.offset == 0
        assert offsets(fetched.data) == [0, 1, 2] and fetched.next_offset == 3
        found, fetched = log.fetch_by_timestamp(T0 + 500, 1 << 20)
        assert found is None and (fetched.data, fetched.next_offset) == (b"", 3)
        log.update_high_watermark(5)
        found, fetched = log.fetch_by_timestamp(T0 + 500, 1 << 20)
        assert found is not None and found.offset == 3 and offsets(fetched.data) == [3, 4]
        assert log.offset_for_timestamp(-3).offset == 3


def test_cannot_delete_segments_at_or_above_high_watermark(directory: Path) -> None:
    # Kafka's testCannotDeleteSegmentsAtOrAboveHighWatermark.
    clock = Clock()
    one = client(timestamp=T0 - 1000)
    with open_log(directory, clock, segment_bytes=3 * len(one), retention_ms=999) as log:
        for _ in range(30):
            log.append(client(timestamp=T0 - 1000))
        assert len(log.segments) > 5
        log.update_high_watermark(0)
        for hw in range(31):
            log.update_high_watermark(hw)
            log.delete_old_segments()
            assert log.log_start_offset <= hw
            bases = log.segments.base_offsets()
            assert bases[0] <= hw and all(base > hw for base in bases[1:])
        assert log.log_start_offset == 30 and len(log.segments) == 1


def test_cannot_increment_log_start_offset_past_high_watermark(directory: Path) -> None:
    with open_log(directory) as log:
        for _ in range(10):
            log.append(client())
        log.update_high_watermark(5)
        with pytest.raises(OffsetOutOfRangeError, match="above the high watermark 5"):
            log.maybe_increment_log_start_offset(6)
        assert log.maybe_increment_log_start_offset(5)


# ---------------------------------------------------------------- replication-offset-checkpoint


def test_high_watermarks_are_checkpointed_per_log_dir(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0"]
    manager = LogManager.open(dirs, time_ms=Clock())
    manager.create_topic("t", 2)
    for partition in range(2):
        manager.get_log("t", partition).append(client(4))
    manager.run_maintenance(T0 + 6_000)  # past replica.high.watermark.checkpoint.interval.ms
    # A single server: no log tracks a high watermark, no file.
    assert not (dirs[0] / REPLICATION_OFFSET_CHECKPOINT_FILE).exists()
    manager.get_log("t", 1).update_high_watermark(3)
    report = manager.run_maintenance(T0 + 12_000)
    assert report.high_watermark_checkpoints_written == 1
    assert (dirs[0] / REPLICATION_OFFSET_CHECKPOINT_FILE).read_bytes() == b"0\n1\nt 1 3\n"
    manager.get_log("t", 1).maybe_increment_high_watermark(4)
    manager.close()  # written at a clean shutdown too
    assert (dirs[0] / REPLICATION_OFFSET_CHECKPOINT_FILE).read_bytes() == b"0\n1\nt 1 4\n"
    reopened = LogManager.open(dirs, time_ms=Clock())
    try:
        assert reopened.checkpointed_high_watermark("t", 1) == 4
        assert reopened.checkpointed_high_watermark("t", 0) is None
        assert not reopened.get_log("t", 1).tracks_high_watermark  # until told
    finally:
        reopened.close()
