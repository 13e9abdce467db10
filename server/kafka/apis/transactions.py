"""Idempotent and transactional producers: InitProducerId (key 22, versions 0 to 4),
AddPartitionsToTxn (24, 0 to 3), AddOffsetsToTxn (25, 0 to 3), EndTxn (26, 0 to 3) and
TxnOffsetCommit (28, 0 to 3), each a translation to the transaction coordinator
(server/transactions/) or, for the offsets, to the group service, as the gRPC front end's
server/rpc/transaction_rpcs.py and group_rpcs.py do, and as Kafka's ``KafkaApis``
(``handleInitProducerIdRequest``, ``handleAddPartitionsToTxnRequest``,
``handleAddOffsetsToTxnRequest``, ``handleEndTxnRequest``, ``handleTxnOffsetCommitRequest`` in
``core/src/main/scala/kafka/server/KafkaApis.scala``) answers them.

The version ranges stop where Kafka's transaction version 2 (KIP-890) begins: InitProducerId
v5, AddOffsetsToTxn v4, EndTxn v5 and TxnOffsetCommit v4 tell the broker the client speaks it
(no AddPartitionsToTxn from the client; markers with the epoch bumped per transaction), which
the coordinator does not serve; AddPartitionsToTxn v4+ is the brokers' batched verification
(KafkaApis refuses it from clients without CLUSTER_ACTION). Below them everything is served:
InitProducerId v3+ carries the producer id and epoch of a producer that goes on after an
abortable error (KIP-360, the coordinator's ``expected``), v4 answers PRODUCER_FENCED; the
flexible versions (InitProducerId v2+, the others v3+) are the newest ones kafka-python 3.x,
aiokafka and librdkafka 2.x ask for, and each client takes the highest version both sides know
from ApiVersions.

Rules kept from KafkaApis:

* Authorization: InitProducerId with a transactional id needs WRITE on it
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), without one IDEMPOTENT_WRITE on the cluster or WRITE
  on some topic (CLUSTER_AUTHORIZATION_FAILED, KIP-679); AddPartitionsToTxn WRITE on the id (every
  partition refused so) and WRITE on each topic (internal topics never): a partition refused,
  or unknown, fails the request, its partitions get their error and the others
  OPERATION_NOT_ATTEMPTED; AddOffsetsToTxn and TxnOffsetCommit WRITE on the id and READ on the
  group (GROUP_AUTHORIZATION_FAILED), TxnOffsetCommit READ on each topic as well; EndTxn WRITE
  on the id.
* Clients older than PRODUCER_FENCED (InitProducerId < 4, AddPartitionsToTxn, AddOffsetsToTxn
  and EndTxn < 2) are told INVALID_PRODUCER_EPOCH instead; TxnOffsetCommit < 2 is told
  COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS (KAFKA-7296).
* In cluster mode ``ctx.services.transactions`` is the cluster's (server/transaction_service/):
  a transactional id is served by the leader of its state partition (NOT_COORDINATOR
  elsewhere, COORDINATOR_LOAD_IN_PROGRESS while it loads; docs/cluster.md, "Transactions");
  idempotent producers get cluster-wide producer ids.

These responses have no error message field: a refusal's reason is logged at INFO for the
requests a client cannot get right by retrying (at most :data:`REFUSALS_LOGGED_PER_S` lines a
second).

The coordinator's calls block (they fsync its state log and write markers): they run in the
server's executor. Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.api_key import ApiKey
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

from stratalog.server.client_text import loggable
from stratalog.server.groups import PartitionOffset
from stratalog.server.groups import TxnOffsetCommitRequest as GroupTxnOffsetCommit
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of, message_of
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from stratalog.server.storage.errors import UnknownTopicOrPartitionError
from stratalog.server.storage.log_manager import INTERNAL_TOPICS, SERVER_WRITTEN_TOPICS
from stratalog.server.transactions import ProducerIdAndEpoch
from stratalog.server.transactions.transaction_metadata import (
    PRODUCER_EPOCH_MAX,
    TopicPartition,
)

__all__ = [
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "end_txn",
    "init_producer_id",
    "txn_offset_commit",
]

logger = logging.getLogger(__name__)

_Op = AclOperation
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult
_OffsetTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_OffsetPartition = _OffsetTopic.TxnOffsetCommitResponsePartition
#: Topics no client adds to a transaction: the server writes them (Kafka's
#: ``Topic.isInternal`` filter before the WRITE check).
_INTERNAL = INTERNAL_TOPICS | SERVER_WRITTEN_TOPICS
#: Kafka's NO_PRODUCER_ID / NO_PRODUCER_EPOCH in InitProducerId v3+.
_NO_PRODUCER = (-1, -1)
#: Kafka's OPERATION_NOT_ATTEMPTED: the partition was fine, another one failed the request.
_OPERATION_NOT_ATTEMPTED = Code.OPERATION_NOT_ATTEMPTED


# ------------------------------------------------------------------------ InitProducerId


@kafka_api(ApiKey.InitProducerId, versions=(0, 4))
async def init_producer_id(ctx: RequestContext,
                           request: InitProducerIdRequest) -> InitProducerIdResponse:
    version = request.API_VERSION
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not ctx.allowed(_Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return _init_answer(Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not _may_write_idempotently(ctx):
        return _init_answer(Code.CLUSTER_AUTHORIZATION_FAILED)
    expected: ProducerIdAndEpoch | None = None
    if version >= 3 and (request.producer_id, request.producer_epoch) != _NO_PRODUCER:
        if request.producer_id < 0 or not 0 <= request.producer_epoch <= PRODUCER_EPOCH_MAX:
            # Kafka: one of the two set without the other is INVALID_REQUEST.
            _log_refusal(ctx, f"producer id {request.producer_id} with epoch "
                         f"{request.producer_epoch}: give both, or neither (-1, -1)")
            return _init_answer(Code.INVALID_REQUEST)
        expected = ProducerIdAndEpoch(request.producer_id, request.producer_epoch)
    try:
        producer = await _blocking(ctx, ctx.services.transactions.init_producer_id,
                                   transactional_id, request.transaction_timeout_ms, expected)
    except Exception as exc:
        return _init_answer(_fenced_as(_failure(ctx, exc), version, 4))
    return _init_answer(Code.NONE, producer.producer_id, producer.producer_epoch)


def _init_answer(code: int, producer_id: int = -1, producer_epoch: int = -1
                 ) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=producer_id,
                                  producer_epoch=producer_epoch)


def _may_write_idempotently(ctx: RequestContext) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic (KIP-679)."""
    if ctx.allowed(_Op.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME):
        return True
    authorizer = ctx.services.authorizer
    return authorizer is None or authorizer.authorize_by_resource_type(
        ctx.identity, _Op.WRITE, ResourceType.TOPIC)


