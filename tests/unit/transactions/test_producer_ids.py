"""ProducerIdManager: ids from blocks, each block durable before its first id, unique across
restarts of the state log (Kafka's ProducerIdManagerTest, with our state log as the store)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stratalog.server.transactions.errors import ProducerIdsExhaustedError
from stratalog.server.transactions.producer_ids import PRODUCER_ID_MAX, ProducerIdManager
from stratalog.server.transactions.transaction_state_manager import TransactionStateManager


def test_ids_come_from_blocks_persisted_before_use() -> None:
    persisted: list[int] = []
    manager = ProducerIdManager(persisted.append, next_block_start=0, block_size=3)
    assert persisted == []  # nothing allocated before the first id is asked for
    assert [manager.generate() for _ in range(3)] == [0, 1, 2]
    assert persisted == [3]
    assert manager.generate() == 3
    assert persisted == [3, 6]
    assert manager.next_block_start == 6


def test_a_failed_persist_hands_out_nothing_and_is_retried() -> None:
    calls: list[int] = []

    def persist(next_id: int) -> None:
        calls.append(next_id)
        if len(calls) == 1:
            raise OSError("disk gone")

    manager = ProducerIdManager(persist, next_block_start=1000, block_size=10)
    with pytest.raises(OSError):
        manager.generate()
    assert manager.generate() == 1000
    assert calls == [1010, 1010]


def test_exhaustion_is_an_error_naming_the_block() -> None:
    manager = ProducerIdManager(lambda _: None, next_block_start=PRODUCER_ID_MAX - 5, block_size=10)
    with pytest.raises(ProducerIdsExhaustedError, match=str(PRODUCER_ID_MAX)):
        manager.generate()


def test_concurrent_callers_get_distinct_ids() -> None:
    manager = ProducerIdManager(lambda _: None, block_size=7)
    results: list[list[int]] = [[] for _ in range(8)]

    def work(out: list[int]) -> None:
        out.extend(manager.generate() for _ in range(200))

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for out in results for i in out]
    assert len(set(ids)) == len(ids) == 1600


def test_ids_are_unique_across_restarts_of_the_state_log(tmp_path: Path) -> None:
    seen: set[int] = set()
    for _ in range(3):
        state = TransactionStateManager.open([tmp_path])
        manager = ProducerIdManager(state.append_producer_ids, state.next_producer_id)
        ids = [manager.generate() for _ in range(1500)]
        assert not seen & set(ids)
        seen.update(ids)
        state.close()
    # Each start skips the unused rest of its last block, as Kafka does.
    assert min(seen) == 0 and len(seen) == 4500
    state = TransactionStateManager.open([tmp_path])
    assert state.next_producer_id == 6000
    state.close()
