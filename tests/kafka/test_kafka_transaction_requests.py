"""The transaction APIs request by request (server/kafka/apis/transactions.py), on a real server
with kafka-python's message classes as the oracle: KIP-360's expected producer id and epoch,
the per-partition errors of AddPartitionsToTxn and TxnOffsetCommit (OPERATION_NOT_ATTEMPTED for
the partitions a failed one held back), PRODUCER_FENCED told as INVALID_PRODUCER_EPOCH to old
versions, bad values refused with INVALID_REQUEST, and KafkaApis' authorization."""

from __future__ import annotations

import random
import uuid
from typing import Any

from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from stratalog.client import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    SyncClient,
)
from stratalog.server.transactions.producer_ids import LOCAL_ID_BITS
from tests.cluster.conftest import etcd, start_member, wait_for  # noqa: F401  (fixtures)
from tests.kafka.kafka_wire import KafkaWire

# Kafka's error codes (clients/src/main/java/org/apache/kafka/common/protocol/Errors.java).
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION = 0, 1, 3
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST = 30, 31, 42
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT = 47, 48, 50
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED = 53, 55, 90
COORDINATOR_LOAD_IN_PROGRESS = 14

ANONYMOUS = "User:ANONYMOUS"


def _init(wire: KafkaWire, transactional_id: str | None, version: int = 4,
          expected: tuple[int, int] = (-1, -1), timeout_ms: int = 60_000) -> tuple[int, int, int]:
    response = wire.call(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=timeout_ms,
        producer_id=expected[0], producer_epoch=expected[1]),
        InitProducerIdResponse, version)
    return response.error_code, response.producer_id, response.producer_epoch


def _add_partitions(wire: KafkaWire, transactional_id: str, producer: tuple[int, int],
                    partitions: dict[str, list[int]], version: int = 3) -> dict[tuple[str, int], int]:
    topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=name, partitions=indexes)
              for name, indexes in partitions.items()]
    response = wire.call(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1], v3_and_below_topics=topics),
        AddPartitionsToTxnResponse, version)
    return {(topic.name, result.partition_index): result.partition_error_code
            for topic in response.results_by_topic_v3_and_below
            for result in topic.results_by_partition}


def _end(wire: KafkaWire, transactional_id: str, producer: tuple[int, int], commit: bool,
         version: int = 3) -> int:
    return wire.call(EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                   producer_epoch=producer[1], committed=commit),
                     EndTxnResponse, version).error_code


def _add_offsets(wire: KafkaWire, transactional_id: str, producer: tuple[int, int],
                 group_id: str, version: int = 3) -> int:
    return wire.call(AddOffsetsToTxnRequest(
        transactional_id=transactional_id, producer_id=producer[0], producer_epoch=producer[1],
        group_id=group_id), AddOffsetsToTxnResponse, version).error_code


def _txn_offset_commit(wire: KafkaWire, transactional_id: str, producer: tuple[int, int],
                       group_id: str, offsets: dict[tuple[str, int], int],
                       version: int = 3) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=""))
    response = wire.call(TxnOffsetCommitRequest(
        transactional_id=transactional_id, group_id=group_id, producer_id=producer[0],
        producer_epoch=producer[1], generation_id=-1, member_id="", group_instance_id=None,
        topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=name, partitions=items)
                for name, items in by_topic.items()]), TxnOffsetCommitResponse, version)
    return {(topic.name, partition.partition_index): partition.error_code
            for topic in response.topics for partition in topic.partitions}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_an_epoch_bump_with_the_expected_producer_and_a_stale_one_fenced(server):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        transactional_id = _name("tx")
        code, producer_id, epoch = _init(wire, transactional_id)
        assert (code, epoch) == (NONE, 0)
        # KIP-360: the current producer bumps its own epoch.
        assert _init(wire, transactional_id, expected=(producer_id, 0)) == (
            NONE, producer_id, 1)
        # Its retry (the answer lost) gets the same epoch again.
        assert _init(wire, transactional_id, expected=(producer_id, 0)) == (
            NONE, producer_id, 1)
        # Another epoch is fenced: PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH before.
        assert _init(wire, transactional_id, expected=(producer_id, 7))[0] == PRODUCER_FENCED
        assert _init(wire, transactional_id, version=3,
                     expected=(producer_id, 7))[0] == INVALID_PRODUCER_EPOCH
        # One of the two without the other is a malformed request (Kafka's KafkaApis).
        assert _init(wire, transactional_id, expected=(producer_id, -1))[0] == INVALID_REQUEST
        assert _init(wire, transactional_id, timeout_ms=10**9)[0] == INVALID_TRANSACTION_TIMEOUT
        assert _init(wire, "")[0] == INVALID_REQUEST
        # An idempotent producer's bump is a new producer id, whatever it names.
        code, other_id, other_epoch = _init(wire, None, expected=(producer_id, 1))
        assert (code, other_epoch) == (NONE, 0) and other_id != producer_id
        # The fencing that EndTxn reports, by version.
        assert _end(wire, transactional_id, (producer_id, 0), True) == PRODUCER_FENCED
        assert _end(wire, transactional_id, (producer_id, 0), True,
                    version=1) == INVALID_PRODUCER_EPOCH
    finally:
        wire.close()


