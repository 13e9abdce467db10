"""ProducerStateManager: the cases of Kafka's ProducerStateManagerTest, on our API."""

from __future__ import annotations

import logging

import pytest

from stratalog.records.control import ControlRecordType
from stratalog.records.log_layout import ProducerSnapshotEntry
from stratalog.server.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from stratalog.server.storage.producer_state import (
    INT32_MAX,
    CompletedTxn,
    DuplicateAppend,
    ProducerAppend,
    ProducerBatch,
    ProducerStateManager,
    decrement_sequence,
    increment_sequence,
    list_snapshot_offsets,
)
from tests.unit.storage.test_snapshot_format import parse_snapshot_independently

PID = 1
EXPIRATION_MS = 60 * 60 * 1000


def batch(seq: int, offset: int, *, pid: int = PID, epoch: int = 0, count: int = 1,
          ts: int = 1000, txn: bool = False) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq, offset, offset + count - 1, ts, txn)


def marker(kind: ControlRecordType, offset: int, *, pid: int = PID, epoch: int = 0,
           coordinator_epoch: int = 0, ts: int = 1000) -> ProducerBatch:
    return ProducerBatch(pid, epoch, -1, offset, offset, ts, True, kind, coordinator_epoch)


def append(state: ProducerStateManager, *batches: ProducerBatch) -> ProducerAppend | DuplicateAppend:
    result = state.prepare(batches, batches[-1].last_offset + 1)
    if isinstance(result, ProducerAppend):
        state.apply(result)
    return result


@pytest.fixture
def state(tmp_path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, EXPIRATION_MS)


def test_sequence_helpers_wrap_at_int32_max() -> None:
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(5, 2) == 3


def test_basic_id_mapping_and_sequences(state) -> None:
    append(state, batch(0, 0))
    append(state, batch(1, 1))
    entry = state.last_entry(PID)
    assert entry is not None and entry.last_seq == 1 and entry.last_data_offset == 1
    with pytest.raises(OutOfOrderSequenceError, match="expected 2"):
        state.prepare([batch(3, 2)], 3)


def test_refused_append_changes_nothing(state) -> None:
    append(state, batch(0, 0))
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(1, 1), batch(5, 2)], 3)
    assert state.last_entry(PID).last_seq == 0
    assert state.map_end_offset == 1


def test_duplicate_of_any_of_the_last_five_batches_returns_its_original_offsets(state) -> None:
    for n in range(7):
        append(state, batch(n * 2, n * 10, count=2))
    for n in range(2, 7):  # the last 5 are remembered
        duplicate = state.prepare([batch(n * 2, 100, count=2)], 102)
        assert duplicate == DuplicateAppend(n * 10, n * 10 + 1, 1000)
    # The oldest were forgotten: their sequence is now simply out of order.
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(0, 100, count=2)], 102)


def test_duplicate_needs_the_same_sequence_range(state) -> None:
    append(state, batch(0, 0, count=3))
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(0, 10, count=2)], 12)


def test_mixed_duplicate_and_new_batches_are_refused(state) -> None:
    append(state, batch(0, 0))
    with pytest.raises(OutOfOrderSequenceError, match="mixes"):
        state.prepare([batch(0, 1), batch(1, 2)], 3)


def test_epoch_bump_resets_the_sequence_to_zero(state) -> None:
    append(state, batch(0, 0, epoch=0))
    append(state, batch(1, 1, epoch=0))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        state.prepare([batch(2, 2, epoch=1)], 3)
    append(state, batch(0, 2, epoch=1))
    entry = state.last_entry(PID)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1


def test_old_epoch_is_fenced(state) -> None:
    append(state, batch(0, 0, epoch=3))
    with pytest.raises(InvalidProducerEpochError, match="fenced"):
        state.prepare([batch(1, 1, epoch=2)], 2)


def test_unknown_producer_with_non_zero_sequence(state) -> None:
    with pytest.raises(UnknownProducerIdError):
        state.prepare([batch(5, 0)], 1)
    append(state, batch(0, 0))  # sequence 0 is a fresh start


