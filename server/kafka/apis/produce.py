"""Produce (key 0, versions 0 to 11): record batches appended through the serving layer, as
Kafka's ``KafkaApis.handleProduceRequest`` -> ``ReplicaManager.appendRecords``.

* Versions 0 to 2 carry the old message formats (magic 0 and 1): they are advertised, because
  librdkafka turns compression off against a broker whose lowest Produce version is above 0
  (KAFKA-18659), but their batches are refused per partition with
  UNSUPPORTED_FOR_MESSAGE_FORMAT (the storage keeps RecordBatch v2 only: records/errors.py).
* ``acks`` must be 0, 1 or -1 (INVALID_REQUIRED_ACKS); acks=0 gets no answer at all, as Kafka's.
* Authorization: WRITE on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions), and for a
  request with transactional batches WRITE on its transactional id (every partition refused
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise, and when it names none), as Kafka's
  ``handleProduceRequest`` (``RequestUtils.hasTransactionalRecords``: a partition's first
  batch says).
* The partitions of one request are appended concurrently, each under its partition's append
  lock in request order; each has its own error code.
* A partition this server does not lead (cluster mode) is NOT_LEADER_OR_FOLLOWER; from v10
  its answer names the leader (``current_leader``) and ``node_endpoints`` its Kafka address
  (KIP-951: leader_hints.py).
* Quotas: the bytes count against the principal's ``producer_byte_rate``; the throttle time it
  earns is in the answer and the connection reads nothing more for that long.
"""

from __future__ import annotations

import asyncio

from kafka.protocol.api_key import ApiKey

from stratalog.records.batch import ATTRIBUTES_OFFSET, MAGIC, MAGIC_OFFSET, TRANSACTIONAL_FLAG_MASK
from stratalog.server.append_placement import holds_compressed_batches
from stratalog.server.kafka.apis.leader_hints import leader_hint, node_endpoints
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of, message_of
from stratalog.server.kafka.hot_messages import ProduceRequest, ProduceResponse
from stratalog.server.security.acls import AclOperation, ResourceType

__all__ = ["produce"]

_TopicResponse = ProduceResponse.TopicProduceResponse
_PartitionResponse = _TopicResponse.PartitionProduceResponse
_LeaderIdAndEpoch = _PartitionResponse.LeaderIdAndEpoch
_NodeEndpoint = ProduceResponse.NodeEndpoint
_ACKS = (0, 1, -1)
#: The first version with KIP-951's current_leader and node_endpoints.
_LEADER_HINT_VERSION = 10


@kafka_api(ApiKey.Produce, versions=(0, 11))
async def produce(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    services = ctx.services
    acks = request.acks
    transactional_id = getattr(request, "transactional_id", None)
    refused: int | None = None
    if acks not in _ACKS:
        refused = Code.INVALID_REQUIRED_ACKS
    elif _has_transactional_batches(request) and (transactional_id is None or not ctx.allowed(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)):
        refused = Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    size_bytes = 0
    plans: list[tuple[str, list[tuple[int, object]]]] = []
    for topic_data in request.topic_data:
        name = topic_data.name
        allowed = refused is None and ctx.allowed(AclOperation.WRITE, ResourceType.TOPIC, name)
        entries: list[tuple[int, object]] = []
        for partition_data in topic_data.partition_data:
            records = partition_data.records
            if refused is not None:
                entries.append((partition_data.index, refused))
            elif not allowed:
                entries.append((partition_data.index, Code.TOPIC_AUTHORIZATION_FAILED))
            elif request.API_VERSION < 3:
                entries.append((partition_data.index, Code.UNSUPPORTED_FOR_MESSAGE_FORMAT))
            elif not records:
                entries.append((partition_data.index, Code.INVALID_RECORD))
            else:
                size_bytes += len(records)
                entries.append((partition_data.index, _append(ctx, name, partition_data.index,
                                                              acks, records, transactional_id)))
        plans.append((name, entries))
    if size_bytes and services.quotas.enabled:
        ctx.throttle_ms = services.quotas.record_produce(str(ctx.identity.principal),
                                                         size_bytes)
    pending = [entry for _, entries in plans for _, entry in entries
               if asyncio.iscoroutine(entry)]
    if len(pending) == 1:
        # One partition (a producer's usual request): awaited in this task, not a task of
        # its own as gather would make (two trips through the loop fewer per request).
        try:
            outcome: object = await pending[0]
        except Exception as exc:
            outcome = exc
        outcomes = {id(pending[0]): outcome}
    else:
        outcomes = dict(zip(map(id, pending),
                            await asyncio.gather(*pending, return_exceptions=True),
                            strict=True))
    if acks == 0:
        return None
    hints = request.API_VERSION >= _LEADER_HINT_VERSION
    leaders: set[int] = set()
    responses = []
    for name, entries in plans:
        partitions = []
        for index, entry in entries:
            outcome = outcomes.get(id(entry), entry)
            partition = _partition_response(index, outcome)
            if hints and isinstance(outcome, BaseException):
                leader_id, leader_epoch = leader_hint(outcome)
                if leader_id >= 0:
                    partition.current_leader = _LeaderIdAndEpoch(leader_id=leader_id,
                                                                 leader_epoch=leader_epoch)
                    leaders.add(leader_id)
            partitions.append(partition)
        responses.append(_TopicResponse(name=name, partition_responses=partitions))
    endpoints = [
        _NodeEndpoint(node_id=node_id, host=address.host, port=address.port, rack=None)
        for node_id, address in node_endpoints(leaders, services.broker_addresses())
    ] if leaders else []
    return ProduceResponse(responses=responses, throttle_time_ms=ctx.throttle_ms,
                           node_endpoints=endpoints)


def _has_transactional_batches(request: ProduceRequest) -> bool:
    """Whether a partition's first batch is transactional (its attributes' bit 4); bytes too
    short to say are left to the append's validation."""
    for topic_data in request.topic_data:
        for partition_data in topic_data.partition_data:
            records = partition_data.records
            if (records and len(records) >= ATTRIBUTES_OFFSET + 2
                    and records[MAGIC_OFFSET] == MAGIC
                    and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG_MASK):
                return True
    return False


async def _append(ctx: RequestContext, topic: str, partition: int, acks: int,
                  records: bytes, transactional_id: str | None) -> object:
    services = ctx.services
    info = await services.replicas.append_records(
        topic, partition, acks, records, size_bytes=len(records),
        compressed=holds_compressed_batches(records), transactional_id=transactional_id,
    )
    services.metrics.observe_produce(topic, info.record_count, info.size_bytes)
    return info


def _partition_response(index: int, outcome: object) -> _PartitionResponse:
    if isinstance(outcome, int):
        return _PartitionResponse(index=index, error_code=outcome, base_offset=-1,
                                  log_append_time_ms=-1, log_start_offset=-1)
    if isinstance(outcome, BaseException):
        if not isinstance(outcome, Exception):
            raise outcome
        return _PartitionResponse(index=index, error_code=code_of(outcome), base_offset=-1,
                                  log_append_time_ms=-1, log_start_offset=-1,
                                  error_message=message_of(outcome))
    return _PartitionResponse(
        index=index, error_code=Code.NONE, base_offset=outcome.first_offset,  # type: ignore[attr-defined]
        log_append_time_ms=outcome.log_append_time,  # type: ignore[attr-defined]
        log_start_offset=outcome.log_start_offset,  # type: ignore[attr-defined]
    )
