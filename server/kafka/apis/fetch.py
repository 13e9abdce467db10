"""Fetch (key 1, versions 4 to 12): a consumer's read of many partitions with one long poll,
through the serving layer's ``fetch_messages`` (Kafka's ``ReplicaManager.fetchMessages``).

* From version 4: isolation level (READ_COMMITTED stops at the LSO and lists the aborted
  transactions overlapping the batches), the LSO, from 5 the log start. Versions 13+ name
  topics by id and are not served (docs/kafka-protocol.md).
* ``max_wait_ms`` is capped by ``fetch_max_wait_ms_max``, ``max_bytes`` by ``fetch_max_bytes_max``;
  a long poll that waits takes a slot of the client's waiting requests (client_limits.py);
  past the client's limit it answers what one read found, without waiting.
* Fetch sessions (KIP-227, v7+): the request's session id and epoch pick a context from the
  server's sessions (server/kafka/fetch_sessions.py, Kafka's ``FetchManager.newContext``):
  sessionless and full requests read the partitions they name, an incremental one its
  session's; a full one may open a session from its answers, an incremental one answers only
  the partitions with something to say. A session error (FETCH_SESSION_ID_NOT_FOUND,
  INVALID_FETCH_SESSION_EPOCH) is the whole answer. Sessions belong to the connection's
  principal; ``kafka_fetch_session_cache_slots`` 0 turns them off.
* Follower fetches (``replica_id`` >= 0) are not served here (replication has its own
  protocol): every partition is answered NOT_LEADER_OR_FOLLOWER.
* Cluster mode: a partition this server does not lead is NOT_LEADER_OR_FOLLOWER; a
  ``current_leader_epoch`` (v9+, -1: none) older than the leader's is FENCED_LEADER_EPOCH, a
  newer one UNKNOWN_LEADER_EPOCH (the serving layer's check, Kafka's
  ``Partition.checkCurrentLeaderEpoch``). From v12 the first two name the leader and its
  epoch in ``current_leader`` (KIP-951: leader_hints.py).
* Quotas: the answer's bytes count against the principal's ``consumer_byte_rate``.
* Zero copy: on a plaintext connection a partition's batches of ``REGION_BYTES_MIN`` or more
  are a region of the segment file, sent from it by the connection (docs/kafka-protocol.md,
  "Zero-copy fetch and the hot path").
"""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.api_key import ApiKey

from stratalog.server.broker import PartitionRead, PartitionReadResult
from stratalog.server.client_limits import ClientLimitExceededError, WaitingRpc, WaitingRpcKind
from stratalog.server.kafka.apis.leader_hints import leader_hint
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of
from stratalog.server.kafka.fetch_sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    PartitionAnswer,
    PartitionWant,
)
from stratalog.server.kafka.hot_messages import FetchRequest, FetchResponse
from stratalog.server.security.acls import AclOperation, ResourceType
from stratalog.server.storage.errors import OffsetOutOfRangeError
from stratalog.server.storage.file_region import REGION_BYTES_MIN
from stratalog.server.storage.partition_log import IsolationLevel

__all__ = ["fetch"]

_TopicResponse = FetchResponse.FetchableTopicResponse
_PartitionData = _TopicResponse.PartitionData
_Aborted = _PartitionData.AbortedTransaction
#: The first version with KIP-951's current_leader.
_LEADER_HINT_VERSION = 12


