"""MetadataCache: leaders from Metadata answers and hints, epochs that never go back, the
address each node answered at, and the age of an entry (a fake clock: no timed assertions)."""

from __future__ import annotations

from stratalog.client.metadata_cache import NO_LEADER, UNREACHABLE_MAX, MetadataCache, Route
from stratalog.client.types import BrokerAddress, ClusterMetadata, PartitionLeadership


def _metadata(node_id: int, leaders: dict[int, tuple[int, int]], *, topic: str = "t",
              brokers: int = 3) -> ClusterMetadata:
    return ClusterMetadata(
        node_id=node_id, controller_id=1, controller_epoch=1,
        brokers=tuple(BrokerAddress(n, f"db{n}:50051") for n in range(1, brokers + 1)),
        topics={topic: tuple(
            PartitionLeadership(p, leader, epoch, (1, 2, 3), (1, 2, 3))
            for p, (leader, epoch) in leaders.items()
        )},
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_empty_cache_knows_nothing_and_wants_a_refresh() -> None:
    cache = MetadataCache()
    assert cache.route("t", 0) is None and cache.leader_of("t", 0) is None
    assert cache.needs_refresh("t") and not cache.is_cluster
    cache.check()


def test_the_answering_node_is_reached_where_it_answered() -> None:
    cache = MetadataCache()
    # Asked through a port mapping: node 2 advertises db2:50051 but answered at localhost:6002.
    cache.update(_metadata(2, {0: (2, 0), 1: (3, 0)}), "localhost:6002", ["t"])
    cache.check()
    assert cache.route("t", 0) == Route(2, "localhost:6002")
    assert cache.route("t", 1) == Route(3, "db3:50051")
    assert cache.node_at("localhost:6002") == 2 and cache.is_cluster
    assert not cache.needs_refresh("t")


def test_leader_epochs_never_go_back() -> None:
    cache = MetadataCache()
    cache.update(_metadata(1, {0: (2, 5)}), "db1:50051", ["t"])
    cache.update(_metadata(3, {0: (3, 4)}), "db3:50051", ["t"])  # a lagging view
    assert cache.leader_of("t", 0) == 2
    cache.update(_metadata(3, {0: (3, 6)}), "db3:50051", ["t"])
    assert cache.leader_of("t", 0) == 3
    cache.check()


def test_a_partition_without_leader_has_no_route() -> None:
    cache = MetadataCache()
    cache.update(_metadata(1, {0: (NO_LEADER, 3)}), "db1:50051", ["t"])
    assert cache.leader_of("t", 0) == NO_LEADER and cache.route("t", 0) is None


def test_a_hint_routes_at_once_unless_older() -> None:
    cache = MetadataCache()
    cache.update(_metadata(1, {0: (1, 5)}), "db1:50051", ["t"])
    assert cache.apply_hint("t", 0, 2, 6, "db2:50051")
    assert cache.route("t", 0) == Route(2, "db2:50051")
    # An older epoch than the cached one: not taken, the topic is refreshed instead.
    assert not cache.apply_hint("t", 0, 3, 4, "db3:50051")
    assert cache.leader_of("t", 0) == 2 and cache.needs_refresh("t")
    cache.check()


def test_a_hint_for_an_unknown_broker_brings_its_address() -> None:
    cache = MetadataCache()
    assert cache.apply_hint("t", 0, 7, 1, "db7:50051")
    assert cache.route("t", 0) == Route(7, "db7:50051")
    cache.check()


def test_a_hint_without_leader_or_address_marks_the_topic_stale() -> None:
    cache = MetadataCache()
    cache.update(_metadata(1, {0: (1, 0)}), "db1:50051", ["t"])
    assert not cache.apply_hint("t", 0, None, None, None)
    assert cache.needs_refresh("t")
    assert not cache.apply_hint("t", 0, 9, 3, None)  # node 9 at no known address
    assert cache.needs_refresh("t")


def test_entries_age_out_after_max_age() -> None:
    clock = Clock()
    cache = MetadataCache(max_age_ms=300_000, clock=clock)
    cache.update(_metadata(1, {0: (1, 0)}), "db1:50051", ["t"])
    clock.now += 299.0
    assert not cache.needs_refresh("t")
    clock.now += 1.0
    assert cache.needs_refresh("t")


def test_a_topic_asked_for_and_missing_is_forgotten() -> None:
    cache = MetadataCache()
    cache.update(_metadata(1, {0: (1, 0), 1: (2, 0)}), "db1:50051", ["t"])
    cache.update(_metadata(1, {0: (1, 0)}, topic="other"), "db1:50051", ["t", "other"])
    assert not cache.knows("t") and cache.route("t", 1) is None
    assert cache.knows("other")
    cache.check()


def test_a_gone_node_makes_its_topics_stale() -> None:
    cache = MetadataCache()
    cache.update(_metadata(1, {0: (2, 0), 1: (3, 0)}), "db1:50051", ["t"])
    cache.forget_node(2)
    assert cache.needs_refresh("t")


def test_candidates_put_the_last_answer_first_then_the_controller_then_bootstrap() -> None:
    cache = MetadataCache()
    assert cache.candidates(["a:1", "b:1"]) == ["a:1", "b:1"]
    cache.update(_metadata(3, {0: (1, 0)}), "b:1", ["t"])
    assert cache.candidates(["a:1", "b:1"], first="b:1") == [
        "b:1", "db1:50051", "db2:50051", "a:1",
    ]


def test_an_unreachable_address_is_a_candidate_last_until_it_answers() -> None:
    cache = MetadataCache()
    cache.update(_metadata(3, {0: (1, 0)}), "db3:50051", ["t"])
    bootstrap = ["db1:50051", "db2:50051", "db3:50051"]
    # The controller (node 1) would be asked first after the home broker...
    assert cache.candidates(bootstrap, first="db3:50051") == [
        "db3:50051", "db1:50051", "db2:50051",
    ]
    # ...but not while it does not answer, nor the home broker once it stopped answering.
    cache.mark_unreachable("db1:50051")
    cache.mark_unreachable("db3:50051")
    assert cache.is_unreachable("db1:50051")
    assert cache.candidates(bootstrap, first="db3:50051") == [
        "db2:50051", "db1:50051", "db3:50051",
    ]
    cache.check()
    cache.mark_reachable("db1:50051")
    assert not cache.is_unreachable("db1:50051")
    assert cache.candidates(bootstrap, first="db3:50051") == [
        "db1:50051", "db2:50051", "db3:50051",
    ]
    cache.check()


def test_unreachable_addresses_are_bounded_oldest_dropped_first() -> None:
    cache = MetadataCache()
    for i in range(UNREACHABLE_MAX + 10):
        cache.mark_unreachable(f"gone{i}:1")
        cache.check()
    assert not cache.is_unreachable("gone0:1")
    assert cache.is_unreachable(f"gone{UNREACHABLE_MAX + 9}:1")