# ------------------------------------------------------------------------ AddPartitionsToTxn


@kafka_api(ApiKey.AddPartitionsToTxn, versions=(0, 3))
async def add_partitions_to_txn(ctx: RequestContext, request: AddPartitionsToTxnRequest
                                ) -> AddPartitionsToTxnResponse:
    transactional_id = request.v3_and_below_transactional_id
    requested = list(dict.fromkeys(
        (topic.name, partition)
        for topic in request.v3_and_below_topics for partition in topic.partitions))
    if not ctx.allowed(_Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return _partitions_answer(
            {tp: Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in requested})
    writable: dict[str, bool] = {}
    refused: dict[TopicPartition, int] = {}
    for topic, partition in requested:
        if topic not in writable:
            writable[topic] = topic not in _INTERNAL and ctx.allowed(
                _Op.WRITE, ResourceType.TOPIC, topic)
        if not writable[topic]:
            refused[(topic, partition)] = Code.TOPIC_AUTHORIZATION_FAILED
            continue
        try:
            # Only existing partitions join a transaction: a marker could never be written to
            # another (Kafka's KafkaApis asks its metadata cache).
            ctx.services.replicas.check_partition_exists(topic, partition)
        except UnknownTopicOrPartitionError:
            refused[(topic, partition)] = Code.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        return _partitions_answer({tp: refused.get(tp, _OPERATION_NOT_ATTEMPTED)
                                   for tp in requested})
    if not requested:
        return _partitions_answer({})
    try:
        await _blocking(ctx, ctx.services.transactions.add_partitions_to_txn, transactional_id,
                        request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                        requested)
        code = Code.NONE
    except Exception as exc:
        code = _fenced_as(_failure(ctx, exc), request.API_VERSION, 2)
    return _partitions_answer(dict.fromkeys(requested, code))


def _partitions_answer(codes: dict[TopicPartition, int]) -> AddPartitionsToTxnResponse:
    by_topic: dict[str, list[_PartitionResult]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            _PartitionResult(partition_index=partition, partition_error_code=code))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
        _TopicResult(name=topic, results_by_partition=results)
        for topic, results in by_topic.items()])


