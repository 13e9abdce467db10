"""The partition of a transactional id in the cluster's state topic: Kafka's
``TransactionStateManager.partitionFor`` bit for bit."""

from __future__ import annotations

import pytest

from stratalog.server.transactions.state_partitions import (
    partition_for_transactional_id,
    topic_configs,
)


@pytest.mark.parametrize(("transactional_id", "partitions", "expected"), [
    ("a", 50, 97 % 50),                    # hashCode("a") = 97
    ("foo", 50, 101574 % 50),              # hashCode("foo") = 101574
    ("polygenelubricants", 50, 0),         # hashCode = Integer.MIN_VALUE: Utils.abs gives 0
    ("Aa", 7, 2112 % 7),                   # "Aa" and "BB" collide in Java: both 2112
    ("BB", 7, 2112 % 7),
    ("\U0001f600", 50, (55357 * 31 + 56832) % 50),  # UTF-16 surrogates D83D DE00
])
def test_partition_is_javas(transactional_id: str, partitions: int, expected: int) -> None:
    assert partition_for_transactional_id(transactional_id, partitions) == expected


def test_negative_hash_uses_its_absolute_value() -> None:
    # hashCode("zzzzzzzz") = -1910022912 (it overflows): Kafka takes its absolute value.
    assert partition_for_transactional_id("zzzzzzzz", 50) == 1910022912 % 50


def test_every_partition_in_range() -> None:
    seen = {partition_for_transactional_id(f"txn-{i}", 50) for i in range(2000)}
    assert seen == set(range(50))


def test_partitions_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        partition_for_transactional_id("t", 0)


def test_min_isr_is_capped_by_the_replication_factor() -> None:
    assert topic_configs(2, 3)["min.insync.replicas"] == "2"
    assert topic_configs(2, 1)["min.insync.replicas"] == "1"
    assert topic_configs(3, 3)["cleanup.policy"] == "compact"