def test_a_partition_that_fails_holds_back_the_others_and_nothing_joins(server):
    topic = _name("t")
    with SyncClient(server.target) as client:
        client.create_topic(topic, 2)
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        transactional_id = _name("tx")
        code, producer_id, epoch = _init(wire, transactional_id)
        assert code == NONE
        producer = (producer_id, epoch)
        assert _add_partitions(wire, transactional_id, producer, {topic: [0, 1, 7]}) == {
            (topic, 0): OPERATION_NOT_ATTEMPTED, (topic, 1): OPERATION_NOT_ATTEMPTED,
            (topic, 7): UNKNOWN_TOPIC_OR_PARTITION}
        # A server-written topic never joins a client's transaction.
        assert _add_partitions(wire, transactional_id, producer,
                               {topic: [0], "__consumer_offsets": [0]}) == {
            (topic, 0): OPERATION_NOT_ATTEMPTED,
            ("__consumer_offsets", 0): TOPIC_AUTHORIZATION_FAILED}
        # Nothing was added: no transaction is open to commit.
        assert _end(wire, transactional_id, producer, True) == INVALID_TXN_STATE
        assert _add_partitions(wire, transactional_id, producer, {topic: [0, 1]}) == {
            (topic, 0): NONE, (topic, 1): NONE}
        # TxnOffsetCommit answers each partition: an unknown one, one of the transaction's
        # group partition not added yet (INVALID_TXN_STATE: AddOffsetsToTxn first).
        group = _name("g")
        assert _txn_offset_commit(wire, transactional_id, producer, group,
                                  {(topic, 0): 0, (topic, 9): 0}) == {
            (topic, 0): INVALID_TXN_STATE, (topic, 9): UNKNOWN_TOPIC_OR_PARTITION}
        # The partition's checks as for any commit: past the log end of an empty partition.
        assert _txn_offset_commit(wire, transactional_id, producer, group, {(topic, 1): 5}) == {
            (topic, 1): OFFSET_OUT_OF_RANGE}
        assert _add_offsets(wire, transactional_id, producer, group) == NONE
        assert _txn_offset_commit(wire, transactional_id, (-1, 0), group, {(topic, 0): 1}) == {
            (topic, 0): INVALID_REQUEST}
        assert _txn_offset_commit(wire, transactional_id, producer, group,
                                  {(topic, 0): 0, (topic, 1): 0}) == {
            (topic, 0): NONE, (topic, 1): NONE}
        assert _end(wire, transactional_id, producer, False) == NONE
        assert _end(wire, transactional_id, producer, True) == INVALID_TXN_STATE
    finally:
        wire.close()