def test_sequence_wraps_from_int32_max_to_zero(state) -> None:
    append(state, batch(0, 0))
    entry = state.last_entry(PID)
    entry.batches[-1] = entry.batches[-1]._replace(last_seq=INT32_MAX - 2)
    append(state, batch(INT32_MAX - 1, 1, count=2))  # INT32_MAX - 1, INT32_MAX
    assert state.last_entry(PID).last_seq == INT32_MAX
    append(state, batch(0, 3))
    assert state.last_entry(PID).last_seq == 0
    # A batch that wraps inside itself.
    entry = state.last_entry(PID)
    entry.batches[-1] = entry.batches[-1]._replace(last_seq=INT32_MAX - 2)
    append(state, batch(INT32_MAX - 1, 4, count=3))
    assert state.last_entry(PID).last_seq == 0
    assert state.prepare([batch(INT32_MAX - 1, 9, count=3)], 12) == DuplicateAppend(4, 6, 1000)


def test_transactions_first_unstable_offset_and_completion(state) -> None:
    append(state, batch(0, 0, txn=True))
    append(state, batch(0, 1, pid=2, txn=True))
    append(state, batch(1, 2, txn=True))
    assert state.first_unstable_offset == 0
    assert state.ongoing_txns == {0: PID, 1: 2}
    result = append(state, marker(ControlRecordType.ABORT, 3))
    assert result.completed_txns == (CompletedTxn(PID, 0, 3, True),)
    assert state.first_unstable_offset == 1
    assert state.last_entry(PID).current_txn_first_offset == -1
    # The LSO recorded for the abort is the other open transaction's first offset.
    assert state.last_stable_offset_for(CompletedTxn(PID, 0, 3, True)) == 1
    result = append(state, marker(ControlRecordType.COMMIT, 4, pid=2))
    assert result.completed_txns == (CompletedTxn(2, 1, 4, False),)
    assert state.first_unstable_offset is None
    assert state.last_stable_offset_for(CompletedTxn(2, 1, 4, False)) == 5


def test_non_transactional_write_inside_a_transaction_is_refused(state) -> None:
    append(state, batch(0, 0, txn=True))
    with pytest.raises(InvalidTxnStateError):
        state.prepare([batch(1, 1)], 2)


def test_marker_from_an_older_coordinator_epoch_is_fenced(state) -> None:
    append(state, batch(0, 0, txn=True))
    append(state, marker(ControlRecordType.COMMIT, 1, coordinator_epoch=5))
    append(state, batch(1, 2, txn=True))
    with pytest.raises(TransactionCoordinatorFencedError):
        state.prepare([marker(ControlRecordType.ABORT, 3, coordinator_epoch=4)], 4)
    with pytest.raises(InvalidProducerEpochError):
        state.prepare([ProducerBatch(PID, -2, -1, 3, 3, 0, True, ControlRecordType.ABORT, 5)], 4)