@kafka_api(ApiKey.Fetch, versions=(4, 12))
async def fetch(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    services = ctx.services
    settings = services.settings
    version = request.API_VERSION
    replica_id = request.replica_id if version <= 14 else -1
    leader_epochs = version >= 9
    # (topic, entry) of each partition to read: the request's own entries (their fields are
    # named as PartitionWant's), or an incremental request's session's.
    wanted: list[tuple[str, Any]] = [(topic.topic, p) for topic in request.topics
                                     for p in topic.partitions]
    session = None
    if version < 7 or replica_id >= 0:
        pass
    elif request.session_id == INVALID_SESSION_ID and request.session_epoch == FINAL_EPOCH:
        # No session, none to close (librdkafka's every Fetch): the cache has nothing to say.
        services.metrics.observe_kafka_fetch("sessionless")
    else:
        session = services.fetch_sessions.new_context(
            str(ctx.identity.principal), request.session_id, request.session_epoch,
            [PartitionWant(name, p.partition, p.fetch_offset, p.partition_max_bytes,
                           p.current_leader_epoch if leader_epochs else -1, p.log_start_offset)
             for name, p in wanted],
            [(f.topic, index) for f in request.forgotten_topics_data for index in f.partitions],
            _now_ms())
        services.metrics.observe_kafka_fetch(session.kind)
        if session.error_code != Code.NONE:
            return FetchResponse(throttle_time_ms=0, error_code=session.error_code,
                                 session_id=0, responses=[])
        # An incremental request reads its session's partitions, not only those it names.
        wanted = [(want.topic, want) for want in session.wants()]
        leader_epochs = True  # a PartitionWant's epoch is -1 where the version has none
        if session.kind == "sessionless":
            session = None  # answered as before KIP-227: every partition, session id 0
    committed = request.isolation_level == 1
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    max_bytes = min(request.max_bytes if request.max_bytes > 0 else settings.fetch_max_bytes_default,
                    settings.fetch_max_bytes_max)
    quota_max = services.quotas.fetch_bytes_max(str(ctx.identity.principal)) if (
        services.quotas.enabled) else None
    if quota_max is not None:
        max_bytes = min(max_bytes, quota_max)
    max_wait_ms = min(max(request.max_wait_ms, 0), settings.fetch_max_wait_ms_max)
    # (topic, partition) -> its answer's error, for the partitions not read.
    refused: dict[tuple[str, int], int] = {}
    reads: list[PartitionRead] = []
    allowed: dict[str, bool] = {}
    for name, want in wanted:
        if name not in allowed:
            allowed[name] = ctx.allowed(AclOperation.READ, ResourceType.TOPIC, name)
        key = (name, want.partition)
        if replica_id >= 0:
            refused[key] = Code.NOT_LEADER_OR_FOLLOWER
        elif not allowed[name]:
            refused[key] = Code.TOPIC_AUTHORIZATION_FAILED
        elif want.fetch_offset < 0:
            refused[key] = Code.OFFSET_OUT_OF_RANGE
        else:
            reads.append(PartitionRead(name, want.partition, want.fetch_offset,
                                       max(want.partition_max_bytes, 0),
                                       want.current_leader_epoch if leader_epochs else -1))
    admit_wait = None
    if max_wait_ms and reads:
        origin = ctx.origin()

        def admit_wait() -> WaitingRpc:
            return services.limits.admit(origin, WaitingRpcKind.LONG_POLL)

    results: dict[tuple[str, int], PartitionReadResult] = {}
    if reads:
        try:
            read = await services.replicas.fetch_messages(
                reads, isolation, max_bytes=max_bytes, min_bytes=request.min_bytes,
                max_wait_ms=max_wait_ms if not refused else 0, admit_wait=admit_wait,
                region_bytes_min=REGION_BYTES_MIN if ctx.connection.zero_copy else None,
            )
        except ClientLimitExceededError:
            # The waiting limit refused the long poll: answer what one read finds, no wait.
            read = await services.replicas.fetch_messages(
                reads, isolation, max_bytes=max_bytes,
                region_bytes_min=REGION_BYTES_MIN if ctx.connection.zero_copy else None)
        results = {(r.read.topic, r.read.partition): r for r in read}
    # (topic, partition) -> its answer and the bytes of records it carries, in read order.
    entries: dict[tuple[str, int], tuple[_PartitionData, int]] = {}
    for name, want in wanted:
        key = (name, want.partition)
        result = results.get(key)
        if result is None:
            entries[key] = _error_partition(want.partition, refused.get(key, Code.NONE)), 0
            continue
        entry, size = _partition_answer(ctx, want.partition, result, committed)
        if version >= _LEADER_HINT_VERSION and result.error is not None:
            leader_id, leader_epoch = leader_hint(result.error)
            if leader_id >= 0:
                entry.current_leader = _PartitionData.LeaderIdAndEpoch(
                    leader_id=leader_id, leader_epoch=leader_epoch)
        entries[key] = entry, size
    session_id = 0
    answered: list[tuple[str, int]] | dict[tuple[str, int], tuple[_PartitionData, int]] = entries
    if session is not None:
        error, session_id, answered = session.answer(
            {key: PartitionAnswer(entry.error_code, entry.high_watermark,
                                  entry.last_stable_offset, entry.log_start_offset, size)
             for key, (entry, size) in entries.items()}, _now_ms())
        if error != Code.NONE:
            return FetchResponse(throttle_time_ms=0, error_code=error, session_id=session_id,
                                 responses=[])
    # One topic entry per topic, in the order of its first partition.
    by_topic: dict[str, list[_PartitionData]] = {}
    bytes_out = 0
    for key in answered:
        entry, size = entries[key]
        bytes_out += size
        by_topic.setdefault(key[0], []).append(entry)
    if bytes_out and services.quotas.enabled:
        ctx.throttle_ms = services.quotas.record_fetch(str(ctx.identity.principal), bytes_out)
    return FetchResponse(
        throttle_time_ms=ctx.throttle_ms, error_code=Code.NONE, session_id=session_id,
        responses=[_TopicResponse(topic=name, partitions=partitions)
                   for name, partitions in by_topic.items()])


def _now_ms() -> int:
    """The sessions' clock: monotonic (eviction compares ages)."""
    return int(time.monotonic() * 1000)


def _partition_answer(ctx: RequestContext, index: int, result: PartitionReadResult,
                      committed: bool) -> tuple[_PartitionData, int]:
    """The answer of one partition read, and the bytes of records it carries."""
    log, fetched, error = result.log, result.fetched, result.error
    if error is not None or log is None or fetched is None:
        assert error is not None
        entry = _error_partition(index, code_of(error))
        if isinstance(error, OffsetOutOfRangeError):
            # The bounds help the client reset (Kafka sends its log's).
            try:
                log, _ = ctx.services.replicas.get_partition(result.read.topic,
                                                              result.read.partition)
            except Exception:  # deleted meanwhile: the error is all there is to say
                return entry, 0
            entry.log_start_offset, entry.high_watermark = log.log_start_offset, log.high_watermark
        return entry, 0
    aborted = None
    if committed:
        aborted = [_Aborted(producer_id=t.producer_id, first_offset=t.first_offset)
                   for t in fetched.aborted_transactions]
    data = fetched.data
    ctx.services.metrics.observe_fetch(result.read.topic, fetched.records_count, len(data))
    # Read after the data: the high watermark is never below what the answer carries.
    return _PartitionData(
        partition_index=index, error_code=Code.NONE, high_watermark=log.high_watermark,
        last_stable_offset=log.last_stable_offset, log_start_offset=log.log_start_offset,
        aborted_transactions=aborted, preferred_read_replica=-1, records=data,
    ), len(data)


def _error_partition(index: int, code: int) -> _PartitionData:
    return _PartitionData(partition_index=index, error_code=code, high_watermark=-1,
                          last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                          preferred_read_replica=-1, records=b"")