def test_authorization_as_kafkas(start_server, tmp_path):
    data = tmp_path / "data"
    super_anonymous = ("--authorizer", "acl", "--super-users", ANONYMOUS)
    acl_server = ("--authorizer", "acl")
    server = start_server(data, *super_anonymous)
    with SyncClient(server.target) as client:
        client.create_topic("open", 1)
        client.create_topic("closed", 1)
    assert server.stop() == 0

    # No ACL at all: an idempotent producer needs IDEMPOTENT_WRITE or WRITE on some topic.
    server = start_server(data, *acl_server)
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        assert _init(wire, None)[0] == CLUSTER_AUTHORIZATION_FAILED
    finally:
        wire.close()
    assert server.stop() == 0

    server = start_server(data, *super_anonymous)
    with SyncClient(server.target) as client:
        client.create_acls([
            AclBinding(resource_type, name, PatternType.LITERAL, ANONYMOUS, "*", operation,
                       AclPermissionType.ALLOW)
            for resource_type, name, operation in (
                (ResourceType.TOPIC, "open", AclOperation.WRITE),
                (ResourceType.TRANSACTIONAL_ID, "tx-ok", AclOperation.WRITE),
                (ResourceType.GROUP, "g-ok", AclOperation.READ),
            )])
    assert server.stop() == 0

    server = start_server(data, *acl_server)
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        assert _init(wire, None)[0] == NONE  # WRITE on one topic suffices (KIP-679)
        assert _init(wire, "tx-denied")[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        code, producer_id, epoch = _init(wire, "tx-ok")
        assert code == NONE
        producer = (producer_id, epoch)
        assert _add_partitions(wire, "tx-ok", producer, {"open": [0], "closed": [0]}) == {
            ("open", 0): OPERATION_NOT_ATTEMPTED, ("closed", 0): TOPIC_AUTHORIZATION_FAILED}
        assert _add_partitions(wire, "tx-denied", producer, {"open": [0]}) == {
            ("open", 0): TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        assert _add_offsets(wire, "tx-ok", producer, "g-denied") == GROUP_AUTHORIZATION_FAILED
        assert _add_offsets(wire, "tx-denied", producer, "g-ok") == (
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert _txn_offset_commit(wire, "tx-ok", producer, "g-denied", {("open", 0): 0}) == {
            ("open", 0): GROUP_AUTHORIZATION_FAILED}
        # READ on the topic is needed too: only WRITE was granted on "open".
        assert _txn_offset_commit(wire, "tx-ok", producer, "g-ok", {("open", 0): 0}) == {
            ("open", 0): TOPIC_AUTHORIZATION_FAILED}
        assert _end(wire, "tx-denied", producer, True) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _add_partitions(wire, "tx-ok", producer, {"open": [0]}) == {("open", 0): NONE}
        assert _end(wire, "tx-ok", producer, True) == NONE
    finally:
        wire.close()


def test_cluster_mode_serves_idempotent_producers_and_transactional_ids(
    start_member,  # noqa: F811  (the fixture imported above)
):
    member = start_member(1, "--transaction-state-log-num-partitions", "3")
    wire = KafkaWire(member.kafka_bootstrap)
    try:
        code, producer_id, epoch = _init(wire, None)
        assert (code, epoch) == (NONE, 0)
        assert producer_id >> LOCAL_ID_BITS == 1  # the node id above the server's counter
        # A transactional id: the lone member leads every partition of the state topic (made
        # by this first request); served once its partition loaded (retriable until then).
        transactional_id = _name("tx")
        answers: list[tuple[int, int, int]] = []
        wait_for(lambda: answers.append(_init(wire, transactional_id))
                 or answers[-1][0] == NONE, "InitProducerId served")
        assert {code for code, _, _ in answers[:-1]} <= {COORDINATOR_LOAD_IN_PROGRESS}
        _, producer_id, epoch = answers[-1]
        assert producer_id >> LOCAL_ID_BITS == 1
        assert _end(wire, transactional_id, (producer_id, epoch), True) == INVALID_TXN_STATE
        assert _end(wire, transactional_id, (producer_id, epoch - 1), True) == PRODUCER_FENCED
    finally:
        wire.close()


def _random_name(rng: random.Random) -> str:
    return rng.choice(["", "t", "__consumer_offsets", "bad/name", "x" * 300, _name("r"),
                       "é" * 20])


def _random_request(rng: random.Random) -> tuple[Any, Any, int]:
    """One of the five requests with random field values, a version it is served at."""
    int64 = rng.choice([-1, 0, 1, rng.randrange(-2**63, 2**63)])
    int16 = rng.choice([-1, 0, 32767, rng.randrange(-2**15, 2**15)])
    int32 = rng.choice([-1, 0, 1, rng.randrange(-2**31, 2**31)])
    kind = rng.randrange(5)
    if kind == 0:
        return (InitProducerIdRequest(
            transactional_id=rng.choice([None, _random_name(rng)]), transaction_timeout_ms=int32,
            producer_id=int64, producer_epoch=int16), InitProducerIdResponse, rng.randrange(5))
    if kind == 1:
        topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=_random_name(rng), partitions=[rng.randrange(-3, 5) for _ in range(3)])
            for _ in range(rng.randrange(3))]
        return (AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=_random_name(rng), v3_and_below_producer_id=int64,
            v3_and_below_producer_epoch=int16, v3_and_below_topics=topics),
            AddPartitionsToTxnResponse, rng.randrange(4))
    if kind == 2:
        return (AddOffsetsToTxnRequest(
            transactional_id=_random_name(rng), producer_id=int64, producer_epoch=int16,
            group_id=_random_name(rng)), AddOffsetsToTxnResponse, rng.randrange(4))
    if kind == 3:
        return (EndTxnRequest(transactional_id=_random_name(rng), producer_id=int64,
                              producer_epoch=int16, committed=rng.random() < 0.5),
                EndTxnResponse, rng.randrange(4))
    partition = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
    topics = [TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=_random_name(rng), partitions=[
        partition(partition_index=rng.randrange(-2, 4), committed_offset=int64,
                  committed_leader_epoch=int32,
                  committed_metadata=rng.choice([None, "", "m" * 5000]))
        for _ in range(2)]) for _ in range(rng.randrange(3))]
    return (TxnOffsetCommitRequest(
        transactional_id=_random_name(rng), group_id=_random_name(rng), producer_id=int64,
        producer_epoch=int16, generation_id=int32, member_id=_random_name(rng),
        group_instance_id=rng.choice([None, _random_name(rng)]), topics=topics),
        TxnOffsetCommitResponse, rng.randrange(4))


def test_random_field_values_are_each_answered_and_the_connection_stays_open(server):
    """Any value of any field gets an answer with error codes, never a closed connection or
    a server error (UNKNOWN_SERVER_ERROR, -1)."""
    rng = random.Random(28)
    with KafkaWire(server.kafka_bootstrap) as wire:
        for _ in range(300):
            request, response_class, version = _random_request(rng)
            response = wire.call(request, response_class, version)
            codes = [getattr(response, "error_code", 0)]
            for topic in (getattr(response, "results_by_topic_v3_and_below", None)
                          or getattr(response, "topics", None) or []):
                codes += [getattr(p, "partition_error_code", None) or getattr(p, "error_code", 0)
                          for p in (getattr(topic, "results_by_partition", None)
                                    or topic.partitions)]
            assert -1 not in codes, (request, response)