def test_marker_with_a_bumped_epoch_fences_the_old_epoch(state) -> None:
    append(state, batch(0, 0, txn=True))
    append(state, marker(ControlRecordType.ABORT, 1, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        state.prepare([batch(1, 2, epoch=0, txn=True)], 3)
    append(state, batch(0, 2, epoch=1, txn=True))


def test_expiry_removes_idle_producers_but_not_open_transactions(state) -> None:
    append(state, batch(0, 0, ts=0))
    append(state, batch(0, 1, pid=2, ts=0, txn=True))
    assert state.remove_expired_producers(EXPIRATION_MS - 1) == []
    assert state.remove_expired_producers(EXPIRATION_MS) == [PID]
    assert state.last_entry(2) is not None
    with pytest.raises(UnknownProducerIdError):
        state.prepare([batch(1, 2)], 3)


# ------------------------------------------------------------------- snapshots


def test_snapshot_bytes_match_the_reference_layout(state, tmp_path) -> None:
    append(state, batch(0, 0, count=3, ts=500))
    append(state, batch(3, 3, count=2, ts=700))
    append(state, batch(0, 5, pid=9, epoch=2, ts=800, txn=True))
    path = state.take_snapshot()
    assert path.name == "00000000000000000006.snapshot"
    assert parse_snapshot_independently(path.read_bytes()) == [
        (PID, 0, 4, 4, 1, 700, -1, -1),
        (9, 2, 0, 5, 0, 800, -1, 5),
    ]


def test_snapshot_write_read_keeps_duplicates_and_transactions(state, tmp_path) -> None:
    append(state, batch(0, 0, count=2))
    append(state, batch(0, 2, pid=9, txn=True))
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert reloaded.load_latest_snapshot(10, 0, now_ms=1000)
    assert reloaded.map_end_offset == 3
    assert reloaded.prepare([batch(0, 3, count=2)], 5) == DuplicateAppend(0, 1, 1000)
    assert reloaded.first_unstable_offset == 2
    assert reloaded.last_entry(9).current_txn_first_offset == 2
    assert reloaded.producers[PID].to_snapshot_entry() == ProducerSnapshotEntry(
        PID, 0, 1, 1, 1, 1000, -1, -1
    )


def test_load_picks_the_latest_snapshot_at_or_below_the_bound(state, tmp_path) -> None:
    append(state, batch(0, 0))
    state.take_snapshot()  # 1
    append(state, batch(1, 1))
    state.take_snapshot()  # 2
    append(state, batch(2, 2))
    state.take_snapshot()  # 3
    assert list_snapshot_offsets(tmp_path) == [1, 2, 3]
    reloaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert reloaded.load_latest_snapshot(2, 0, now_ms=0)
    assert reloaded.map_end_offset == 2 and reloaded.last_entry(PID).last_seq == 1
    assert not reloaded.load_latest_snapshot(0, 0, now_ms=0)
    assert reloaded.map_end_offset == 0 and not reloaded.producers


def test_corrupt_and_truncated_snapshots_are_skipped_with_a_log_line(state, tmp_path, caplog) -> None:
    append(state, batch(0, 0))
    state.take_snapshot()  # 1
    append(state, batch(1, 1))
    good = state.take_snapshot()  # 2
    append(state, batch(2, 2))
    truncated = state.take_snapshot()  # 3
    append(state, batch(3, 3))
    flipped = state.take_snapshot()  # 4
    truncated.write_bytes(truncated.read_bytes()[:20])
    data = bytearray(flipped.read_bytes())
    data[-1] ^= 0xFF
    flipped.write_bytes(bytes(data))
    reloaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    with caplog.at_level(logging.WARNING):
        assert reloaded.load_latest_snapshot(10, 0, now_ms=0)
    assert reloaded.map_end_offset == 2
    assert f"{flipped}" in caplog.text and "CRC" in caplog.text
    assert f"{truncated}" in caplog.text and "declares" in caplog.text
    assert good.exists()


def test_snapshot_load_skips_expired_producers(state, tmp_path) -> None:
    append(state, batch(0, 0, ts=0))
    append(state, batch(0, 1, pid=2, ts=EXPIRATION_MS))
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    reloaded.load_latest_snapshot(10, 0, now_ms=EXPIRATION_MS + 1)
    assert set(reloaded.producers) == {2}


def test_delete_snapshots_below_and_above(state, tmp_path) -> None:
    for offset in range(5):
        append(state, batch(offset, offset))
        state.take_snapshot()
    assert state.delete_snapshots(below=2) == 1 + 0  # offsets 1..5 exist; below 2 is 1
    assert state.delete_snapshots(above=4) == 1
    assert list_snapshot_offsets(tmp_path) == [2, 3, 4]


def test_load_batches_rebuilds_transactions_from_a_scan(state) -> None:
    done = state.load_batches([
        batch(0, 0, txn=True),
        batch(0, 1, pid=2, txn=True),
        marker(ControlRecordType.ABORT, 2),
        batch(1, 3, pid=2, txn=True),
    ], 4)
    # The LSO at the abort is producer 2's open transaction's first offset.
    assert done == [(CompletedTxn(PID, 0, 2, True), 1)]
    assert state.first_unstable_offset == 1
    assert state.map_end_offset == 4


# ------------------------------------------------------------------- more ProducerStateManagerTest


def test_append_txn_marker_with_no_producer_state(state) -> None:
    # testAppendTxnMarkerWithNoProducerState: a marker alone creates the entry, which fences
    # older epochs and wants sequence 0 from the marker's epoch.
    append(state, marker(ControlRecordType.COMMIT, 27, epoch=2))
    entry = state.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq) == (2, -1)
    with pytest.raises(InvalidProducerEpochError):
        state.prepare([batch(0, 28, epoch=0)], 29)
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(17, 28, epoch=2)], 29)
    append(state, batch(0, 28, epoch=2))
    assert state.last_entry(PID).last_seq == 0


