"""server/cluster/preferred_leader.py's decisions: Kafka's preferred and unclean elections
(``ReplicationControlManager.electLeader``'s errors) and the automatic rebalance's imbalance
rule (``KafkaController.checkAndTriggerAutoLeaderRebalance``)."""

from __future__ import annotations

import pytest

from stratalog.server.cluster.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    PreferredLeaderNotAvailableError,
)
from stratalog.server.cluster.partition_state import NO_LEADER, PartitionState, TopicAssignment
from stratalog.server.cluster.preferred_leader import (
    ElectionType,
    elected_state,
    imbalanced_partitions,
)

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def test_preferred_election_moves_to_the_first_replica_with_an_epoch_bump() -> None:
    state = PartitionState(2, 4, (2, 3, 1), 7)
    assert elected_state(PREFERRED, (1, 2, 3), state, {1, 2, 3}, 9) == \
        PartitionState(1, 5, (2, 3, 1), 9)


def test_preferred_election_is_refused_when_not_needed_or_not_clean() -> None:
    with pytest.raises(ElectionNotNeededError, match="1 leads it already"):
        elected_state(PREFERRED, (1, 2), PartitionState(1, 0, (1, 2)), {1, 2}, 1)
    with pytest.raises(PreferredLeaderNotAvailableError, match="not a live broker"):
        elected_state(PREFERRED, (1, 2), PartitionState(2, 1, (1, 2)), {2}, 1)
    with pytest.raises(PreferredLeaderNotAvailableError, match=r"not in the ISR \[2\]"):
        elected_state(PREFERRED, (1, 2), PartitionState(2, 1, (2,)), {1, 2}, 1)


def test_unclean_election_only_without_a_live_leader() -> None:
    with pytest.raises(ElectionNotNeededError):
        elected_state(UNCLEAN, (1, 2), PartitionState(2, 1, (2,)), {1, 2}, 1)
    offline = PartitionState(NO_LEADER, 3, (1,))
    assert elected_state(UNCLEAN, (1, 2), offline, {2}, 5) == PartitionState(2, 4, (2,), 5)
    with pytest.raises(EligibleLeadersNotAvailableError):
        elected_state(UNCLEAN, (1, 2), offline, {3}, 5)


def _bunched(partitions: int, leader: int) -> tuple[dict, dict]:
    replicas = {p: tuple((p + r) % 3 + 1 for r in range(3)) for p in range(partitions)}
    states = {("t", p): PartitionState(leader, 1, (1, 2, 3)) for p in range(partitions)}
    return {"t": TopicAssignment(replicas)}, states


def test_imbalance_above_the_percentage_moves_the_partitions_back() -> None:
    topics, states = _bunched(6, leader=1)
    # Brokers 2 and 3 are preferred for 2 partitions each, and lead none: 100 % > 10 %.
    assert imbalanced_partitions(topics, states, {1, 2, 3}, 10) == \
        [("t", 1), ("t", 2), ("t", 4), ("t", 5)]
    # A preferred replica that is not live, or not in sync, is skipped.
    assert imbalanced_partitions(topics, states, {1, 2}, 10) == [("t", 1), ("t", 4)]
    states[("t", 1)] = PartitionState(1, 1, (1, 3))
    assert imbalanced_partitions(topics, states, {1, 2}, 10) == [("t", 4)]


def test_imbalance_at_or_below_the_percentage_is_left_alone() -> None:
    topics, states = _bunched(6, leader=1)
    # Broker 2 led elsewhere for 1 of its 2 partitions: 50 %.
    states[("t", 1)] = PartitionState(2, 1, (1, 2, 3))
    states[("t", 2)] = PartitionState(3, 1, (1, 2, 3))
    states[("t", 5)] = PartitionState(3, 1, (1, 2, 3))
    assert imbalanced_partitions(topics, states, {1, 2, 3}, 50) == []
    assert imbalanced_partitions(topics, states, {1, 2, 3}, 49) == [("t", 4)]
    balanced = {("t", p): PartitionState(r[0], 1, (1, 2, 3))
                for p, r in topics["t"].replicas.items()}
    assert imbalanced_partitions(topics, balanced, {1, 2, 3}, 0) == []
