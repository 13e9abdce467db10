"""PartitionLog with producer state: idempotent appends, transaction markers, the LSO and
read_committed fetches (the read_committed cases of Kafka's UnifiedLogTest), snapshots and
recovery of producer state after a crash."""

from __future__ import annotations

import errno
import os
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
    LogDirOfflineError,
    OutOfOrderSequenceError,
    StorageIOError,
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


def test_read_committed_timestamp_lookups_match_only_below_the_lso(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(1, 0, txn=True, value=b"aborted", ts=T0 + 1))  # 0
        log.write_txn_marker(1, 0, 0, commit=False)  # 1
        log.append(build_batch([(T0 + 2, None, b"plain", ())]))  # 2
        log.append(pbatch(2, 0, txn=True, value=b"open", ts=T0 + 3))  # 3
        log.append(build_batch([(T0 + 4, None, b"after", ())]))  # 4
        assert log.last_stable_offset == 3
        # A match below the LSO: the batches from it, cut at the LSO.
        found, fetched = log.fetch_by_timestamp(T0 + 2, 1 << 20, isolation_level=COMMITTED)
        assert (found.offset, found.timestamp) == (2, T0 + 2)
        assert values(fetched.data) == [b"plain"] and fetched.next_offset == 3
        # From the first record: the aborted transaction comes with it.
        found, fetched = log.fetch_by_timestamp(T0, 1 << 20, isolation_level=COMMITTED)
        assert found.offset == 0
        assert fetched.aborted_transactions == (AbortedTxn(1, 0, 1, 2),)
        # The first record at or after T0 + 3 is in the open transaction: no match, and the
        # reader is told to go on from the LSO.
        found, fetched = log.fetch_by_timestamp(T0 + 3, 1 << 20, isolation_level=COMMITTED)
        assert found is None and (fetched.data, fetched.next_offset) == (b"", 3)
        assert log.fetch_by_timestamp(T0 + 3, 1 << 20)[0].offset == 3
        assert log.offset_for_timestamp(T0 + 3, isolation_level=COMMITTED) is None
        assert log.offset_for_timestamp(T0 + 2, isolation_level=COMMITTED).offset == 2
        # Max timestamp is filtered as Kafka filters it; earliest is not.
        assert log.offset_for_timestamp(-3).offset == 4
        assert log.offset_for_timestamp(-3, isolation_level=COMMITTED) is None
        assert log.offset_for_timestamp(-2, isolation_level=COMMITTED).offset == 0
        log.write_txn_marker(2, 0, 0, commit=True)  # 5
        assert log.offset_for_timestamp(-3, isolation_level=COMMITTED).offset == 4
        assert log.fetch_by_timestamp(T0 + 3, 1 << 20, isolation_level=COMMITTED)[0].offset == 3


class Verifier:
    """A transaction verifier that accepts the producers in ``allowed`` and records its calls."""

    def __init__(self, *allowed: tuple[int, int]) -> None:
        self.allowed = set(allowed)
        self.calls: list[tuple[int, int]] = []

    def __call__(self, producer_id: int, producer_epoch: int) -> None:
        self.calls.append((producer_id, producer_epoch))
        if (producer_id, producer_epoch) not in self.allowed:
            raise LookupError(f"producer {producer_id} epoch {producer_epoch} not verified")


def test_the_verifier_sees_every_transactional_batch_and_only_those(directory) -> None:
    verify = Verifier((1, 0))
    with open_log(directory) as log:
        log.append(build_batch([(T0, None, b"plain", ())]), verify_transaction=verify)
        log.append(pbatch(5, 0), verify_transaction=verify)  # idempotent, not transactional
        assert verify.calls == []
        log.append(pbatch(1, 0, txn=True) + pbatch(1, 1, txn=True), verify_transaction=verify)
        assert verify.calls == [(1, 0), (1, 0)]
        # Markers are the coordinator's own: never verified.
        log.write_txn_marker(1, 0, 0, commit=True)
        assert verify.calls == [(1, 0), (1, 0)]


def test_a_refused_transactional_batch_writes_nothing_on_every_append_path(directory) -> None:
    verify = Verifier()
    with open_log(directory, **{"segment.bytes": 300}) as log:
        log.append(build_batch([(T0, None, b"x" * 50, ())]))
        end, size = log.log_end_offset, log.size_bytes
        with pytest.raises(LookupError):
            log.append(pbatch(1, 0, txn=True), verify_transaction=verify)
        with pytest.raises(LookupError):
            log.try_append_without_blocking(pbatch(1, 0, txn=True), verify_transaction=verify)
        assert (log.log_end_offset, log.size_bytes) == (end, size)
        assert log.last_stable_offset == end and not log.producer_state.producers
        # A deferred append is verified again when it is carried out: the coordinator may have
        # ended the transaction meanwhile.
        verify.allowed.add((1, 0))
        deferred = log.try_append_without_blocking(pbatch(1, 0, txn=True, value=b"y" * 150),
                                                   verify_transaction=verify)
        assert isinstance(deferred, DeferredAppend) and deferred.reason is WouldBlock.ROLL
        verify.allowed.clear()
        with pytest.raises(LookupError):
            log.append_deferred(deferred)
        assert log.log_end_offset == end
        verify.allowed.add((1, 0))
        assert log.append_deferred(deferred).first_offset == end
        assert log.last_stable_offset == end


# ------------------------------------------------------------------- snapshots and recovery


def snapshot_names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.snapshot"))


