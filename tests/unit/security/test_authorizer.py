"""The authorizer: every Broker RPC's rule, answers filtered, decisions cached, ACL updates.

The authorizer runs here on :class:`CallIdentity` values made by the test, as the
authentication interceptor makes them for real calls (tests/integration/test_server_acls.py
runs the same rules through a server process).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stratalog.server.security.acl_store import AclStore
from stratalog.server.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from stratalog.server.security.authorizer import (
    REPLICATION_RULES,
    RULES,
    TRANSACTION_MARKERS_RULES,
    Authorizer,
    Decider,
    rule_for,
)
from stratalog.server.security.errors import AclLimitError, InvalidAclError, NotAuthorizedError
from stratalog.server.security.principal import CallIdentity, Principal
from stratalog.server.storage.errors import InvalidTopicError
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import replication_pb2, transaction_markers_pb2

Op = AclOperation
TOPIC, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
GROUP = ResourceType.GROUP
ALICE = CallIdentity(Principal.user("alice"), "10.0.0.1", "password")


def grant(resource_type: ResourceType, name: str, operation: AclOperation,
          principal: str = "User:alice", permission: AclPermissionType = AclPermissionType.ALLOW,
          pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer_with(tmp_path: Path, *bindings: AclBinding, **options: Any) -> Authorizer:
    """An authorizer whose ACL file (in ``tmp_path``) holds exactly ``bindings``."""
    store = AclStore.open([tmp_path])
    store.write(bindings)
    return Authorizer(store, **options)


# Every Broker RPC: a request, and the ACLs a caller needs for it (None: open to everyone).
# The ACLs are exactly Kafka's for the request of the same meaning (authorizer.py's table).
RPC_CASES: dict[str, tuple[Callable[[], Any], list[AclBinding] | None]] = {
    "CreateTopic": (lambda: pb.CreateTopicRequest(name="orders", partitions=1),
                    [grant(TOPIC, "orders", Op.CREATE)]),
    "DeleteTopic": (lambda: pb.DeleteTopicRequest(name="orders"),
                    [grant(TOPIC, "orders", Op.DELETE)]),
    "ListTopics": (lambda: pb.ListTopicsRequest(), None),
    "DescribeTopic": (lambda: pb.DescribeTopicRequest(name="orders"),
                      [grant(TOPIC, "orders", Op.DESCRIBE)]),
    "AlterTopicConfigs": (lambda: pb.AlterTopicConfigsRequest(name="orders"),
                          [grant(TOPIC, "orders", Op.ALTER_CONFIGS)]),
    "CreatePartitions": (lambda: pb.CreatePartitionsRequest(name="orders", count=2),
                         [grant(TOPIC, "orders", Op.ALTER)]),
    "Produce": (lambda: pb.ProduceRequest(topic="orders"), [grant(TOPIC, "orders", Op.WRITE)]),
    "FetchByOffset": (lambda: pb.FetchByOffsetRequest(topic="orders"),
                      [grant(TOPIC, "orders", Op.READ)]),
    "FetchByTimestamp": (lambda: pb.FetchByTimestampRequest(topic="orders"),
                         [grant(TOPIC, "orders", Op.READ)]),
    "ListOffsets": (lambda: pb.ListOffsetsRequest(topic="orders"),
                    [grant(TOPIC, "orders", Op.DESCRIBE)]),
    "Subscribe": (lambda: pb.SubscribeRequest(topic="orders"), [grant(TOPIC, "orders", Op.READ)]),
    "DeleteRecords": (lambda: pb.DeleteRecordsRequest(topic="orders"),
                      [grant(TOPIC, "orders", Op.DELETE)]),
    "CleanPartition": (lambda: pb.CleanPartitionRequest(topic="orders"),
                       [grant(TOPIC, "orders", Op.ALTER)]),
    "InitProducerId": (lambda: pb.InitProducerIdRequest(transactional_id="app-1"),
                       [grant(TXN, "app-1", Op.WRITE)]),
    "AddPartitionsToTxn": (
        lambda: pb.AddPartitionsToTxnRequest(
            transactional_id="app-1",
            partitions=[pb.TopicPartition(topic="orders"), pb.TopicPartition(topic="audit")],
        ),
        [grant(TXN, "app-1", Op.WRITE), grant(TOPIC, "orders", Op.WRITE),
         grant(TOPIC, "audit", Op.WRITE)],
    ),
    "EndTxn": (lambda: pb.EndTxnRequest(transactional_id="app-1"),
               [grant(TXN, "app-1", Op.WRITE)]),
    "DescribeTransaction": (lambda: pb.DescribeTransactionRequest(transactional_id="app-1"),
                            [grant(TXN, "app-1", Op.DESCRIBE)]),
    "CreateAcls": (lambda: pb.CreateAclsRequest(), [grant(CLUSTER, CLUSTER_NAME, Op.ALTER)]),
    "ElectLeaders": (lambda: pb.ElectLeadersRequest(), [grant(CLUSTER, CLUSTER_NAME, Op.ALTER)]),
    "AlterPartitionReassignments": (lambda: pb.AlterPartitionReassignmentsRequest(),
                                    [grant(CLUSTER, CLUSTER_NAME, Op.ALTER)]),
    "ListPartitionReassignments": (lambda: pb.ListPartitionReassignmentsRequest(),
                                   [grant(CLUSTER, CLUSTER_NAME, Op.DESCRIBE)]),
    "DrainBroker": (lambda: pb.DrainBrokerRequest(), [grant(CLUSTER, CLUSTER_NAME, Op.ALTER)]),
    "DeleteAcls": (lambda: pb.DeleteAclsRequest(), [grant(CLUSTER, CLUSTER_NAME, Op.ALTER)]),
    "DescribeAcls": (lambda: pb.DescribeAclsRequest(),
                     [grant(CLUSTER, CLUSTER_NAME, Op.DESCRIBE)]),
    "WhoAmI": (lambda: pb.WhoAmIRequest(), None),
    "Metadata": (lambda: pb.MetadataRequest(topics=["orders"]),
                 [grant(TOPIC, "orders", Op.DESCRIBE)]),
    "Session": (lambda: pb.SessionRequest(), None),
    # Consumer groups (issue 27): Kafka's KafkaApis handlers of the same names.
    "FindCoordinator": (lambda: pb.FindCoordinatorRequest(key="g"),
                        [grant(GROUP, "g", Op.DESCRIBE)]),
    "JoinGroup": (lambda: pb.JoinGroupRequest(group_id="g"), [grant(GROUP, "g", Op.READ)]),
    "SyncGroup": (lambda: pb.SyncGroupRequest(group_id="g"), [grant(GROUP, "g", Op.READ)]),
    "Heartbeat": (lambda: pb.HeartbeatRequest(group_id="g"), [grant(GROUP, "g", Op.READ)]),
    "LeaveGroup": (lambda: pb.LeaveGroupRequest(group_id="g"), [grant(GROUP, "g", Op.READ)]),
    "OffsetCommit": (
        lambda: pb.OffsetCommitRequest(group_id="g", offsets=[
            pb.CommittedOffset(topic="orders"), pb.CommittedOffset(topic="audit")]),
        [grant(GROUP, "g", Op.READ), grant(TOPIC, "orders", Op.READ),
         grant(TOPIC, "audit", Op.READ)],
    ),
    "OffsetFetch": (lambda: pb.OffsetFetchRequest(group_id="g"),
                    [grant(GROUP, "g", Op.DESCRIBE)]),
    "ListGroups": (lambda: pb.ListGroupsRequest(), None),
    "DescribeGroups": (lambda: pb.DescribeGroupsRequest(group_ids=["g", "h"]),
                       [grant(GROUP, "g", Op.DESCRIBE), grant(GROUP, "h", Op.DESCRIBE)]),
    "DeleteGroups": (lambda: pb.DeleteGroupsRequest(group_ids=["g", "h"]),
                     [grant(GROUP, "g", Op.DELETE), grant(GROUP, "h", Op.DELETE)]),
    "OffsetDelete": (
        lambda: pb.OffsetDeleteRequest(group_id="g", partitions=[pb.TopicPartition(topic="t")]),
        [grant(GROUP, "g", Op.DELETE), grant(TOPIC, "t", Op.READ)],
    ),
    "AddOffsetsToTxn": (lambda: pb.AddOffsetsToTxnRequest(transactional_id="app-1", group_id="g"),
                        [grant(TXN, "app-1", Op.WRITE), grant(GROUP, "g", Op.READ)]),
    "TxnOffsetCommit": (
        lambda: pb.TxnOffsetCommitRequest(transactional_id="app-1", group_id="g",
                                          offsets=[pb.CommittedOffset(topic="orders")]),
        [grant(GROUP, "g", Op.READ), grant(TOPIC, "orders", Op.READ)],
    ),
}


def admitted(authorizer: Authorizer, method: str, request: Any,
             identity: CallIdentity = ALICE) -> bool:
    rule = RULES[method]
    if rule.check is None:
        return True
    try:
        rule.check(Decider(authorizer, identity), request)
    except NotAuthorizedError:
        return False
    return True


def test_every_rpc_of_the_service_has_a_rule_and_a_case() -> None:
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["Broker"].methods}
    assert set(RULES) == methods, "an RPC without an authorization rule is refused to everyone"
    assert set(RPC_CASES) == methods, "add the new RPC to RPC_CASES"


@pytest.mark.parametrize("method", sorted(RPC_CASES))
def test_each_rpc_needs_exactly_its_acls(tmp_path: Path, method: str) -> None:
    make_request, needed = RPC_CASES[method]
    if needed is None:
        assert RULES[method].check is None or admitted(authorizer_with(tmp_path), method,
                                                       make_request())
        return
    assert not admitted(authorizer_with(tmp_path), method, make_request())
    assert admitted(authorizer_with(tmp_path, *needed), method, make_request())
    # Every one of them is needed: without any one the call is refused.
    for index in range(len(needed)):
        others = needed[:index] + needed[index + 1:]
        assert not admitted(authorizer_with(tmp_path, *others), method, make_request())
    # ... and ALL grants them too; a DENY of them refuses it again.
    all_of_them = [grant(b.resource_type, b.resource_name, Op.ALL) for b in needed]
    assert admitted(authorizer_with(tmp_path, *all_of_them), method, make_request())
    denied = [*needed, grant(needed[0].resource_type, needed[0].resource_name,
                             needed[0].operation, principal="User:*",
                             permission=AclPermissionType.DENY)]
    assert not admitted(authorizer_with(tmp_path, *denied), method, make_request())


def test_find_coordinator_of_a_transactional_id_needs_describe_on_it(tmp_path: Path) -> None:
    request = pb.FindCoordinatorRequest(key="app-1", key_type=pb.COORDINATOR_TYPE_TRANSACTION)
    assert not admitted(authorizer_with(tmp_path, grant(GROUP, "app-1", Op.DESCRIBE)),
                        "FindCoordinator", request)
    assert admitted(authorizer_with(tmp_path, grant(TXN, "app-1", Op.DESCRIBE)),
                    "FindCoordinator", request)


def test_list_groups_shows_every_group_to_cluster_describe_else_the_described_ones(
    tmp_path: Path,
) -> None:
    def listed(*bindings: AclBinding) -> list[str]:
        response = pb.ListGroupsResponse(groups=[
            pb.ListedGroup(group_id=g, state="Empty") for g in ("a", "b", "c")])
        answer = RULES["ListGroups"].answer
        assert answer is not None
        answer(Decider(authorizer_with(tmp_path, *bindings), ALICE), response)
        return [g.group_id for g in response.groups]

    assert listed() == []
    assert listed(grant(GROUP, "b", Op.DESCRIBE), grant(GROUP, "c", Op.READ)) == ["b", "c"]
    assert listed(grant(CLUSTER, CLUSTER_NAME, Op.DESCRIBE)) == ["a", "b", "c"]


def test_offset_fetch_leaves_out_topics_the_caller_may_not_describe(tmp_path: Path) -> None:
    response = pb.OffsetFetchResponse(offsets=[
        pb.CommittedOffset(topic="orders", offset=5), pb.CommittedOffset(topic="secret")])
    answer = RULES["OffsetFetch"].answer
    assert answer is not None
    answer(Decider(authorizer_with(tmp_path, grant(TOPIC, "orders", Op.READ)), ALICE), response)
    assert [(o.topic, o.offset) for o in response.offsets] == [("orders", 5)]


def test_refusals_name_operation_and_resource_but_not_whether_it_exists(tmp_path: Path) -> None:
    decider = Decider(authorizer_with(tmp_path), ALICE)
    with pytest.raises(NotAuthorizedError) as caught:
        RULES["Produce"].check(decider, pb.ProduceRequest(topic="orders"))  # type: ignore[misc]
    error = caught.value
    assert str(error) == "not authorized: User:alice may not WRITE Topic:orders"
    assert (error.operation, error.resource, error.topic) == ("WRITE", "Topic:orders", "orders")


def test_the_replication_service_needs_cluster_action(tmp_path: Path) -> None:
    methods = {m.name for m in replication_pb2.DESCRIPTOR.services_by_name["Replication"].methods}
    assert set(REPLICATION_RULES) == methods, "a Replication RPC without a rule is refused"
    rule = rule_for("/stratalog.v1.Replication/ReplicaFetchSession")
    assert rule is REPLICATION_RULES["ReplicaFetchSession"]
    request = replication_pb2.ReplicaFetchRequest(
        partitions=[replication_pb2.FetchPartition(topic="orders")])

    def allowed(*bindings: AclBinding) -> bool:
        try:
            rule.check(Decider(authorizer_with(tmp_path, *bindings), ALICE), request)  # type: ignore[misc]
        except NotAuthorizedError:
            return False
        return True

    assert not allowed()
    # Reading the topic is not enough: only servers copy logs (Kafka's inter-broker action).
    assert not allowed(grant(TOPIC, "orders", Op.READ), grant(CLUSTER, CLUSTER_NAME, Op.ALTER))
    assert allowed(grant(CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION))
    # An RPC of the service without a rule is refused (fail closed).
    unknown = rule_for("/stratalog.v1.Replication/Other")
    with pytest.raises(NotAuthorizedError, match="no authorization rule"):
        unknown.check(Decider(authorizer_with(tmp_path), ALICE), request)  # type: ignore[misc]


def test_create_topic_on_the_cluster_or_the_topic(tmp_path: Path) -> None:
    request = pb.CreateTopicRequest(name="orders-1")
    cluster = authorizer_with(tmp_path, grant(CLUSTER, CLUSTER_NAME, Op.CREATE))
    assert admitted(cluster, "CreateTopic", request)
    prefixed = authorizer_with(tmp_path, grant(TOPIC, "orders-", Op.CREATE,
                                               pattern=PatternType.PREFIXED))
    assert admitted(prefixed, "CreateTopic", request)
    assert not admitted(prefixed, "CreateTopic", pb.CreateTopicRequest(name="audit"))


def test_idempotent_init_producer_id(tmp_path: Path) -> None:
    request = pb.InitProducerIdRequest()
    assert not admitted(authorizer_with(tmp_path), "InitProducerId", request)
    assert admitted(authorizer_with(tmp_path, grant(CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)),
                    "InitProducerId", request)
    # KIP-679: WRITE on any topic is enough.
    assert admitted(authorizer_with(tmp_path, grant(TOPIC, "orders", Op.WRITE)),
                    "InitProducerId", request)
    # The refusal names the permission a user grants (issue 25 item 9), not only the cluster's.
    with pytest.raises(NotAuthorizedError, match=r"may not WRITE any topic.*--operation WRITE "
                                                 r"--topic NAME; or IDEMPOTENT_WRITE"):
        RULES["InitProducerId"].check(  # type: ignore[misc]
            Decider(authorizer_with(tmp_path, grant(TOPIC, "orders", Op.READ)), ALICE), request
        )
    # An empty transactional id is the servicer's to refuse (INVALID_ARGUMENT), not ours.
    assert admitted(authorizer_with(tmp_path), "InitProducerId",
                    pb.InitProducerIdRequest(transactional_id=""))


def test_super_users_may_do_everything(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path, super_users=["User:alice"])
    for method, (make_request, _) in RPC_CASES.items():
        assert admitted(authorizer, method, make_request())
    bob = CallIdentity(Principal.user("bob"), "10.0.0.1")
    assert not admitted(authorizer, "Produce", pb.ProduceRequest(topic="orders"), bob)


def test_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path, grant(TOPIC, "private", Op.READ),
                                 allow_everyone_if_no_acl_found=True)
    bob = CallIdentity(Principal.user("bob"), "10.0.0.1")
    assert admitted(authorizer, "Produce", pb.ProduceRequest(topic="orders"), bob)
    assert not admitted(authorizer, "FetchByOffset", pb.FetchByOffsetRequest(topic="private"),
                        bob)
    assert admitted(authorizer, "FetchByOffset", pb.FetchByOffsetRequest(topic="private"))


def test_host_matching(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path, grant(TOPIC, "orders", Op.READ, host="10.0.0.1"))
    request = pb.FetchByOffsetRequest(topic="orders")
    assert admitted(authorizer, "FetchByOffset", request)
    elsewhere = CallIdentity(ALICE.principal, "10.0.0.2", "password")
    assert not admitted(authorizer, "FetchByOffset", request, elsewhere)


def test_health_is_open_reflection_needs_describe_unknown_methods_are_refused(
    tmp_path: Path,
) -> None:
    assert rule_for("/grpc.health.v1.Health/Check").check is None
    assert rule_for("/stratalog.v1.Broker/WhoAmI").check is None
    reflection = rule_for("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    nobody = Decider(authorizer_with(tmp_path), ALICE)
    with pytest.raises(NotAuthorizedError, match="DESCRIBE Cluster:kafka-cluster"):
        reflection.check(nobody, None)  # type: ignore[misc]
    describe = Decider(authorizer_with(tmp_path, grant(CLUSTER, CLUSTER_NAME, Op.DESCRIBE)),
                       ALICE)
    reflection.check(describe, None)  # type: ignore[misc]
    opened = rule_for("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                      reflection_open=True)
    assert opened.check is None
    for method in ("/stratalog.v1.Broker/NotYetWritten", "/other.Service/Method"):
        with pytest.raises(NotAuthorizedError):
            rule_for(method).check(describe, None)  # type: ignore[misc]


# ------------------------------------------------------------------------ answers


def _topic(name: str) -> pb.TopicDescription:
    return pb.TopicDescription(name=name, configs={"retention.ms": "1"},
                               overridden_configs=["retention.ms"],
                               partitions=[pb.PartitionDescription(partition=0)])


def test_list_topics_shows_only_what_the_caller_may_describe(tmp_path: Path) -> None:
    authorizer = authorizer_with(
        tmp_path,
        grant(TOPIC, "orders", Op.READ),           # implies DESCRIBE
        grant(TOPIC, "audit", Op.ALTER_CONFIGS),   # implies DESCRIBE_CONFIGS, not DESCRIBE
        grant(TOPIC, "pay", Op.DESCRIBE, pattern=PatternType.PREFIXED),
        grant(TOPIC, "pay", Op.DESCRIBE_CONFIGS, pattern=PatternType.PREFIXED),
    )
    response = pb.ListTopicsResponse(topics=[_topic(n) for n in ("audit", "orders", "payments",
                                                                  "secret")])
    RULES["ListTopics"].answer(Decider(authorizer, ALICE), response)  # type: ignore[misc]
    assert [t.name for t in response.topics] == ["orders", "payments"]
    assert dict(response.topics[0].configs) == {}          # no DESCRIBE_CONFIGS on orders
    assert dict(response.topics[1].configs) == {"retention.ms": "1"}
    assert len(response.topics[0].partitions) == 1


def test_metadata_for_every_topic_leaves_out_those_without_describe(tmp_path: Path) -> None:
    authorizer = authorizer_with(
        tmp_path,
        grant(TOPIC, "orders", Op.READ),           # implies DESCRIBE
        grant(TOPIC, "audit", Op.ALTER_CONFIGS),   # does not
    )
    response = pb.MetadataResponse(
        brokers=[pb.BrokerMetadata(node_id=0, address="h:1")], controller_id=0,
        topics=[pb.TopicMetadata(name=n, partitions=[pb.PartitionMetadata(replicas=[0])])
                for n in ("audit", "orders", "secret")],
    )
    RULES["Metadata"].answer(Decider(authorizer, ALICE), response)  # type: ignore[misc]
    assert [t.name for t in response.topics] == ["orders"]
    assert list(response.topics[0].partitions[0].replicas) == [0]
    assert len(response.brokers) == 1  # the brokers are open, as in Kafka
    with pytest.raises(NotAuthorizedError):
        RULES["Metadata"].check(  # type: ignore[misc]
            Decider(authorizer, ALICE), pb.MetadataRequest(topics=["orders", "secret"]))


def test_topic_answers_carry_configs_only_with_describe_configs(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path, grant(TOPIC, "orders", Op.CREATE))
    response = pb.CreateTopicResponse(topic=_topic("orders"))
    RULES["CreateTopic"].answer(Decider(authorizer, ALICE), response)  # type: ignore[misc]
    assert dict(response.topic.configs) == {}
    assert list(response.topic.overridden_configs) == []  # which are set is hidden too
    authorizer = authorizer_with(tmp_path, grant(TOPIC, "orders", Op.DESCRIBE_CONFIGS))
    response = pb.DescribeTopicResponse(topic=_topic("orders"))
    RULES["DescribeTopic"].answer(Decider(authorizer, ALICE), response)  # type: ignore[misc]
    assert dict(response.topic.configs) == {"retention.ms": "1"}
    assert list(response.topic.overridden_configs) == ["retention.ms"]


def test_describe_transaction_hides_partitions_of_topics_without_describe(
    tmp_path: Path,
) -> None:
    authorizer = authorizer_with(tmp_path, grant(TOPIC, "orders", Op.WRITE))
    response = pb.DescribeTransactionResponse(
        transactional_id="app-1",
        partitions=[pb.TopicPartition(topic="orders", partition=0),
                    pb.TopicPartition(topic="secret", partition=1),
                    pb.TopicPartition(topic="orders", partition=2)],
    )
    RULES["DescribeTransaction"].answer(Decider(authorizer, ALICE), response)  # type: ignore
    assert [(p.topic, p.partition) for p in response.partitions] == [("orders", 0),
                                                                      ("orders", 2)]


# ------------------------------------------------------------------------ cache and updates


async def test_decisions_are_cached_until_the_acls_change(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path)
    assert not authorizer.authorize(ALICE, Op.READ, TOPIC, "orders")
    assert authorizer.cached_decisions == 1
    await authorizer.create_acls([grant(TOPIC, "orders", Op.READ)])
    assert authorizer.cached_decisions == 0
    assert authorizer.authorize(ALICE, Op.READ, TOPIC, "orders")
    deleted = await authorizer.delete_acls([AclBindingFilter(TOPIC, "orders")])
    assert deleted == [grant(TOPIC, "orders", Op.READ)]
    assert not authorizer.authorize(ALICE, Op.READ, TOPIC, "orders")
    # The file holds what applies: the store read again agrees.
    await authorizer.create_acls([grant(TOPIC, "t", Op.WRITE)])
    reopened = AclStore.open([tmp_path])
    assert reopened.bindings == authorizer.acls.bindings == (grant(TOPIC, "t", Op.WRITE),)


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path, cache_entries_max=3)
    for index in range(10):
        authorizer.authorize(ALICE, Op.READ, TOPIC, f"t{index}")
    assert authorizer.cached_decisions == 3
    uncached = authorizer_with(tmp_path, cache_entries_max=0)
    assert not uncached.authorize(ALICE, Op.READ, TOPIC, "t")
    assert uncached.cached_decisions == 0


async def test_create_is_all_or_nothing_and_idempotent(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path)
    good = grant(TOPIC, "orders", Op.READ)
    with pytest.raises(InvalidAclError, match=r"creations\[1\].host"):
        await authorizer.create_acls([good, grant(TOPIC, "x", Op.READ, host="nowhere")])
    assert authorizer.acls.bindings == ()
    assert AclStore.open([tmp_path]).bindings == ()
    await authorizer.create_acls([good, good])
    await authorizer.create_acls([good])
    assert authorizer.acls.bindings == (good,)


async def test_limits_name_their_setting(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path, bindings_max=2, request_entries_max=3)
    with pytest.raises(AclLimitError) as caught:
        await authorizer.create_acls([grant(TOPIC, f"t{i}", Op.READ) for i in range(4)])
    assert caught.value.limit == "acl_request_entries_max"
    await authorizer.create_acls([grant(TOPIC, f"t{i}", Op.READ) for i in range(2)])
    with pytest.raises(AclLimitError, match="would hold 3") as caught:
        await authorizer.create_acls([grant(TOPIC, "t9", Op.READ)])
    assert caught.value.limit == "acl_bindings_max"
    with pytest.raises(AclLimitError):
        await authorizer.delete_acls([AclBindingFilter()] * 4)
    assert len(authorizer.acls) == 2


async def test_concurrent_updates_are_serialised(tmp_path: Path) -> None:
    authorizer = authorizer_with(tmp_path)
    await asyncio.gather(*(
        authorizer.create_acls([grant(TOPIC, f"t{i}", Op.READ)]) for i in range(20)
    ))
    assert len(authorizer.acls) == 20
    assert AclStore.open([tmp_path]).bindings == authorizer.acls.bindings


def test_denials_are_logged_but_not_without_bound(tmp_path: Path, caplog) -> None:
    authorizer = authorizer_with(tmp_path)
    with caplog.at_level("INFO", logger="stratalog.server.security.authorizer"):
        for index in range(100):
            authorizer.authorize(ALICE, Op.READ, TOPIC, f"t{index}")
    lines = [r.getMessage() for r in caplog.records]
    # Every string a client chose is shown escaped (server/client_text.py).
    assert lines[0] == "denied 'User:alice' from '10.0.0.1': READ on 'Topic:t0'"
    assert 1 <= len(lines) <= 40  # 20 a second; the test may straddle a second


def test_a_change_the_storage_learns_of_applies_at_the_next_decision(tmp_path: Path) -> None:
    # Another server's update, as the cluster's ACL store takes it from etcd: the storage's
    # bindings and revision move without the authorizer's update path.
    store = AclStore.open([tmp_path])
    store.write([grant(TOPIC, "orders", Op.READ)])
    authorizer = Authorizer(store)
    assert authorizer.authorize(ALICE, Op.READ, TOPIC, "orders")  # now cached
    store.write([grant(TOPIC, "orders", Op.READ, permission=AclPermissionType.DENY)])
    assert not authorizer.authorize(ALICE, Op.READ, TOPIC, "orders")
    assert authorizer.acls.bindings == store.bindings
    assert authorizer.cached_decisions == 1  # the cache was emptied with the change


def test_an_update_applies_to_the_set_the_storage_holds_when_it_writes(tmp_path: Path) -> None:
    # The change is computed from the storage's bindings at write time, not the authorizer's
    # last index: a binding that arrived meanwhile (another server's) is kept.
    store = AclStore.open([tmp_path])
    authorizer = Authorizer(store)
    theirs = grant(TOPIC, "theirs", Op.READ)
    store.write([theirs])
    ours = grant(TOPIC, "ours", Op.READ)
    asyncio.run(authorizer.create_acls([ours]))
    assert store.bindings == (theirs, ours)
    deleted = asyncio.run(authorizer.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "theirs", PatternType.LITERAL, None, None, Op.ANY,
        AclPermissionType.ANY)]))
    assert deleted == [theirs] and store.bindings == (ours,)


def test_an_invalid_topic_name_is_refused_before_anything_is_cached_or_logged(
    tmp_path: Path, caplog
) -> None:
    authorizer = authorizer_with(tmp_path)
    with caplog.at_level("INFO", logger="stratalog.server.security.authorizer"):
        for name in ("x" * 250, "a\nINFO fake line", "", "..", "x" * (256 * 1024)):
            with pytest.raises(InvalidTopicError, match="Topic name is invalid"):
                authorizer.authorize(ALICE, Op.DESCRIBE, TOPIC, name)
    assert authorizer.cached_decisions == 0
    assert caplog.records == []
    authorizer.check()


def test_the_decision_cache_is_bounded_in_bytes(tmp_path: Path) -> None:
    # Transactional ids may be 32 KiB: 100 of them would be 3.2 MiB; the cache keeps 1 MiB.
    authorizer = authorizer_with(tmp_path, cache_bytes_max=1 << 20)
    for index in range(100):
        authorizer.authorize(ALICE, Op.WRITE, TXN, f"{index:05d}" + "t" * 32_000)
        authorizer.check()
    assert authorizer.cached_bytes <= 1 << 20
    assert 0 < authorizer.cached_decisions < 100
    # The newest decision is the one kept; one larger than the whole budget is not cached.
    authorizer.authorize(ALICE, Op.WRITE, TXN, "t" * (2 << 20))
    authorizer.check()
    assert ALICE.principal  # the identity is unchanged by any of it


def test_the_transaction_markers_service_needs_cluster_action(tmp_path: Path) -> None:
    service = transaction_markers_pb2.DESCRIPTOR.services_by_name["TransactionMarkers"]
    assert set(TRANSACTION_MARKERS_RULES) == {m.name for m in service.methods}, (
        "a TransactionMarkers RPC without a rule is refused")
    for name in TRANSACTION_MARKERS_RULES:
        rule = rule_for(f"/stratalog.v1.TransactionMarkers/{name}")
        assert rule is TRANSACTION_MARKERS_RULES[name]
        request = transaction_markers_pb2.WriteTxnMarkersRequest(producer_id=1)
        with pytest.raises(NotAuthorizedError, match="CLUSTER_ACTION"):
            rule.check(Decider(authorizer_with(tmp_path), ALICE), request)  # type: ignore[misc]
        rule.check(Decider(authorizer_with(tmp_path, grant(CLUSTER, CLUSTER_NAME,
                                                           Op.CLUSTER_ACTION)), ALICE),
                   request)  # type: ignore[misc]