def test_control_record_bumps_producer_epoch(state) -> None:
    # testControlRecordBumpsProducerEpoch and testOutOfSequenceAfterControlRecordEpochBump.
    append(state, batch(0, 0, txn=True))
    append(state, batch(1, 1, txn=True))
    append(state, marker(ControlRecordType.ABORT, 2, epoch=1))
    entry = state.last_entry(PID)
    assert (entry.producer_epoch, entry.current_txn_first_offset, entry.last_seq) == (1, -1, -1)
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(2, 3, epoch=1, txn=True)], 4)
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(2, 3, epoch=2, txn=True)], 4)
    append(state, batch(0, 3, epoch=1, txn=True))
    assert (state.last_entry(PID).producer_epoch, state.last_entry(PID).last_seq) == (1, 0)


def test_producer_state_after_a_fencing_abort_marker(state) -> None:
    # testProducerStateAfterFencingAbortMarker: the old epoch's batches are forgotten.
    append(state, batch(0, 0, txn=True))
    append(state, marker(ControlRecordType.ABORT, 1, epoch=1))
    entry = state.last_entry(PID)
    assert entry.current_txn_first_offset == -1 and entry.last_data_offset == -1
    assert state.remove_expired_producers(1000) == []  # it was just written


def test_prepare_does_not_mutate_until_applied(state) -> None:
    # testPrepareUpdateDoesNotMutate.
    first = state.prepare([batch(0, 15, count=6)], 21)
    assert state.last_entry(PID) is None and state.map_end_offset == 0
    state.apply(first)
    second = state.prepare([batch(6, 26, count=5)], 31)
    entry = state.last_entry(PID)
    assert (entry.batches[0].first_seq, entry.last_seq, entry.last_data_offset) == (0, 5, 20)
    state.apply(second)
    entry = state.last_entry(PID)
    assert (entry.batches[0].first_seq, entry.last_seq, entry.last_data_offset) == (0, 10, 30)


def test_a_commit_keeps_the_batch_metadata_for_duplicates(state) -> None:
    # updateProducerTransactionState: a marker of the same epoch leaves the cached batches.
    append(state, batch(0, 9))
    append(state, batch(1, 16, count=5, txn=True))
    append(state, batch(6, 26, count=5, txn=True))
    result = append(state, marker(ControlRecordType.COMMIT, 40, coordinator_epoch=15))
    assert result.completed_txns == (CompletedTxn(PID, 16, 40, False),)
    entry = state.last_entry(PID)
    assert (entry.last_seq, entry.last_data_offset, entry.current_txn_first_offset) == (10, 30, -1)
    assert state.prepare([batch(6, 41, count=5, txn=True)], 46) == DuplicateAppend(26, 30, 1000)


def test_sequence_wrap_after_a_scanned_batch(state) -> None:
    # testProducerSequenceWrapAround, testProducerSequenceInvalidWrapAround and
    # testNoValidationOnFirstEntryWhenLoadingLog: a scan takes any first sequence; a client
    # then continues at 0 after Int32.MAX, and 1 is out of order.
    state.load_batches([batch(INT32_MAX, 735, epoch=15)], 736)
    entry = state.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (15, INT32_MAX, 735)
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(1, 1235, epoch=15)], 1236)
    append(state, batch(0, 1235, epoch=15))
    entry = state.last_entry(PID)
    assert (entry.batches[0].first_seq, entry.last_seq) == (INT32_MAX, 0)


def test_a_scan_accepts_gaps_and_duplicates(state) -> None:
    # testAcceptAppendWithSequenceGapsOnReplica: what the log holds is replayed, unchecked.
    append(state, batch(0, 0))
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare([batch(3, 1)], 2)
    state.load_batches([batch(3, 1), batch(3, 2)], 3)
    assert state.last_entry(PID).last_seq == 3 and state.map_end_offset == 3


