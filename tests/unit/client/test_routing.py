"""The routing decision after a failed request about a partition (client/routing.py)."""

from __future__ import annotations

import grpc
import pytest

from stratalog.client import errors
from stratalog.client.metadata_cache import MetadataCache
from stratalog.client.routing import Reroute, reroute
from stratalog.client.types import BrokerAddress, ClusterMetadata, PartitionLeadership


def _cache() -> MetadataCache:
    cache = MetadataCache()
    cache.update(ClusterMetadata(
        node_id=1, controller_id=1, controller_epoch=1,
        brokers=(BrokerAddress(1, "db1:1"), BrokerAddress(2, "db2:1"), BrokerAddress(3, "db3:1")),
        topics={"t": (PartitionLeadership(0, 1, 4, (1, 2, 3), (1, 2, 3)),)},
    ), "db1:1", ["t"])
    return cache


def _not_leader(**hint: str) -> errors.NotLeaderOrFollowerError:
    return errors.NotLeaderOrFollowerError("not the leader", metadata=hint)


def _decide(cache: MetadataCache, error: errors.StratalogError, *, refused_by: str = "db1:1",
            cluster: bool = True, resendable: bool = False) -> Reroute:
    return reroute(cache, error, topic="t", partition=0, refused_by=refused_by,
                   cluster=cluster, resendable=resendable)


def test_a_hint_naming_another_node_goes_there_at_once() -> None:
    cache = _cache()
    error = _not_leader(leader_id="2", leader_epoch="5", leader_address="db2:1")
    assert _decide(cache, error) is Reroute.NOW
    assert cache.route("t", 0).address == "db2:1"


def test_a_hint_naming_the_refusing_node_itself_waits_for_a_refresh() -> None:
    cache = _cache()
    error = _not_leader(leader_id="1", leader_epoch="5", leader_address="db1:1")
    assert _decide(cache, error) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")


def test_no_hint_waits_for_a_refresh() -> None:
    cache = _cache()
    assert _decide(cache, _not_leader(leader_id="-1")) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")


@pytest.mark.parametrize("cls", [errors.LeaderNotAvailableError, errors.UnknownLeaderEpochError])
def test_other_routing_errors_wait_for_a_refresh(cls: type[errors.StratalogError]) -> None:
    cache = _cache()
    assert _decide(cache, cls("election pending")) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")


def test_a_gone_broker_in_a_cluster_resends_reads_only() -> None:
    gone = errors.BrokerUnavailableError("connection refused", code=grpc.StatusCode.UNAVAILABLE)
    cache = _cache()
    assert _decide(cache, gone, resendable=True) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")
    cache = _cache()
    # A Produce whose answer was lost may have been appended: the Producer's to resend.
    assert _decide(cache, gone, resendable=False) is Reroute.RAISE
    assert cache.needs_refresh("t")  # but the next request asks for the leader first


def test_a_gone_broker_is_asked_for_metadata_last() -> None:
    gone = errors.BrokerUnavailableError("connection refused", code=grpc.StatusCode.UNAVAILABLE)
    cache = _cache()
    _decide(cache, gone, refused_by="db1:1", resendable=True)
    assert cache.is_unreachable("db1:1")
    assert cache.candidates([], first="db1:1") == ["db2:1", "db3:1", "db1:1"]


def test_a_single_server_gone_is_only_raised() -> None:
    cache = MetadataCache()
    gone = errors.BrokerUnavailableError("connection refused", code=grpc.StatusCode.UNAVAILABLE)
    assert _decide(cache, gone, cluster=False, resendable=True) is Reroute.RAISE
    assert cache.updates == 0


@pytest.mark.parametrize("error", [
    errors.NotEnoughReplicasError("isr 1 < 2"),
    errors.OffsetOutOfRangeError("offset 9"),
    errors.FencedLeaderEpochError("epoch 3 < 4"),
])
def test_other_errors_are_the_callers(error: errors.StratalogError) -> None:
    cache = _cache()
    assert _decide(cache, error, resendable=True) is Reroute.RAISE
    assert not cache.needs_refresh("t")