def test_snapshots_on_roll_and_clean_close_in_kafka_format(directory) -> None:
    from tests.unit.storage.test_snapshot_format import parse_snapshot_independently

    log = open_log(directory)
    log.append(pbatch(7, 0, 2, ts=T0 + 5))  # 0-1
    log.roll()
    assert snapshot_names(directory) == ["00000000000000000002.snapshot"]
    log.append(pbatch(9, 0, 1, epoch=4, txn=True, ts=T0 + 6))  # 2
    log.close()
    assert snapshot_names(directory) == [
        "00000000000000000002.snapshot", "00000000000000000003.snapshot"
    ]
    entries = parse_snapshot_independently((directory / "00000000000000000003.snapshot").read_bytes())
    assert entries == [(7, 0, 1, 1, 1, T0 + 5, -1, -1), (9, 4, 0, 2, 0, T0 + 6, -1, 2)]


def test_clean_reopen_loads_the_snapshot(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(7, 0, 2))
        log.append(pbatch(9, 0, txn=True))
    reopened = PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=True)
    with reopened:
        assert reopened.append(pbatch(7, 0, 2)).duplicate
        assert reopened.last_stable_offset == 2
        with pytest.raises(OutOfOrderSequenceError):
            reopened.append(pbatch(7, 5))


def test_every_roll_writes_a_snapshot_even_without_producers(directory) -> None:
    # Kafka's UnifiedLog.roll takes a snapshot whatever the producers: for a log that never
    # had one, an empty snapshot (version 1, its CRC, 0 entries: 10 bytes).
    from tests.unit.storage.test_snapshot_format import parse_snapshot_independently

    with open_log(directory) as log:
        plain(log, 1)  # 0
        log.roll()
        plain(log, 1)  # 1
        plain(log, 1)  # 2
        log.roll()
        plain(log, 1)  # 3
        assert snapshot_names(directory) == [f"{n:020d}.snapshot" for n in (1, 3)]
    # The clean close writes one at the log end too, as it does once a snapshot exists.
    assert snapshot_names(directory) == [f"{n:020d}.snapshot" for n in (1, 3, 4)]
    for name in snapshot_names(directory):
        assert parse_snapshot_independently((directory / name).read_bytes()) == []
    # An unclean open loads the roll's snapshot below the recovered segment; an empty state
    # scanned from there is not written again.
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=False,
                           recovery_point=3) as log:
        assert log.recovered_segments == 1
        assert log.producer_state.producers == {}
        assert log.log_end_offset == 4
        assert snapshot_names(directory) == [f"{n:020d}.snapshot" for n in (1, 3, 4)]
        # A truncation deletes those above its point and writes the state there, as with
        # producers (test_truncation_reloads_producer_state).
        log.truncate_to(2)
        assert snapshot_names(directory) == [f"{n:020d}.snapshot" for n in (1, 2)]
        assert parse_snapshot_independently((directory / f"{2:020d}.snapshot").read_bytes()) == []
        log.truncate_fully_and_start_at(10)
        assert snapshot_names(directory) == []


def test_an_unclean_open_scans_from_the_empty_snapshot_of_the_latest_roll(
    directory, tmp_path
) -> None:
    # What the empty snapshot is for: an unclean open starts its scan at the latest roll at or
    # below the recovered segment instead of walking every segment from the log start. Seen
    # here through a producer that expired before the roll: the roll's snapshot says "no
    # producer", so the open does not meet its batch; without that snapshot (as when rolls
    # wrote none for a log without producers) the scan from the log start brings it back.
    import shutil

    clock = Clock()
    with open_log(directory, clock) as log:
        log.append(pbatch(7, 0))  # 0
        clock.now_ms = T0 + 86_400_000
        assert log.remove_expired_producers() == [7]
        log.roll()
        plain(log, 2)  # 1-2
        # A crash now: the directory as the page cache holds it (no close, no snapshot at
        # the end), twice, one copy without the roll's snapshot.
        crashed, without = tmp_path / "crashed" / "t-0", tmp_path / "without" / "t-0"
        shutil.copytree(directory, crashed)
        shutil.copytree(directory, without)
    assert snapshot_names(crashed) == ["00000000000000000001.snapshot"]
    (without / "00000000000000000001.snapshot").unlink()
    for where, known in ((crashed, set()), (without, {7})):
        with PartitionLog.open(where, time_ms=clock, had_clean_shutdown=False,
                               recovery_point=1) as log:
            assert log.recovered_segments == 1
            assert set(log.producer_state.producers) == known


