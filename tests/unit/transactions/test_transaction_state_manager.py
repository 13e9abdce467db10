"""TransactionStateManager: the __transaction_state log on disk, its replay, tombstones,
compaction, corruption, and its place among the LogManager's topics
(Kafka's TransactionStateManagerTest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratalog.records import build_batch, iter_batches
from stratalog.server.storage import LogManager, PartitionLog
from stratalog.server.storage.errors import InvalidTopicError, StorageError
from stratalog.server.transactions.errors import CorruptTransactionLogError
from stratalog.server.transactions.transaction_log import (
    decode_key,
    decode_transaction_value,
    encode_transaction_key,
)
from stratalog.server.transactions.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
)
from stratalog.server.transactions.transaction_state_manager import (
    STATE_LOG_CONFIG,
    TransactionStateManager,
)

S = TransactionState
STATE_DIR = "__transaction_state-0"


def ongoing(transactional_id: str, *partitions: tuple[str, int]) -> TransactionMetadata:
    empty = TransactionMetadata.new(transactional_id, 5, 60000, 10).prepare_increment_epoch(
        60000, 10)
    return empty.prepare_add_partitions(frozenset(partitions), 20)


def test_state_is_kept_in_a_partition_log_in_kafkas_format(tmp_path: Path) -> None:
    state = TransactionStateManager.open([tmp_path])
    state.append_transaction(ongoing("t1", ("a", 0)))
    state.append_producer_ids(1000)
    state.close()
    directory = tmp_path / STATE_DIR
    assert (directory / "00000000000000000000.log").is_file()
    with PartitionLog.open(directory, STATE_LOG_CONFIG) as log:
        batches = list(iter_batches(log.read(0, 1 << 20)))
    records = [record for _, batch in batches for record in batch]
    assert [record.offset for record in records] == [0, 1]
    assert records[0].key == encode_transaction_key("t1")
    assert decode_key(records[0].key).transactional_id == "t1"
    assert decode_transaction_value("t1", records[0].value) == ongoing("t1", ("a", 0))


def test_replay_takes_the_latest_record_of_each_id_and_honours_tombstones(tmp_path: Path) -> None:
    state = TransactionStateManager.open([tmp_path])
    first = ongoing("t1", ("a", 0))
    state.append_transaction(first)
    committed = first.prepare_end(True, 30).prepare_complete(40)
    state.append_transaction(first.prepare_end(True, 30))
    state.append_transaction(committed)
    state.append_transaction(ongoing("t2", ("b", 1)))
    state.append_transaction(ongoing("t3", ("c", 2)).prepare_end(False, 30).prepare_complete(40))
    state.append_transaction(state.get("t3").prepare_dead(50))
    assert state.get("t3") is None
    before = {m.transactional_id: m for m in state.transactions()}
    state.close()
    reopened = TransactionStateManager.open([tmp_path])
    assert {m.transactional_id: m for m in reopened.transactions()} == before
    assert reopened.get("t1") == committed
    assert reopened.get("t2").state is S.ONGOING
    reopened.close()


def test_the_state_log_is_found_in_any_log_directory_and_must_be_in_one(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    state = TransactionStateManager.open([two])
    state.append_transaction(ongoing("t1", ("a", 0)))
    state.close()
    reopened = TransactionStateManager.open([one, two])
    assert reopened.directory == two / STATE_DIR
    assert reopened.get("t1") is not None
    reopened.close()
    (one / STATE_DIR).mkdir(parents=True)
    with pytest.raises(StorageError, match="two log directories"):
        TransactionStateManager.open([one, two])


def test_a_record_that_does_not_decode_stops_the_load_naming_the_offset(tmp_path: Path) -> None:
    state = TransactionStateManager.open([tmp_path])
    state.append_transaction(ongoing("t1", ("a", 0)))
    state.close()
    with PartitionLog.open(tmp_path / STATE_DIR, STATE_LOG_CONFIG) as log:
        log.append(build_batch([(0, b"\x00\x09junk", b"x", ())]))
    with pytest.raises(CorruptTransactionLogError, match=r"offset 1: unknown key version 9"):
        TransactionStateManager.open([tmp_path])


def test_compaction_rewrites_the_live_state_and_drops_older_segments(tmp_path: Path) -> None:
    state = TransactionStateManager.open([tmp_path], compact_records_min=50)
    metadata = ongoing("t1", ("a", 0))
    for i in range(60):
        metadata = metadata.prepare_add_partitions(frozenset({("a", i)}), 100 + i)
        state.append_transaction(metadata)
    state.append_transaction(ongoing("t2", ("b", 0)))
    state.append_producer_ids(3000)
    assert state.maybe_compact()
    log = state.partition_log
    assert log.log_start_offset == 62
    assert log.log_end_offset == 65  # t1, t2, the producer id block
    assert len(log.segments) == 1
    assert not state.maybe_compact()  # 3 records for 3 keys
    expected = {m.transactional_id: m for m in state.transactions()}
    state.close()
    reopened = TransactionStateManager.open([tmp_path])
    assert {m.transactional_id: m for m in reopened.transactions()} == expected
    assert reopened.next_producer_id == 3000
    reopened.close()


def test_compaction_waits_for_its_minimum(tmp_path: Path) -> None:
    state = TransactionStateManager.open([tmp_path], compact_records_min=100)
    for _ in range(99):
        state.append_transaction(ongoing("t1", ("a", 0)))
    assert not state.maybe_compact()
    state.close()


def test_a_failed_append_leaves_the_cache_unchanged(tmp_path: Path) -> None:
    state = TransactionStateManager.open([tmp_path])
    state.partition_log.close()
    with pytest.raises(StorageError):
        state.append_transaction(ongoing("t1", ("a", 0)))
    assert state.get("t1") is None


def test_the_log_manager_neither_loads_lists_nor_creates_the_internal_topic(
    tmp_path: Path,
) -> None:
    with LogManager.open([tmp_path]) as manager:
        manager.create_topic("orders", 1)
        state = TransactionStateManager.open(manager.log_dirs)
        state.append_transaction(ongoing("t1", ("orders", 0)))
        for name in ("__transaction_state", "__transaction.state"):
            with pytest.raises(InvalidTopicError, match="reserved"):
                manager.create_topic(name, 1)
        state.close()
    with LogManager.open([tmp_path]) as manager:
        assert [topic.name for topic in manager.list_topics()] == ["orders"]
        assert set(manager.logs()) == {("orders", 0)}
    assert (tmp_path / STATE_DIR / "00000000000000000000.log").stat().st_size > 0


def test_a_catalogue_topic_named_like_the_internal_one_is_ignored(tmp_path: Path) -> None:
    # A topic created before the name was reserved: the coordinator owns the directory now.
    from stratalog.server.storage.topic_catalog import TopicCatalog, TopicEntry, write_catalog

    with LogManager.open([tmp_path]) as manager:
        log_dirs = manager.log_dirs
    write_catalog(log_dirs, TopicCatalog().with_topic(TopicEntry("__transaction_state", 1)))
    with LogManager.open([tmp_path]) as manager:
        assert manager.list_topics() == []
        assert manager.logs() == {}
    assert not (tmp_path / STATE_DIR).exists()