# ------------------------------------------------------------------------ AddOffsetsToTxn


@kafka_api(ApiKey.AddOffsetsToTxn, versions=(0, 3))
async def add_offsets_to_txn(ctx: RequestContext, request: AddOffsetsToTxnRequest
                             ) -> AddOffsetsToTxnResponse:
    transactional_id, group_id = request.transactional_id, request.group_id
    if not ctx.allowed(_Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return _offsets_to_txn_answer(Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allowed(_Op.READ, ResourceType.GROUP, group_id):
        return _offsets_to_txn_answer(Code.GROUP_AUTHORIZATION_FAILED)
    groups = ctx.services.groups
    try:
        invalid = groups.config.group_id_error(group_id)
        if invalid is not None:
            raise invalid
        # The group's __consumer_offsets partition joins the transaction (in the executor).
        await groups.add_offsets_to_txn(transactional_id, request.producer_id,
                                        request.producer_epoch, group_id)
    except Exception as exc:
        return _offsets_to_txn_answer(_fenced_as(_failure(ctx, exc), request.API_VERSION, 2))
    return _offsets_to_txn_answer(Code.NONE)


def _offsets_to_txn_answer(code: int) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


# ------------------------------------------------------------------------ EndTxn


@kafka_api(ApiKey.EndTxn, versions=(0, 3))
async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not ctx.allowed(_Op.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(throttle_time_ms=0,
                              error_code=Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        # Returns once the outcome is logged and the markers written (or queued for retry).
        await _blocking(ctx, functools.partial(ctx.services.transactions.end_txn,
                                               commit=bool(request.committed)),
                        request.transactional_id, request.producer_id, request.producer_epoch)
    except Exception as exc:
        return EndTxnResponse(throttle_time_ms=0, error_code=_fenced_as(
            _failure(ctx, exc), request.API_VERSION, 2))
    return EndTxnResponse(throttle_time_ms=0, error_code=Code.NONE)


# ------------------------------------------------------------------------ TxnOffsetCommit


@kafka_api(ApiKey.TxnOffsetCommit, versions=(0, 3))
async def txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest
                            ) -> TxnOffsetCommitResponse:
    version = request.API_VERSION
    offsets = [(topic.name, partition) for topic in request.topics
               for partition in topic.partitions]
    codes: dict[TopicPartition, int] = {}

    def answer() -> TxnOffsetCommitResponse:
        return _offset_commit_answer(offsets, codes, version)

    if not ctx.allowed(_Op.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        codes.update(dict.fromkeys(_keys(offsets), Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        return answer()
    if not ctx.allowed(_Op.READ, ResourceType.GROUP, request.group_id):
        codes.update(dict.fromkeys(_keys(offsets), Code.GROUP_AUTHORIZATION_FAILED))
        return answer()
    if request.producer_id < 0 or not 0 <= request.producer_epoch <= PRODUCER_EPOCH_MAX:
        _log_refusal(ctx, f"TxnOffsetCommit with producer id {request.producer_id}, epoch "
                     f"{request.producer_epoch}: a transactional producer's are >= 0")
        codes.update(dict.fromkeys(_keys(offsets), Code.INVALID_REQUEST))
        return answer()
    groups = ctx.services.groups
    readable: dict[str, bool] = {}
    valid: list[PartitionOffset] = []
    for topic, item in offsets:
        key = (topic, item.partition_index)
        if topic not in readable:
            readable[topic] = ctx.allowed(_Op.READ, ResourceType.TOPIC, topic)
        if not readable[topic]:
            codes[key] = Code.TOPIC_AUTHORIZATION_FAILED
            continue
        if item.committed_offset < 0:
            _log_refusal(ctx, f"TxnOffsetCommit of offset {item.committed_offset} for "
                         f"{topic}-{item.partition_index}: an offset is >= 0")
            codes[key] = Code.INVALID_REQUEST
            continue
        offset = PartitionOffset(topic, item.partition_index, item.committed_offset,
                                 getattr(item, "committed_leader_epoch", -1),
                                 item.committed_metadata or "")
        try:
            # The same per-partition checks as a commit's (unknown partition, offset past the
            # log end, metadata too large), answered per partition as Kafka does.
            groups.check_commit([offset])
        except Exception as exc:
            codes[key] = _failure(ctx, exc)
            continue
        valid.append(offset)
    if not valid:
        return answer()
    extra: dict[str, Any] = {}
    if version >= 3:
        extra = {"member_id": request.member_id, "generation_id": request.generation_id,
                 "group_instance_id": request.group_instance_id}
    try:
        response = await groups.commit_transactional_offsets(GroupTxnOffsetCommit(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, group_id=request.group_id,
            offsets=tuple(valid), **extra))
    except Exception as exc:
        codes.update(dict.fromkeys(((o.topic, o.partition) for o in valid),
                                   _failure(ctx, exc)))
        return answer()
    for result in response.partitions:
        codes[(result.topic, result.partition)] = (
            Code.NONE if result.error is None else _failure(ctx, result.error))
    return answer()


def _keys(offsets: Iterable[tuple[str, Any]]) -> list[TopicPartition]:
    return [(topic, item.partition_index) for topic, item in offsets]


def _offset_commit_answer(offsets: list[tuple[str, Any]], codes: dict[TopicPartition, int],
                          version: int) -> TxnOffsetCommitResponse:
    by_topic: dict[str, list[_OffsetPartition]] = {}
    for topic, item in offsets:
        code = codes.get((topic, item.partition_index), Code.UNKNOWN_SERVER_ERROR)
        if version < 2 and code == Code.COORDINATOR_LOAD_IN_PROGRESS:
            code = Code.COORDINATOR_NOT_AVAILABLE  # KAFKA-7296: old clients crashed on it
        by_topic.setdefault(topic, []).append(
            _OffsetPartition(partition_index=item.partition_index, error_code=code))
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        _OffsetTopic(name=topic, partitions=partitions) for topic, partitions in by_topic.items()])


# ------------------------------------------------------------------------ shared


async def _blocking(ctx: RequestContext, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` in the server's executor: the coordinator fsyncs and writes markers."""
    return await asyncio.get_running_loop().run_in_executor(
        ctx.services.executor, functools.partial(call, *args))


def _fenced_as(code: int, version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED for a client that knows it (``version >= fenced_since``), else the
    INVALID_PRODUCER_EPOCH it handles the same way (KafkaApis does the same)."""
    if code == Code.PRODUCER_FENCED and version < fenced_since:
        return Code.INVALID_PRODUCER_EPOCH
    return code


#: Refusals whose reason the client cannot tell from the code alone, and cannot fix by
#: retrying: logged with their message (the answers have no message field).
_LOGGED_REFUSALS = frozenset({Code.INVALID_REQUEST, Code.INVALID_TRANSACTION_TIMEOUT})


def _failure(ctx: RequestContext, exc: BaseException) -> int:
    """The Kafka code of ``exc``. message_of logs the server's own trouble; a refusal in
    :data:`_LOGGED_REFUSALS` is logged here with its reason."""
    code = code_of(exc)
    reason = message_of(exc)
    if code in _LOGGED_REFUSALS:
        _log_refusal(ctx, reason)
    return code


class _RefusalLog:
    """At most :data:`REFUSALS_LOGGED_PER_S` refusal lines a second, the rest counted in the
    next line: a client sending bad requests in a loop must not fill the server's log (as the
    authorizer's denials, server/security/authorizer.py). Event-loop only."""

    def __init__(self) -> None:
        self._second = 0.0
        self._logged = 0
        self._unlogged = 0

    def log(self, ctx: RequestContext, reason: str) -> None:
        now = time.monotonic()
        if now - self._second >= 1.0:
            self._second, self._logged = now, 0
        if self._logged >= REFUSALS_LOGGED_PER_S:
            self._unlogged += 1
            return
        self._logged += 1
        unlogged, self._unlogged = self._unlogged, 0
        logger.info("Kafka %s from %s (client id %s) refused: %s%s", ApiKey(ctx.api_key).name,
                    ctx.connection.host, loggable(ctx.client_id), reason,
                    f" ({unlogged} more refusals not logged)" if unlogged else "")


#: Most refusal lines logged a second.
REFUSALS_LOGGED_PER_S = 10
_refusals = _RefusalLog()


def _log_refusal(ctx: RequestContext, reason: str) -> None:
    _refusals.log(ctx, reason)