_CRASHING_WRITER = r"""
import os, signal, sys
from stratalog.records.builder import build_batch
from stratalog.server.storage import PartitionLog

T0 = 1_700_000_000_000

def pbatch(pid, seq, count=1, txn=False, value=b"v"):
    return build_batch([(T0, None, value, ())] * count, producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=txn)

log = PartitionLog.open(sys.argv[1], {"segment.bytes": "400"}, time_ms=lambda: T0)
seq = 0
for i in range(6):
    log.append(pbatch(7, seq, 2)); seq += 2
log.append(pbatch(8, 0, 1, txn=True, value=b"aborted"))
log.append(pbatch(7, seq, 2)); seq += 2
log.write_txn_marker(8, 0, 0, commit=False)
log.append(pbatch(8, 1, 1, txn=True, value=b"open"))
log.append(pbatch(7, seq, 2))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_kill_then_reopen_rebuilds_producer_state_from_snapshot_and_scan(directory, tmp_path) -> None:
    import subprocess
    import sys

    script = tmp_path / "writer.py"
    script.write_text(_CRASHING_WRITER)
    result = subprocess.run([sys.executable, str(script), str(directory)], check=False)
    assert result.returncode == -9
    snapshots = snapshot_names(directory)
    assert snapshots  # rolls wrote some; the newest state is only in the log
    txn_indexes = sorted(directory.glob("*.txnindex"))
    assert txn_indexes
    for path in txn_indexes:
        path.unlink()  # recovery must rebuild them from the ABORT markers it scans
    log = PartitionLog.open(directory, {"segment.bytes": "400"}, time_ms=Clock(),
                            had_clean_shutdown=False, recovery_point=0)
    with log:
        end = log.log_end_offset
        assert end == 12 + 1 + 2 + 1 + 1 + 2
        # The last batch of producer 7 (sequences 14-15) and an older one (4-5) are duplicates.
        last = log.append(pbatch(7, 14, 2))
        assert last.duplicate and (last.first_offset, last.last_offset) == (end - 2, end - 1)
        assert log.append(pbatch(7, 12, 2)).duplicate
        assert log.log_end_offset == end
        with pytest.raises(OutOfOrderSequenceError):
            log.append(pbatch(7, 17))
        # The open transaction of producer 8 holds the LSO; the aborted one is indexed again.
        assert log.last_stable_offset == 16
        aborted = [txn for segment in log.segments for txn in segment.txn_index.all_aborted_txns()]
        assert aborted == [AbortedTxn(8, 12, 15, 16)]
        committed = log.fetch(12, 1 << 20, isolation_level=COMMITTED)
        assert AbortedTxn(8, 12, 15, 16) in committed.aborted_transactions
        log.write_txn_marker(8, 0, 0, commit=True)
        assert log.last_stable_offset == log.log_end_offset


def test_corrupt_snapshot_is_skipped_and_state_rebuilt_from_the_log(directory, caplog) -> None:
    with open_log(directory) as log:
        log.append(pbatch(7, 0, 2))
        log.roll()
        log.append(pbatch(7, 2, 2))
    newest = directory / "00000000000000000004.snapshot"
    newest.write_bytes(newest.read_bytes()[:-3])
    oldest = directory / "00000000000000000002.snapshot"
    oldest.write_bytes(b"\x00\x01garbage")
    with caplog.at_level("WARNING"):
        reopened = PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=True)
    with reopened:
        assert str(newest) in caplog.text and str(oldest) in caplog.text
        assert reopened.append(pbatch(7, 0, 2)).duplicate
        assert reopened.append(pbatch(7, 2, 2)).duplicate
        assert reopened.append(pbatch(7, 4)).first_offset == 4


def test_truncation_reloads_producer_state(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(7, 0, 2))  # 0-1
        log.roll()
        log.append(pbatch(7, 2, 2))  # 2-3
        log.roll()
        log.append(pbatch(7, 4, 2))  # 4-5
        assert snapshot_names(directory)[-1] == "00000000000000000004.snapshot"
        log.truncate_to(3)
        assert snapshot_names(directory) == ["00000000000000000002.snapshot"]
        # The batch 2-3 was cut (truncation is batch-granular; the log end is 3): sequence 2
        # is the next one again, 4 is out of order.
        with pytest.raises(OutOfOrderSequenceError):
            log.append(pbatch(7, 4))
        assert log.append(pbatch(7, 2, 2)).first_offset == 3
        log.truncate_fully_and_start_at(10)
        assert snapshot_names(directory) == []
        assert not log.producer_state.producers


def test_truncation_below_a_marker_reopens_the_transaction(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(7, 0, txn=True))  # 0
        log.write_txn_marker(7, 0, 0, commit=False)  # 1
        log.truncate_to(1)
        assert log.last_stable_offset == 0
        assert log.active_segment.txn_index.all_aborted_txns() == []


@pytest.mark.parametrize("producers", [True, False])
def test_snapshots_below_the_log_start_are_deleted(directory, producers) -> None:
    # With or without producers: every roll wrote one, each goes with its segment.
    clock = Clock()
    with open_log(directory, clock, **{"file.delete.delay.ms": "0"}) as log:
        for seq in range(4):
            log.append(pbatch(7, seq) if producers else build_batch([(T0, None, b"p", ())]))
            log.roll()
        assert snapshot_names(directory) == [f"{n:020d}.snapshot" for n in (1, 2, 3, 4)]
        log.maybe_increment_log_start_offset(2)  # DeleteRecords
        assert snapshot_names(directory) == [f"{n:020d}.snapshot" for n in (2, 3, 4)]
        log.update_config(log.config.__class__(retention_ms=1, file_delete_delay_ms=0))
        clock.now_ms = T0 + 10_000  # every closed segment is past retention.ms
        log.delete_old_segments()
        assert log.log_start_offset == 4
        assert snapshot_names(directory) == ["00000000000000000004.snapshot"]


def test_producers_expire_in_the_log_managers_maintenance_pass(tmp_path) -> None:
    from stratalog.server.storage import LogManager

    clock = Clock()
    manager = LogManager.open([tmp_path / "data"], time_ms=clock, defaults={
        "producer.id.expiration.ms": "1000", "producer.id.expiration.check.interval.ms": "10",
    })
    try:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append(pbatch(7, 0, ts=T0))
        log.append(pbatch(8, 0, ts=T0, txn=True))
        clock.now_ms = T0 + 1000
        report = manager.run_maintenance()
        assert report.producers_expired == 1
        assert set(log.producer_state.producers) == {8}  # an open transaction never expires
        with pytest.raises(UnknownProducerIdError):
            log.append(pbatch(7, 1, ts=T0 + 1000))
    finally:
        manager.close()


def test_open_deletes_snapshots_above_the_log_end(directory) -> None:
    with open_log(directory) as log:
        log.append(pbatch(7, 0))
    stray = directory / "00000000000000000099.snapshot"
    stray.write_bytes((directory / "00000000000000000001.snapshot").read_bytes())
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=True) as log:
        assert not stray.exists()
        assert log.append(pbatch(7, 0)).duplicate


# ------------------------------------------------------------------- more of Kafka's cases


class Txn:
    """LogTestUtils.appendTransactionalAsLeader: count records in one transactional batch of a
    producer, sequences kept."""

    def __init__(self, log: PartitionLog, pid: int, epoch: int = 0) -> None:
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def __call__(self, count: int) -> None:
        self.log.append(pbatch(self.pid, self.seq, count, epoch=self.epoch, txn=True))
        self.seq += count


def plain(log: PartitionLog, count: int) -> None:
    log.append(build_batch([(T0, None, b"p", ())] * count))


def test_last_stable_offset_does_not_go_below_the_log_start_offset(directory) -> None:
    # UnifiedLogTest.testLastStableOffsetDoesNotExceedLogStartOffset{MidSegment,AfterSegmentDeletion}
    with open_log(directory, **{"file.delete.delay.ms": "0"}) as log:
        append = Txn(log, 1)
        append(5)
        plain(log, 3)
        log.roll()
        append(5)
        assert log.last_stable_offset == 0
        log.maybe_increment_log_start_offset(5)
        assert log.last_stable_offset == 5
        assert log.offset_for_timestamp(-1, isolation_level=COMMITTED).offset == 5
        assert log.fetch(5, 1 << 20, isolation_level=COMMITTED).data == b""
        log.maybe_increment_log_start_offset(8)
        log.delete_old_segments()
        assert len(log.segments) == 1
        assert log.last_stable_offset == 8


def test_a_failed_txn_index_write_writes_no_marker(directory, tmp_path) -> None:
    # UnifiedLogTest.testAppendToTransactionIndexFailure. Kafka's marker reaches the log, the
    # index write fails and the log directory goes offline; here the index entry is written
    # first, so its failure leaves nothing written, and a retry once the index works succeeds.
    with open_log(directory) as log:
        Txn(log, 1)(10)
        size = log.size_bytes
        index = log.active_segment.txn_index
        good = index.path
        index.rename_to(tmp_path / "missing" / good.name)  # cannot be created there
        for _ in range(2):
            with pytest.raises(StorageIOError):
                log.write_txn_marker(1, 0, coordinator_epoch=1, commit=False)
            assert (log.log_end_offset, log.last_stable_offset, log.size_bytes) == (10, 0, size)
        index.rename_to(good)
        assert log.write_txn_marker(1, 0, coordinator_epoch=1, commit=False).first_offset == 10
        plain(log, 1)
        assert log.last_stable_offset == log.log_end_offset == 12
        assert [h.base_offset for h in iter_batch_headers(log.read(0, 1 << 20))] == [0, 10, 11]
    reopened = PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=False,
                                 recovery_point=0)
    with reopened:
        assert reopened.log_end_offset == 12
        assert reopened.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(1, 0, 10, 11)]
        assert reopened.last_stable_offset == 12


def test_recovery_takes_the_latest_coordinator_epoch_even_if_it_went_back(directory) -> None:
    # LogLoaderTest.testRecoverAfterNonMonotonicCoordinatorEpochWrite (KAFKA-9144): the
    # producer expired between two markers, so the second, from an older coordinator epoch,
    # was accepted; a scan of the log replays both and keeps the latest, as the live log did.
    clock = Clock()
    day_ms = 86_400_000
    log = open_log(directory, clock)
    log.write_txn_marker(1, 0, coordinator_epoch=5, commit=False)
    clock.now_ms = T0 + day_ms
    assert log.remove_expired_producers() == [1]
    log.write_txn_marker(1, 0, coordinator_epoch=4, commit=False)
    log.close()
    with PartitionLog.open(directory, time_ms=clock, had_clean_shutdown=False,
                           recovery_point=0) as reopened:
        entry = reopened.producer_state.last_entry(1)
        assert (entry.last_timestamp, entry.coordinator_epoch) == (T0 + day_ms, 4)
        reopened.write_txn_marker(1, 0, coordinator_epoch=4, commit=True)
        with pytest.raises(TransactionCoordinatorFencedError):
            reopened.write_txn_marker(1, 0, coordinator_epoch=3, commit=True)


@pytest.mark.parametrize("how", ["truncate_to", "truncate_fully_and_start_at"])
def test_truncation_below_the_first_unstable_offset(directory, how) -> None:
    # UnifiedLogTest.testTruncateBelowFirstUnstableOffset, testTruncateFullyAndStart...: after
    # a reopen (the state came from the snapshot), truncating below the open transaction
    # forgets it.
    with open_log(directory) as log:
        plain(log, 3)
        log.append(pbatch(17, 0, 2, epoch=10, txn=True))  # 3-4
        assert log.last_stable_offset == 3
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=True) as log:
        assert log.producer_state.first_unstable_offset == 3
        getattr(log, how)(2)
        assert log.producer_state.first_unstable_offset is None
        assert log.last_stable_offset == log.log_end_offset == 2
        if how == "truncate_fully_and_start_at":
            assert not log.producer_state.producers and log.log_start_offset == 2


def test_fetches_are_bounded_by_the_last_stable_offset(directory) -> None:
    # UnifiedLogTest.testFetchUpToLastStableOffset: below the LSO every offset reads something,
    # from it to the log end nothing.
    with open_log(directory) as log:
        producer1, producer2 = Txn(log, 1), Txn(log, 2)
        producer1(5)
        plain(log, 3)
        producer2(2)
        producer1(4)
        plain(log, 2)
        producer1(10)

        def assert_lso_bounded_fetches() -> None:
            for offset in range(log.log_start_offset, log.last_stable_offset):
                assert log.fetch(offset, 1 << 20, isolation_level=COMMITTED).data
            for offset in range(log.last_stable_offset, log.log_end_offset + 1):
                assert log.fetch(offset, 1 << 20, isolation_level=COMMITTED).data == b""

        assert_lso_bounded_fetches()
        log.write_txn_marker(1, 0, 0, commit=True)
        assert log.last_stable_offset == 8
        assert_lso_bounded_fetches()
        log.write_txn_marker(2, 0, 0, commit=False)
        assert log.last_stable_offset == log.log_end_offset
        assert_lso_bounded_fetches()


def test_truncation_rebuilds_producer_state_without_snapshots(directory) -> None:
    # UnifiedLogTest.testProducerIdMapTruncateToWithNoSnapshots.
    with open_log(directory) as log:
        log.append(pbatch(1, 0))
        log.append(pbatch(1, 1))
        for path in directory.glob("*.snapshot"):
            path.unlink()
        log.truncate_to(1)
        assert set(log.producer_state.producers) == {1}
        assert log.producer_state.last_entry(1).last_seq == 0


def test_deleting_segments_keeps_producer_state(directory) -> None:
    # UnifiedLogTest.testProducerIdExpirationOnSegmentDeletion and testDeleteSnapshotsOn-
    # IncrementLogStartOffset: retention drops segments and snapshots, never producers.
    with open_log(directory, **{"file.delete.delay.ms": "0"}) as log:
        log.append(pbatch(1, 0))
        log.roll()
        log.append(pbatch(2, 0))
        log.append(pbatch(2, 1))
        log.roll()
        log.maybe_increment_log_start_offset(2)
        log.delete_old_segments()
        assert len(log.segments) == 2
        assert set(log.producer_state.producers) == {1, 2}
        assert snapshot_names(directory) == ["00000000000000000003.snapshot"]


def test_truncation_reloads_the_snapshot_of_a_roll_on_append(directory) -> None:
    # UnifiedLogTest.testProducerSnapshotAfterSegmentRollOnAppend.
    with open_log(directory, **{"segment.bytes": "1024"}) as log:
        log.append(pbatch(1, 0, value=bytes(512)))
        log.append(pbatch(1, 1, value=bytes(512)))  # rolls: the snapshot at 1 is written
        assert log.segments.base_offsets() == [0, 1]
        assert snapshot_names(directory) == ["00000000000000000001.snapshot"]
        log.truncate_to(1)
        assert log.segments.base_offsets() == [0, 1] and log.active_segment.size_bytes == 0
        assert snapshot_names(directory) == ["00000000000000000001.snapshot"]
        entry = log.producer_state.last_entry(1)
        assert (entry.batches[0].first_offset, entry.last_data_offset) == (0, 0)


def test_an_aborted_transaction_is_not_unstable_after_an_unclean_reopen(directory) -> None:
    # UnifiedLogTest.testRebuildTransactionalState.
    with open_log(directory) as log:
        log.append(pbatch(137, 0, 3, epoch=5, txn=True))
        log.write_txn_marker(137, 5, 0, commit=False)
        assert log.producer_state.first_unstable_offset is None
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=False,
                           recovery_point=0) as log:
        assert log.producer_state.first_unstable_offset is None
        assert log.last_stable_offset == 4


def test_duplicate_appends(directory) -> None:
    # UnifiedLogTest.testDuplicateAppends.
    with open_log(directory) as log:
        for seq in range(6):
            log.append(pbatch(1, seq))
        multi = log.append(pbatch(1, 6, 3))
        assert multi.last_offset - multi.first_offset + 1 == 3
        again = log.append(pbatch(1, 6, 3))  # a duplicate of the tail, of several records
        assert (again.first_offset, again.last_offset) == (multi.first_offset, multi.last_offset)
        with pytest.raises(OutOfOrderSequenceError):  # a partial duplicate of the tail
            log.append(pbatch(1, 7, 2))
        fourth = log.append(pbatch(1, 2))  # the 4th batch from the tail: still remembered
        assert fourth.duplicate and fourth.first_offset == 2
        with pytest.raises(OutOfOrderSequenceError):  # older than the last 5 batches
            log.append(pbatch(1, 1))
        original = log.append(pbatch(1, 9))
        duplicate = log.append(pbatch(1, 9))
        assert (duplicate.first_offset, duplicate.last_offset) == (
            original.first_offset, original.last_offset)
        assert log.log_end_offset == 10


def test_several_producers_in_one_append(directory) -> None:
    # UnifiedLogTest.testMultipleProducersWithDuplicatesInSingleAppend, for a client append:
    # batches of several producers in one append are judged per producer; one that repeats
    # a batch beside new ones is refused (stratalog's rule for mixed appends).
    with open_log(directory) as log:
        info = log.append(pbatch(1, 0) + pbatch(2, 0) + pbatch(1, 1) + pbatch(2, 1))
        assert (info.first_offset, info.last_offset) == (0, 3)
        assert {pid: e.last_seq for pid, e in log.producer_state.producers.items()} == {1: 1, 2: 1}
        with pytest.raises(OutOfOrderSequenceError, match="mixes"):
            log.append(pbatch(1, 1) + pbatch(1, 2))
        assert log.append(pbatch(2, 1)).duplicate


def test_markers_without_a_transaction_fence_older_coordinators_and_epochs(directory) -> None:
    # UnifiedLogTest.testZombieCoordinatorFencedEmptyTransaction, testEndTxnWithFenced-
    # ProducerEpoch: markers for a producer with nothing open complete nothing, and still set
    # its epoch and coordinator epoch.
    with open_log(directory) as log:
        log.write_txn_marker(1, 0, coordinator_epoch=2, commit=False)
        log.write_txn_marker(1, 0, coordinator_epoch=2, commit=False)
        assert log.active_segment.txn_index.all_aborted_txns() == []
        assert log.last_stable_offset == log.log_end_offset == 2
        with pytest.raises(TransactionCoordinatorFencedError):
            log.write_txn_marker(1, 0, coordinator_epoch=1, commit=False)
        log.write_txn_marker(5, 5, coordinator_epoch=1, commit=False)
        with pytest.raises(InvalidProducerEpochError):
            log.write_txn_marker(5, 4, coordinator_epoch=1, commit=False)


def test_an_aborted_transaction_spanning_segments_is_returned_from_its_start(directory) -> None:
    # UnifiedLogTest.testAbortedTransactionSpanningMultipleSegments.
    first = pbatch(137, 0, 3, epoch=5, txn=True)
    with open_log(directory, **{"segment.bytes": str(len(first))}) as log:
        log.append(first)
        log.append(pbatch(137, 3, 3, epoch=5, txn=True))  # spills into a second segment
        assert log.active_segment.base_offset == 3 and log.last_stable_offset == 0
        log.write_txn_marker(137, 5, 0, commit=False)
        assert log.producer_state.first_unstable_offset is None
        fetched = log.fetch(0, 2048, isolation_level=COMMITTED)
        assert [(t.producer_id, t.first_offset) for t in fetched.aborted_transactions] == [
            (137, 0)]


def test_read_committed_never_returns_an_open_transaction_to_a_racing_reader(directory) -> None:
    # UnifiedLogTest.testReadCommittedWithConcurrentHighWatermarkUpdates, with a reader thread
    # in place of the high-watermark thread: whatever the interleaving, a transactional batch
    # comes back only with the marker that completed it (they are adjacent, and the data stops
    # at the LSO, which passes a transaction only once its marker is written).
    import sys
    import threading

    rounds = 300
    done = threading.Event()
    problems: list[str] = []
    with open_log(directory) as log:

        def read() -> None:
            while not done.is_set():
                start = max(0, log.log_end_offset - 6)
                data = log.fetch(start, 1 << 20, isolation_level=COMMITTED).data
                headers = list(iter_batch_headers(data))
                for index, header in enumerate(headers):
                    if header.is_transactional and not header.is_control and not (
                        index + 1 < len(headers) and headers[index + 1].is_control
                    ):
                        problems.append(f"open transaction at {header.base_offset}")

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # switch threads often: more interleavings per round
        reader = threading.Thread(target=read)
        reader.start()
        try:
            for seq in range(rounds):
                log.append(pbatch(15, seq, txn=True))
                assert log.fetch(log.log_end_offset - 1, 1 << 20,
                                 isolation_level=COMMITTED).data == b""
                log.write_txn_marker(15, 0, 0, commit=False)
        finally:
            done.set()
            reader.join()
            sys.setswitchinterval(interval)
        assert problems == []
        assert log.log_end_offset == 2 * rounds


@pytest.mark.parametrize("recovery_point", [0, 1, None])
def test_producers_below_the_log_start_survive_an_unclean_reopen(directory, recovery_point) -> None:
    # LogLoaderTest.testLoadProducersAfterDeleteRecordsMidSegment: producer 1's only batch is
    # below the log start; the scan from the log start cannot see it, the snapshot at close
    # still holds it.
    with open_log(directory) as log:
        log.append(pbatch(1, 0))
        log.append(pbatch(2, 0))
        log.maybe_increment_log_start_offset(1)
        assert set(log.producer_state.producers) == {1, 2}
    kwargs = {} if recovery_point is None else {"had_clean_shutdown": False,
                                                "recovery_point": recovery_point}
    with PartitionLog.open(directory, time_ms=Clock(), log_start_offset=1, **kwargs) as log:
        assert {pid: e.last_seq for pid, e in log.producer_state.producers.items()} == {1: 0, 2: 0}
        assert log.append(pbatch(1, 1)).first_offset == 2


def test_producers_of_deleted_segments_survive_an_unclean_reopen(directory) -> None:
    # LogLoaderTest.testLoadProducersAfterDeleteRecordsOnSegment, where stratalog keeps more
    # than Kafka: Kafka deletes the snapshot at the log start offset when it reloads, and
    # forgets producer 1; the snapshot at the log start holds it here, and it stays known.
    with open_log(directory, **{"file.delete.delay.ms": "0"}) as log:
        log.append(pbatch(1, 0))
        log.roll()
        log.append(pbatch(2, 0))
        log.maybe_increment_log_start_offset(1)
        log.delete_old_segments()
        assert len(log.segments) == 1 and set(log.producer_state.producers) == {1, 2}
    with PartitionLog.open(directory, time_ms=Clock(), log_start_offset=1,
                           had_clean_shutdown=False, recovery_point=0) as log:
        assert set(log.producer_state.producers) == {1, 2}


def test_a_truncation_that_deleted_every_snapshot_writes_one_before_a_crash(directory, tmp_path) -> None:
    # Found by the model (test_producer_state_model.py): the only snapshot is damaged, the
    # truncation's reload deletes it and rebuilds the state from the log; without a snapshot
    # at the truncation point, a crash then left no snapshot file at all, and the unclean open
    # (which takes that to mean no producer was ever known at a roll) forgot the transaction
    # open since offset 0.
    import shutil

    log = open_log(directory)
    log.append(pbatch(1, 0, txn=True))  # 0
    log.roll()  # the snapshot at 1
    plain(log, 2)  # 1-2
    (directory / "00000000000000000001.snapshot").write_bytes(b"")
    log.truncate_to(2)  # inside the batch 1-2: the log keeps offset 0 only
    assert log.last_stable_offset == 0
    # The reloaded state is written (as Kafka's truncation does) at the end of what is kept.
    assert snapshot_names(directory) == ["00000000000000000001.snapshot"]
    crashed = tmp_path / "crashed" / directory.name
    shutil.copytree(directory, crashed)  # what a process crash leaves: no close
    log.close()
    with PartitionLog.open(crashed, time_ms=Clock()) as reopened:
        assert reopened.last_stable_offset == 0
        assert reopened.producer_state.ongoing_txns == {0: 1}


# ------------------------------------------------------------------- no snapshot file at all


def write_producers_below_the_active_segment(log: PartitionLog) -> None:
    """Idempotent and transactional producers in segments 0 and 4, none in the active one (7):
    producer 7's batches 0-1 and 4-5, producer 8's transaction at 2 aborted at 3, producer 9's
    transaction open since 6 (the LSO)."""
    log.append(pbatch(7, 0, 2))  # 0-1
    log.append(pbatch(8, 0, txn=True))  # 2
    log.write_txn_marker(8, 0, 0, commit=False)  # 3
    log.roll()
    log.append(pbatch(7, 2, 2))  # 4-5
    log.append(pbatch(9, 0, epoch=3, txn=True))  # 6
    log.roll()
    plain(log, 2)  # 7-8


def producer_entries(log: PartitionLog) -> dict[int, tuple]:
    return {
        pid: (e.producer_epoch, tuple(e.batches), e.coordinator_epoch,
              e.current_txn_first_offset, e.last_timestamp)
        for pid, e in log.producer_state.producers.items()
    }


def assert_producers_as_written(log: PartitionLog, before: dict[int, tuple]) -> None:
    assert producer_entries(log) == before
    # Resent batches are acknowledged with their original offsets: the older one too, which
    # no snapshot holds (a snapshot keeps each producer's last batch only).
    resent = log.append(pbatch(7, 2, 2))
    assert resent.duplicate and (resent.first_offset, resent.last_offset) == (4, 5)
    resent = log.append(pbatch(7, 0, 2))
    assert resent.duplicate and (resent.first_offset, resent.last_offset) == (0, 1)
    assert log.log_end_offset == 9
    # The open transaction holds the LSO; the aborted one is still returned.
    assert log.producer_state.ongoing_txns == {6: 9}
    assert log.last_stable_offset == 6
    fetched = log.fetch(0, 1 << 20, isolation_level=COMMITTED)
    assert list(fetched.aborted_transactions) == [AbortedTxn(8, 2, 3, 4)]
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(9, 5, epoch=3, txn=True))
    assert log.append(pbatch(8, 1)).first_offset == 9


@pytest.mark.parametrize("recovery_point", [0, 4, 7, 9])
def test_an_unclean_open_without_snapshots_rebuilds_producers_from_the_log_start(
    directory, recovery_point
) -> None:
    # Kafka's UnifiedLog.rebuildProducerState: only a clean shutdown makes "no snapshot"
    # mean "no producer". After an unclean one (a power loss can take the snapshots of the
    # last rolls; files get lost) the state is rebuilt from the log start offset, whatever
    # the recovery point: from 7 or 9 only the active segment is recovered, and its batches
    # carry no producer id.
    with open_log(directory) as log:
        write_producers_below_the_active_segment(log)
        before = producer_entries(log)
        assert set(before) == {7, 8, 9}
    for path in directory.glob("*.snapshot"):
        path.unlink()
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=False,
                           recovery_point=recovery_point) as log:
        assert log.recovered_segments == (3 if recovery_point == 0 else
                                          2 if recovery_point == 4 else 1)
        # The rebuilt state is written at the log end, for the next open.
        assert snapshot_names(directory) == ["00000000000000000009.snapshot"]
        assert_producers_as_written(log, before)


def test_a_log_manager_restart_without_its_marker_or_snapshots_keeps_producers(tmp_path) -> None:
    # The case that was broken: the recovery point checkpoint written at the clean close is
    # the log end, so recovery only re-validates the active segment; without the clean-
    # shutdown marker and with every snapshot gone, the producers must still come back.
    from stratalog.server.storage import LogManager
    from stratalog.server.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE

    data = tmp_path / "data"
    manager = LogManager.open([data], time_ms=Clock())
    try:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        write_producers_below_the_active_segment(log)
        before = producer_entries(log)
    finally:
        manager.close()
    (data / CLEAN_SHUTDOWN_FILE).unlink()
    partition = data / "t-0"
    assert snapshot_names(partition)
    for path in partition.glob("*.snapshot"):
        path.unlink()
    manager = LogManager.open([data], time_ms=Clock())
    try:
        log = manager.get_log("t", 0)
        assert log.recovered_segments == 1  # the active segment only: its base 7 < 9
        assert_producers_as_written(log, before)
    finally:
        manager.close()


def test_a_clean_open_without_snapshots_knows_no_producer(directory) -> None:
    # Kafka's rule for the upgrade path (reloadFromCleanShutdown and no snapshot file): the
    # close writes a snapshot whenever a producer is known, so with none there is nothing to
    # scan for. Snapshots deleted by hand are then lost state, as in Kafka: the producers are
    # unknown (a resent batch is refused, not deduplicated) and the open transaction no
    # longer holds the LSO.
    with open_log(directory) as log:
        write_producers_below_the_active_segment(log)
    for path in directory.glob("*.snapshot"):
        path.unlink()
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=True) as log:
        assert log.producer_state.producers == {}
        assert snapshot_names(directory) == []  # nothing scanned, nothing written
        assert log.last_stable_offset == log.log_end_offset == 9
        with pytest.raises(UnknownProducerIdError):
            log.append(pbatch(7, 2, 2))
        assert log.append(pbatch(7, 0)).first_offset == 9


def test_an_open_without_a_marker_scans_the_active_segment_when_no_snapshot_exists(
    directory,
) -> None:
    # had_clean_shutdown=None (an embedded log opened on its own) is recovered as after a
    # process crash: the page cache survived, and with it every snapshot a roll wrote, so no
    # snapshot file at all means no producer was known at a roll; the active segment, where
    # producers may have appeared since, is scanned. (Deleting snapshots by hand is not a
    # process crash: producers of older segments are then unknown.)
    with open_log(directory) as log:
        write_producers_below_the_active_segment(log)
        log.append(pbatch(10, 0, 2, txn=True))  # 9-10, in the active segment
    for path in directory.glob("*.snapshot"):
        path.unlink()
    with PartitionLog.open(directory, time_ms=Clock()) as log:
        assert set(log.producer_state.producers) == {10}
        assert log.last_stable_offset == 9


# ------------------------------------------------------------------- the roll's snapshot made durable


class FsyncSpy:
    """Stands in for ``os.fsync`` (the system call, not our code): records the path of every
    fsynced descriptor with the log's recovery point at that moment, then really fsyncs; or
    fails (EIO) for paths ending in ``fail_suffix``."""

    def __init__(self, log: PartitionLog) -> None:
        self._log = log
        self._fsync = os.fsync
        self.synced: list[tuple[str, int]] = []
        self.fail_suffix: str | None = None
        self.on_first_call = None

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if self.fail_suffix is not None and path.endswith(self.fail_suffix):
            raise OSError(errno.EIO, "injected fsync failure")
        if self.on_first_call is not None:
            call, self.on_first_call = self.on_first_call, None
            call()
        self.synced.append((path, self._log.recovery_point))
        self._fsync(fd)

    def paths(self) -> list[str]:
        return [path for path, _ in self.synced]


linux_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux's /proc only")


@linux_proc
def test_the_roll_snapshot_is_fsynced_before_the_recovery_point_reaches_it(
    directory, monkeypatch
) -> None:
    # Kafka's roll: takeSnapshot without an fsync, then the scheduled flush runs
    # flushProducerStateSnapshot before flushUptoOffsetExclusive moves the recovery point.
    scheduled: list = []
    log = PartitionLog.open(directory, time_ms=Clock(), flush_scheduler=scheduled.append)
    log.append(pbatch(7, 0, 2))
    spy = FsyncSpy(log)
    monkeypatch.setattr(os, "fsync", spy)
    log.roll()
    snapshot = str((directory / "00000000000000000002.snapshot").resolve())
    assert os.path.exists(snapshot)
    assert snapshot not in spy.paths()  # the roll (maybe an append's) fsyncs no snapshot
    assert log.recovery_point == 0 and len(scheduled) == 1
    scheduled.pop()()  # the flush after the roll
    assert log.recovery_point == 2
    assert (snapshot, 0) in spy.synced  # before the recovery point moved
    # Then the directory, which makes its name durable (fsynced after the rename).
    assert spy.paths().index(str(directory.resolve())) > spy.paths().index(snapshot)
    monkeypatch.undo()
    log.close()


@linux_proc
def test_a_failed_snapshot_fsync_keeps_the_recovery_point(directory, monkeypatch) -> None:
    # UnifiedLogTest.testRecoveryPointNotIncrementedOnProducerStateSnapshotFlushFailure. Here
    # (issue 13) a failed fsync also takes the log offline, as Kafka's LogDirFailureChannel
    # does: the next start recovers it, and its flush writes the snapshot.
    log = open_log(directory)
    log.append(pbatch(7, 0))
    log.roll()
    spy = FsyncSpy(log)
    spy.fail_suffix = ".snapshot"
    monkeypatch.setattr(os, "fsync", spy)
    with pytest.raises(StorageIOError, match=r"00000000000000000001\.snapshot"):
        log.flush(1)
    assert log.recovery_point == 0 and log.is_offline
    spy.fail_suffix = None
    with pytest.raises(LogDirOfflineError):
        log.flush(1)
    assert log.recovery_point == 0
    log.close_for_deletion()
    monkeypatch.undo()
    reopened = open_log(directory)
    assert reopened.log_end_offset == 1 and not reopened.is_offline
    assert 7 in reopened.producer_state.producers
    reopened.close()


@linux_proc
def test_a_roll_during_a_flush_has_its_snapshot_fsynced_by_the_flush_after_it(
    directory, monkeypatch
) -> None:
    # A flush captures the log end (1), releases the lock for its fsyncs, and a roll at 1
    # writes its snapshot meanwhile: that flush then moves the recovery point to 1 without
    # having fsynced it. The roll's own scheduled flush (to 1, nothing left to flush) must
    # still fsync it.
    scheduled: list = []
    log = PartitionLog.open(directory, time_ms=Clock(), flush_scheduler=scheduled.append)
    log.append(pbatch(7, 0))
    spy = FsyncSpy(log)
    spy.on_first_call = log.roll
    monkeypatch.setattr(os, "fsync", spy)
    log.flush()
    snapshot = str((directory / "00000000000000000001.snapshot").resolve())
    assert log.recovery_point == 1 and snapshot not in spy.paths()
    scheduled.pop()()
    assert snapshot in spy.paths()
    monkeypatch.undo()
    log.close()


# ------------------------------------------------------------------- the last 5 after a restart
# A snapshot holds each producer's LAST batch only (Kafka's format). A producer whose session
# broke while batches were in flight resends them, oldest first, to the restarted server: the
# first resend is an older batch than the last. Were it answered OUT_OF_ORDER_SEQUENCE (as
# Kafka's broker does: its state after a restart knows the last batch only), the producer
# would restart its sequences under a new id and store the batches a second time.


def test_every_one_of_the_last_five_batches_is_a_duplicate_after_a_clean_reopen(directory) -> None:
    with open_log(directory) as log:
        originals = [log.append(pbatch(1, seq * 3, 3)) for seq in range(8)]
        log.append(pbatch(2, 0))  # another producer after them
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=True) as reopened:
        for n in range(3, 8):
            resent = reopened.append(pbatch(1, n * 3, 3))
            assert resent.duplicate, f"batch {n} stored again"
            assert (resent.first_offset, resent.last_offset) == (
                originals[n].first_offset, originals[n].last_offset)
        with pytest.raises(OutOfOrderSequenceError):  # the 6th from the tail: forgotten, as live
            reopened.append(pbatch(1, 2 * 3, 3))
        assert reopened.log_end_offset == 25


def test_the_last_five_batches_survive_a_reopen_after_rolls(directory) -> None:
    # The producer's batches lie in two segments, the last of them alone in the active one.
    with open_log(directory) as log:
        for seq in range(4):
            log.append(pbatch(1, seq))
        log.roll()
        log.append(pbatch(1, 4))
    with PartitionLog.open(directory, time_ms=Clock(), had_clean_shutdown=True) as reopened:
        assert [reopened.append(pbatch(1, seq)).first_offset for seq in range(5)] == list(range(5))
        assert reopened.log_end_offset == 5
        assert reopened.append(pbatch(1, 5)).first_offset == 5