def test_recover_from_snapshot_with_unfinished_finished_and_empty_transactions(tmp_path) -> None:
    # testRecoverFromSnapshot{Unfinished,Finished,Empty}Transaction: a snapshot keeps the last
    # batch only, the open transaction, and a marker-only producer's timestamp.
    state = ProducerStateManager(tmp_path, EXPIRATION_MS)
    append(state, batch(0, 0, txn=True))
    append(state, batch(1, 1, txn=True))
    append(state, batch(0, 2, pid=2, txn=True))
    append(state, marker(ControlRecordType.ABORT, 3, pid=2))
    append(state, marker(ControlRecordType.ABORT, 4, pid=3, ts=777))
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert reloaded.load_latest_snapshot(5, 0, now_ms=1000)
    unfinished = reloaded.last_entry(PID)
    assert len(unfinished.batches) == 1
    assert (unfinished.batches[0].first_offset, unfinished.batches[0].first_seq) == (1, 1)
    assert (unfinished.last_data_offset, unfinished.last_seq) == (1, 1)
    assert unfinished.current_txn_first_offset == 0 and reloaded.first_unstable_offset == 0
    append(reloaded, batch(2, 5, txn=True))
    finished = reloaded.last_entry(2)
    assert (finished.last_data_offset, finished.last_seq, finished.current_txn_first_offset) == (
        2, 0, -1)
    empty = reloaded.last_entry(3)
    assert (empty.last_timestamp, empty.current_txn_first_offset, empty.is_empty) == (777, -1, True)


def test_coordinator_fencing_and_after_reload(tmp_path) -> None:
    # testCoordinatorFencing and testCoordinatorFencedAfterReload.
    state = ProducerStateManager(tmp_path, EXPIRATION_MS)
    append(state, batch(0, 99, epoch=5, txn=True))
    append(state, marker(ControlRecordType.COMMIT, 100, epoch=5, coordinator_epoch=1))
    assert state.last_entry(PID).coordinator_epoch == 1
    append(state, marker(ControlRecordType.COMMIT, 101, epoch=5, coordinator_epoch=1))
    append(state, marker(ControlRecordType.COMMIT, 102, epoch=5, coordinator_epoch=2))
    with pytest.raises(TransactionCoordinatorFencedError):
        state.prepare([marker(ControlRecordType.COMMIT, 103, epoch=5, coordinator_epoch=1)], 104)
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    reloaded.load_latest_snapshot(103, 0, now_ms=1000)
    with pytest.raises(TransactionCoordinatorFencedError):
        reloaded.prepare([marker(ControlRecordType.ABORT, 103, epoch=5, coordinator_epoch=1)], 104)


def test_last_stable_offset_of_completed_transactions(state) -> None:
    # testLastStableOffsetCompletedTxn: the LSO recorded for a completed transaction is the
    # first offset of the earliest other open one.
    append(state, batch(0, 992342, pid=1, txn=True))
    append(state, batch(0, 992367, pid=2, txn=True))
    append(state, batch(0, 992399, pid=3, txn=True))
    done1 = CompletedTxn(1, 992342, 992414, False)
    assert state.last_stable_offset_for(done1) == 992367
    append(state, marker(ControlRecordType.COMMIT, 992414, pid=1))
    assert state.first_unstable_offset == 992367
    done3 = CompletedTxn(3, 992399, 992434, False)
    assert state.last_stable_offset_for(done3) == 992367
    append(state, marker(ControlRecordType.COMMIT, 992434, pid=3))
    assert state.first_unstable_offset == 992367
    done2 = CompletedTxn(2, 992367, 992512, False)
    assert state.last_stable_offset_for(done2) == 992513
    append(state, marker(ControlRecordType.COMMIT, 992512, pid=2))
    assert state.first_unstable_offset is None


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "version"])
def test_a_damaged_snapshot_is_deleted_and_the_previous_one_loaded(
    state, tmp_path, damage, caplog
) -> None:
    # testLoadFrom{Empty,Truncated,Corrupt}SnapshotFile, and a version Kafka's readSnapshot
    # does not know (it supports 1 only).
    append(state, batch(0, 0))
    state.take_snapshot()  # 1
    append(state, batch(1, 1))
    latest = state.take_snapshot()  # 2
    data = latest.read_bytes()
    latest.write_bytes({
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "garbage": data[:20] + bytes(37) + data[57:],
        "version": b"\x00\x02" + data[2:],
    }[damage])
    reloaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    with caplog.at_level(logging.WARNING):
        assert reloaded.load_latest_snapshot(20, 0, now_ms=1000)
    assert str(latest) in caplog.text
    assert not latest.exists()
    assert reloaded.map_end_offset == 1 and reloaded.last_entry(PID).last_data_offset == 0
