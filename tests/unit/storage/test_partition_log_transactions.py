"""PartitionLog with producer state: idempotent appends, transaction markers, the LSO and
read_committed fetches (the read_committed cases of Kafka's UnifiedLogTest), snapshots and
recovery of producer state after a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratalog.records.batch import iter_batch_headers
from stratalog.records.builder import build_batch
from stratalog.records.control import ControlRecordType, EndTransactionMarker
from stratalog.records.errors import InvalidRecordError
from stratalog.records.reader import iter_batches
from stratalog.server.storage import PartitionLog
from stratalog.server.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from stratalog.server.storage.partition_log import (
    DeferredAppend,
    IsolationLevel,
    WouldBlock,
)
from stratalog.server.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000
COMMITTED = IsolationLevel.READ_COMMITTED


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def pbatch(pid: int, seq: int, count: int = 1, *, epoch: int = 0, txn: bool = False,
           value: bytes = b"v", ts: int = T0) -> bytes:
    """A client batch with producer fields, built as a producer builds it."""
    return build_batch(
        [(ts, None, value, ())] * count,
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
    )


def open_log(directory: Path, clock: Clock | None = None, **config: object) -> PartitionLog:
    return PartitionLog.open(directory, config or None, time_ms=clock or Clock())


def values(data: bytes) -> list[bytes | None]:
    return [
        record.value for header, records in iter_batches(data) if not header.is_control
        for record in records
    ]


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


# ------------------------------------------------------------------- idempotent appends


def test_duplicate_append_returns_original_offsets_and_writes_nothing(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(7, 0, 3))
        first = log.append(pbatch(7, 3, 2))
        size = log.size_bytes
        again = log.append(pbatch(7, 3, 2))
        assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
        assert again.duplicate and not first.duplicate
        assert log.size_bytes == size and log.log_end_offset == 5


def test_sequence_errors_write_nothing(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(7, 0, 2, epoch=1))
        with pytest.raises(OutOfOrderSequenceError):
            log.append(pbatch(7, 5, epoch=1))
        with pytest.raises(InvalidProducerEpochError):
            log.append(pbatch(7, 2, epoch=0))
        with pytest.raises(UnknownProducerIdError):
            log.append(pbatch(8, 4))
        with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
            log.append(pbatch(7, 2, epoch=2))
        assert log.log_end_offset == 2
        log.append(pbatch(7, 0, epoch=2))  # an epoch bump restarts at 0
        assert log.log_end_offset == 3


def test_batches_without_producer_id_are_untouched(directory) -> None:
    with open_log(directory) as log:
        plain = build_batch([(T0, None, b"x", ())])
        assert log.append(plain).first_offset == 0
        assert log.append(plain).first_offset == 1  # no dedup without a producer id
        assert not log.producer_state.producers


def test_client_control_batches_are_still_refused(directory) -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    batch = build_batch([(T0, marker.encode_key(), marker.encode_value(), ())],
                        producer_id=1, producer_epoch=0, is_transactional=True, is_control=True)
    with open_log(directory) as log, pytest.raises(InvalidRecordError, match="control"):
        log.append(batch)


def test_non_blocking_append_detects_duplicates_and_defers_rolls(directory) -> None:
    with open_log(directory, **{"segment.bytes": 100}) as log:  # one batch per segment
        info = log.try_append_without_blocking(pbatch(7, 0))
        if isinstance(info, DeferredAppend):  # the first append opens the indexes
            assert info.reason is WouldBlock.OPEN_INDEXES
            info = log.append_deferred(info)
        again = log.try_append_without_blocking(pbatch(7, 0))
        assert not isinstance(again, DeferredAppend) and again.duplicate
        assert again.first_offset == info.first_offset
        deferred = log.try_append_without_blocking(pbatch(7, 1))
        assert isinstance(deferred, DeferredAppend) and deferred.reason is WouldBlock.ROLL
        assert log.append_deferred(deferred).first_offset == 1
        # A deferred append that became a duplicate meanwhile is acknowledged, not written.
        deferred = log.try_append_without_blocking(pbatch(7, 2))
        assert isinstance(deferred, DeferredAppend)
        log.append(pbatch(7, 2))
        assert log.append_deferred(deferred).duplicate
        assert log.log_end_offset == 3


# ------------------------------------------------------------------- transactions


def test_markers_complete_transactions_and_move_the_lso(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(1, 0, 2, txn=True))  # 0-1
        assert log.last_stable_offset == 0
        log.append(pbatch(2, 0, 1, txn=True))  # 2
        log.append(build_batch([(T0, None, b"plain", ())]))  # 3
        commit = log.write_txn_marker(1, 0, coordinator_epoch=0, commit=True)  # 4
        assert commit.first_offset == 4
        assert log.last_stable_offset == 2
        abort = log.write_txn_marker(2, 0, coordinator_epoch=0, commit=False)  # 5
        assert abort.first_offset == 5
        assert log.last_stable_offset == log.log_end_offset == 6
        assert log.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(2, 2, 5, 6)]
        headers = list(iter_batch_headers(log.read(0, 1 << 20)))
        assert [(h.base_offset, h.is_control, h.is_transactional) for h in headers][-2:] == [
            (4, True, True), (5, True, True)
        ]


def test_aborted_txn_lso_is_the_earliest_other_open_transaction(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(1, 0, txn=True))  # 0
        log.append(pbatch(2, 0, txn=True))  # 1
        log.write_txn_marker(2, 0, 0, commit=False)  # 2
        assert log.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(2, 1, 2, 0)]


def test_marker_errors(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(1, 0, epoch=3, txn=True))
        with pytest.raises(InvalidProducerEpochError):
            log.write_txn_marker(1, 2, 0, commit=True)
        log.write_txn_marker(1, 3, 5, commit=True)
        with pytest.raises(TransactionCoordinatorFencedError):
            log.write_txn_marker(1, 3, 4, commit=False)
        log.append(pbatch(1, 1, epoch=3, txn=True))
        with pytest.raises(InvalidTxnStateError):
            log.append(pbatch(1, 2, epoch=3))
        with pytest.raises(ValueError):
            log.write_txn_marker(-1, 0, 0, commit=True)


def test_read_committed_stops_at_the_lso_and_returns_aborted_txns(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(1, 0, 2, txn=True, value=b"aborted"))  # 0-1
        log.append(build_batch([(T0, None, b"plain", ())]))  # 2
        log.write_txn_marker(1, 0, 0, commit=False)  # 3
        log.append(pbatch(2, 0, txn=True, value=b"open"))  # 4
        log.append(build_batch([(T0, None, b"after", ())]))  # 5
        assert log.last_stable_offset == 4
        uncommitted = log.fetch(0, 1 << 20)
        assert values(uncommitted.data) == [b"aborted", b"aborted", b"plain", b"open", b"after"]
        assert uncommitted.aborted_transactions == ()
        committed = log.fetch(0, 1 << 20, isolation_level=COMMITTED)
        assert values(committed.data) == [b"aborted", b"aborted", b"plain"]
        assert committed.next_offset == 4
        assert committed.aborted_transactions == (AbortedTxn(1, 0, 3, 4),)
        assert log.fetch(4, 1 << 20, isolation_level=COMMITTED).data == b""
        # A fetch after the aborted transaction gets no entry for it.
        log.write_txn_marker(2, 0, 0, commit=True)  # 6
        later = log.fetch(4, 1 << 20, isolation_level=COMMITTED)
        assert values(later.data) == [b"open", b"after"]
        assert later.aborted_transactions == ()
        assert log.offset_for_timestamp(-1, isolation_level=COMMITTED).offset == 7


def test_read_committed_collects_aborted_txns_across_segments(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(1, 0, txn=True))  # 0
        log.roll()
        log.append(pbatch(2, 0, txn=True))  # 1
        log.write_txn_marker(2, 0, 0, commit=False)  # 2, in segment 1
        log.roll()
        log.write_txn_marker(1, 0, 0, commit=False)  # 3, in segment 3
        fetched = log.fetch(0, 1 << 20, isolation_level=COMMITTED)
        assert fetched.next_offset == 1  # one segment per fetch
        assert fetched.aborted_transactions == (AbortedTxn(1, 0, 3, 4),)
        fetched = log.fetch(1, 1 << 20, isolation_level=COMMITTED)
        assert fetched.aborted_transactions == (AbortedTxn(2, 1, 2, 0), AbortedTxn(1, 0, 3, 4))


def test_lso_with_only_uncommitted_data_hides_everything(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(1, 0, 3, txn=True))
        fetched = log.fetch(0, 1 << 20, isolation_level=COMMITTED)
        assert (fetched.data, fetched.next_offset, fetched.records_count) == (b"", 0, 0)
        assert log.offset_for_timestamp(-1, isolation_level=COMMITTED).offset == 0
        assert log.offset_for_timestamp(-1).offset == 3
