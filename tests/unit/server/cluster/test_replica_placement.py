"""server/cluster/replica_placement.py: the rack-unaware assignment kept exactly as before racks
existed, Kafka's rack-aware cases (AdminRackAwareTest's), and partitions added continuing a
topic's assignment."""

from __future__ import annotations

import itertools
import random

import pytest

from stratalog.server.cluster.errors import InvalidReplicationFactorError
from stratalog.server.cluster.replica_placement import (
    assign_replicas,
    rack_alternated,
    start_index_of,
)


def issue_17_round_robin(partitions: int, factor: int, brokers: list[int], start: int
                         ) -> dict[int, tuple[int, ...]]:
    """The assignment before racks (partition_state.py's TopicAssignment.round_robin, as it
    was), written out again as the oracle."""
    ordered = sorted(brokers)
    return {p: tuple(ordered[(start + p + r) % len(ordered)] for r in range(factor))
            for p in range(partitions)}


def test_round_robin_spreads_leaders_and_never_repeats_a_broker() -> None:
    replicas = assign_replicas(0, 6, 3, {3: "", 1: "", 2: ""}, 0)
    assert replicas[0] == (1, 2, 3)
    assert replicas[1] == (2, 3, 1)
    assert [nodes[0] for nodes in replicas.values()] == [1, 2, 3, 1, 2, 3]
    assert all(len(set(nodes)) == 3 for nodes in replicas.values())


def test_without_racks_every_assignment_is_the_one_before_racks() -> None:
    rng = random.Random(29)
    for _ in range(300):
        brokers = rng.sample(range(1, 12), rng.randint(1, 7))
        factor = rng.randint(1, len(brokers))
        partitions = rng.randint(1, 40)
        start = rng.randrange(len(brokers))
        got = assign_replicas(0, partitions, factor, dict.fromkeys(brokers, ""), start,
                              rng.randrange(len(brokers)))
        assert got == issue_17_round_robin(partitions, factor, brokers, start)


def test_added_partitions_continue_the_topic_as_a_bigger_topic_would_have_been() -> None:
    brokers = dict.fromkeys([1, 2, 3, 5], "")
    for start in range(4):
        whole = assign_replicas(0, 9, 3, brokers, start)
        existing = {p: whole[p] for p in range(4)}
        begin = start_index_of(existing, brokers)
        added = assign_replicas(4, 5, 3, brokers, begin, begin)
        assert {**existing, **added} == whole


def test_rack_alternated_takes_one_broker_of_each_rack_in_turn() -> None:
    assert rack_alternated({1: "a", 2: "a", 3: "b", 4: "c"}) == [1, 3, 4, 2]
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_kafka_rack_aware_case_with_fixed_start_and_shift() -> None:
    # core/src/test/scala/unit/kafka/admin/AdminRackAwareTest.scala, its expected map.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas(0, 7, 3, racks, 0, 0)
    assert got == {0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0),
                   5: (2, 0, 3), 6: (0, 4, 2)}


@pytest.mark.parametrize("rack_count", [2, 3, 4])
def test_rack_aware_puts_each_partitions_replicas_on_distinct_racks(rack_count: int) -> None:
    rng = random.Random(rack_count)
    for _ in range(100):
        brokers = rng.sample(range(1, 20), rng.randint(rack_count, 9))
        racks = {b: f"r{i % rack_count}" for i, b in enumerate(brokers)}
        factor = rng.randint(1, len(brokers))
        got = assign_replicas(0, rng.randint(1, 30), factor, racks,
                              rng.randrange(len(brokers)), rng.randrange(len(brokers)))
        for replicas in got.values():
            assert len(set(replicas)) == factor
            assert len({racks[b] for b in replicas}) == min(factor, rack_count)
        # Leaders spread: no broker leads more than its share rounded up.
        leaders = [replicas[0] for replicas in got.values()]
        share = -(-len(leaders) // len(brokers))
        assert max(leaders.count(b) for b in brokers) <= share


def test_racks_on_some_brokers_only_and_too_few_brokers_are_refused() -> None:
    with pytest.raises(InvalidReplicationFactorError, match=r"brokers \[1\] have a rack"):
        assign_replicas(0, 1, 2, {1: "a", 2: ""}, 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 live"):
        assign_replicas(0, 1, 3, {1: "", 2: ""}, 0)


def test_every_start_and_shift_gives_distinct_brokers() -> None:
    racks = {1: "a", 2: "b", 3: "a", 4: "b", 5: "c"}
    for start, shift in itertools.product(range(5), range(5)):
        for replicas in assign_replicas(0, 12, 4, racks, start, shift).values():
            assert len(set(replicas)) == 4
            assert len({racks[b] for b in replicas}) == 3
