"""server/kafka/apis/leader_hints.py: the leader a NOT_LEADER_OR_FOLLOWER names, and the Kafka
endpoints of the leaders named."""

from __future__ import annotations

from stratalog.server.cluster.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
)
from stratalog.server.kafka.apis.leader_hints import leader_hint, node_endpoints
from stratalog.server.settings import Address


def test_the_leader_named_by_not_leader_or_follower():
    assert leader_hint(NotLeaderOrFollowerError("t", 0, 2, 7, "10.0.0.2:50051")) == (2, 7)


def test_no_leader_known_or_another_error_is_no_hint():
    assert leader_hint(NotLeaderOrFollowerError("t", 0)) == (-1, -1)
    assert leader_hint(LeaderNotAvailableError("t", 0, "no leader")) == (-1, -1)
    assert leader_hint(FencedLeaderEpochError("t", 0, "old epoch")) == (-1, -1)


def test_the_leader_that_fenced_an_old_epoch():
    assert leader_hint(FencedLeaderEpochError("t", 0, "old epoch", 3, 9)) == (3, 9)
    assert leader_hint(None) == (-1, -1)


def test_endpoints_of_the_leaders_with_a_kafka_listener_by_node_id():
    brokers = {1: Address("h1", 9092), 3: Address("h3", 9094)}
    assert node_endpoints({3, 2, 1}, brokers) == [(1, Address("h1", 9092)),
                                                  (3, Address("h3", 9094))]
    assert node_endpoints(set(), brokers) == []
