"""Between the client's Python values and broker.proto messages, checking arguments on the way.

Both clients (:class:`~stratalog.client.Client` over grpc.aio and
:class:`~stratalog.client.SyncClient` over a blocking channel) build their requests and read
their responses here, so the two behave the same to the byte. Every ``*_request`` function
checks its arguments first and raises ``TypeError`` (wrong type) or ``ValueError`` (out of
range) naming the argument, so a bad call fails before any RPC is sent. What only the server
can judge (topic name rules, whether a topic exists, config values) is left to the server,
whose answer arrives as a :mod:`stratalog.client.errors` exception.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

from stratalog.records import Compression, Header, TimestampType
from stratalog.v1 import broker_pb2 as pb

from .acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from .errors import StratalogError, from_error_reason
from .types import (
    AbortedTransaction,
    BrokerAddress,
    CleaningResult,
    ClusterMetadata,
    ConsumerRecord,
    FetchResult,
    OffsetAndTimestamp,
    PartitionInfo,
    PartitionLeadership,
    PartitionReassignment,
    ProduceResult,
    ProducerIdAndEpoch,
    ProducerRecord,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
)

__all__ = [
    "ACKS_BY_NAME",
    "EARLIEST",
    "INT16_MAX",
    "INT32_MAX",
    "INT64_MAX",
    "LATEST",
    "MAX_TIMESTAMP",
    "FetchFormat",
    "IsolationLevel",
    "acl_binding",
    "add_partitions_to_txn_request",
    "alter_topic_configs_request",
    "check_bool",
    "check_bytes_or_none",
    "check_headers",
    "check_int",
    "check_partition",
    "check_producer_epoch",
    "check_producer_id",
    "check_topic",
    "check_transactional_id",
    "clean_partition_request",
    "cleaning_result",
    "cluster_metadata",
    "create_acls_request",
    "create_topic_request",
    "delete_acls_request",
    "delete_records_request",
    "delete_topic_request",
    "describe_acls_request",
    "describe_topic_request",
    "describe_transaction_request",
    "end_txn_request",
    "fetch_by_offset_request",
    "fetch_by_timestamp_request",
    "fetch_result",
    "init_producer_id_request",
    "list_offsets_request",
    "metadata_request",
    "offset_and_timestamp",
    "parse_acks",
    "parse_compression",
    "produce_request",
    "produce_result",
    "producer_id_and_epoch",
    "subscribe_request",
    "topic_info",
    "transaction_description",
]

INT16_MAX = (1 << 15) - 1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1

#: ListOffsets targets (Kafka's ListOffsetsRequest constants).
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3


class FetchFormat(enum.IntEnum):
    """How a fetch returns data: decoded records, or whole Kafka v2 batches as stored."""

    RECORDS = pb.FETCH_FORMAT_RECORDS
    RECORD_BATCHES = pb.FETCH_FORMAT_RECORD_BATCHES


class IsolationLevel(enum.IntEnum):
    """READ_COMMITTED hides records of aborted transactions (Kafka's isolation.level)."""

    READ_UNCOMMITTED = pb.READ_UNCOMMITTED
    READ_COMMITTED = pb.READ_COMMITTED


# broker.proto numbers timestamp types 1 and 2 (0 = unspecified); the batch attribute uses 0/1.
_TIMESTAMP_TYPES = {
    pb.TIMESTAMP_TYPE_UNSPECIFIED: TimestampType.CREATE_TIME,
    pb.CREATE_TIME: TimestampType.CREATE_TIME,
    pb.LOG_APPEND_TIME: TimestampType.LOG_APPEND_TIME,
}

_COMPRESSION_NAMES = {c.name.lower(): c for c in Compression}


# --- argument checks -----------------------------------------------------------------------------


def check_int(value: object, name: str, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high]``; ``TypeError``/``ValueError`` naming ``name``.

    ``bool`` is refused although it is an int subclass: ``partition=True`` is a bug.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def check_bool(value: object, name: str) -> bool:
    """``value`` as a bool; ``TypeError`` naming ``name`` for anything else (``1``, ``"yes"``:
    a flag given a non-bool is a bug, not a truthy value to guess at)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_topic(topic: object, name: str = "topic") -> str:
    """A non-empty str. The server checks the naming rules and answers InvalidTopicError."""
    if not isinstance(topic, str):
        raise TypeError(f"{name} must be a str, got {type(topic).__name__}")
    if not topic:
        raise ValueError(f"{name} must not be empty")
    return topic


def check_partition(partition: object) -> int:
    """A partition number in [0, 2**31 - 1]."""
    return check_int(partition, "partition", 0, INT32_MAX)


def check_transactional_id(value: object, name: str = "transactional_id") -> str:
    """A non-empty str (Kafka's transactional.id)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return value


def check_producer_id(value: object) -> int:
    """A producer id from InitProducerId: an int64 >= 0."""
    return check_int(value, "producer_id", 0, INT64_MAX)


def check_producer_epoch(value: object) -> int:
    """A producer epoch: an int16 >= 0 (the batch header's field is 16 bits)."""
    return check_int(value, "producer_epoch", 0, INT16_MAX)


def check_bytes_or_none(value: object, name: str) -> bytes | None:
    """``None`` or a bytes-like object, as ``bytes``; ``TypeError`` naming ``name`` otherwise.

    ``str`` is refused on purpose: the client does not guess an encoding.
    """
    if value is None or type(value) is bytes:
        return value  # type: ignore[return-value]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{name} must be bytes or None, got {type(value).__name__}")


def check_headers(headers: object, name: str = "headers") -> tuple[Header, ...]:
    """A sequence of ``(str, bytes | None)`` pairs, as a tuple of tuples."""
    if not headers:
        return ()
    if isinstance(headers, str | bytes) or not isinstance(headers, Iterable):
        raise TypeError(f"{name} must be a sequence of (str, bytes | None) pairs")
    checked = []
    for index, pair in enumerate(headers):  # type: ignore[arg-type]
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"{name}[{index}] must be a (str, bytes | None) pair, got {pair!r}")
        key, value = pair
        if not isinstance(key, str):
            raise TypeError(f"{name}[{index}] key must be a str, got {type(key).__name__}")
        checked.append((key, check_bytes_or_none(value, f"{name}[{index}] value")))
    return tuple(checked)


def parse_compression(compression: object) -> Compression:
    """A :class:`~stratalog.records.Compression`, or its name ("none", "gzip", "snappy", ...)."""
    if isinstance(compression, str):
        try:
            return _COMPRESSION_NAMES[compression.lower()]
        except KeyError:
            raise ValueError(
                f"compression must be one of {sorted(_COMPRESSION_NAMES)}, got {compression!r}"
            ) from None
    if isinstance(compression, bool) or not isinstance(compression, int):
        raise TypeError(f"compression must be a Compression or a str, got {compression!r}")
    try:
        return Compression(compression)
    except ValueError:
        raise ValueError(f"compression must be a codec id 0-4, got {compression}") from None


#: Kafka's ``acks`` values by name: ``"all"`` is -1 (every in-sync replica has the records).
ACKS_BY_NAME = {"all": -1, "-1": -1, "1": 1, "0": 0}


def parse_acks(acks: object) -> int:
    """Kafka's ``acks``: ``"all"`` or -1 (every in-sync replica, at least
    ``min.insync.replicas``, has the records), 1 (the leader has them), 0 (the client does not
    wait for the append to be replicated); as an int or its name."""
    if isinstance(acks, str):
        try:
            return ACKS_BY_NAME[acks.strip().lower()]
        except KeyError:
            raise ValueError(f"acks must be 'all', -1, 1 or 0, got {acks!r}") from None
    if isinstance(acks, bool) or not isinstance(acks, int):
        raise TypeError(f"acks must be 'all', -1, 1 or 0, got {acks!r}")
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks must be 'all', -1, 1 or 0, got {acks}")
    return acks


def _check_enum(value: object, cls: type[enum.IntEnum], name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a {cls.__name__}, got {value!r}")
    try:
        return int(cls(value))
    except ValueError:
        raise ValueError(f"{name} must be a {cls.__name__}, got {value}") from None


def _check_configs(configs: object, name: str) -> dict[str, str]:
    if configs is None:
        return {}
    if not isinstance(configs, Mapping):
        raise TypeError(f"{name} must be a mapping of str to str, got {type(configs).__name__}")
    for key, value in configs.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"{name} must map str to str, got {key!r}: {value!r}")
    return dict(configs)


# --- requests ------------------------------------------------------------------------------------


def create_topic_request(
    name: str, partitions: int, configs: Mapping[str, str] | None,
    replication_factor: int | None = None,
) -> pb.CreateTopicRequest:
    """``replication_factor``: replicas per partition (a cluster, issue 17); ``None`` or 0:
    the server's ``default_replication_factor`` (a single server takes 0 or 1)."""
    return pb.CreateTopicRequest(
        name=check_topic(name, "name"),
        partitions=check_int(partitions, "partitions", 1, INT32_MAX),
        configs=_check_configs(configs, "configs"),
        replication_factor=0 if replication_factor is None else check_int(
            replication_factor, "replication_factor", 0, INT32_MAX),
    )


def delete_topic_request(name: str) -> pb.DeleteTopicRequest:
    return pb.DeleteTopicRequest(name=check_topic(name, "name"))


def describe_topic_request(name: str) -> pb.DescribeTopicRequest:
    return pb.DescribeTopicRequest(name=check_topic(name, "name"))


def alter_topic_configs_request(
    name: str, set_configs: Mapping[str, str] | None, delete_configs: Sequence[str]
) -> pb.AlterTopicConfigsRequest:
    if isinstance(delete_configs, str) or not all(isinstance(k, str) for k in delete_configs):
        raise TypeError("delete must be a sequence of config names (str)")
    return pb.AlterTopicConfigsRequest(
        name=check_topic(name, "name"),
        set=_check_configs(set_configs, "set"),
        delete=list(delete_configs),
    )


def create_partitions_request(name: str, count: int) -> pb.CreatePartitionsRequest:
    return pb.CreatePartitionsRequest(name=check_topic(name, "name"),
                                      count=check_int(count, "count", 1, INT32_MAX))


def elect_leaders_request(partitions: Iterable[tuple[str, int]] | None, unclean: bool
                          ) -> pb.ElectLeadersRequest:
    return pb.ElectLeadersRequest(
        partitions=[pb.TopicPartition(topic=check_topic(topic),
                                      partition=check_int(partition, "partition", 0, INT32_MAX))
                    for topic, partition in partitions or ()],
        election_type=pb.ELECTION_TYPE_UNCLEAN if unclean else pb.ELECTION_TYPE_PREFERRED,
    )


def elect_leaders_outcomes(response: pb.ElectLeadersResponse
                           ) -> dict[tuple[str, int], StratalogError | None]:
    """Each partition's outcome: None (elected) or the error saying why not."""
    return {(r.topic, r.partition): from_error_reason(r.reason, r.message)
            for r in response.results}


def alter_partition_reassignments_request(
    targets: Mapping[tuple[str, int], Sequence[int] | None],
) -> pb.AlterPartitionReassignmentsRequest:
    return pb.AlterPartitionReassignmentsRequest(partitions=[
        pb.PartitionReassignmentTarget(
            topic=check_topic(topic), partition=check_int(partition, "partition", 0, INT32_MAX),
            replicas=[check_int(node, "replica", 0, INT32_MAX) for node in replicas or ()])
        for (topic, partition), replicas in targets.items()
    ])


def reassignment_outcomes(results: Iterable[pb.ReassignmentResult]
                          ) -> dict[tuple[str, int], StratalogError | None]:
    """Each partition's outcome: None (recorded) or the error saying why not."""
    return {(r.topic, r.partition): from_error_reason(r.reason, r.message) for r in results}


def drain_outcomes(response: pb.DrainBrokerResponse
                   ) -> dict[tuple[str, int], tuple[int, ...] | StratalogError]:
    """Each partition's new replicas, or the error saying why it was not moved."""
    return {(r.topic, r.partition): from_error_reason(r.reason, r.message) or tuple(r.replicas)
            for r in response.results}


def list_partition_reassignments_request(partitions: Iterable[tuple[str, int]] | None
                                         ) -> pb.ListPartitionReassignmentsRequest:
    return pb.ListPartitionReassignmentsRequest(partitions=[
        pb.TopicPartition(topic=check_topic(topic),
                          partition=check_int(partition, "partition", 0, INT32_MAX))
        for topic, partition in partitions or ()])


def partition_reassignments(response: pb.ListPartitionReassignmentsResponse
                            ) -> list[PartitionReassignment]:
    return [PartitionReassignment(
        r.topic, r.partition, tuple(r.replicas), tuple(r.adding_replicas),
        tuple(r.removing_replicas), r.leader, r.leader_log_end_offset,
        {p.node_id: p.log_end_offset for p in r.progress}) for r in response.reassignments]


def _proto_record(item: object, index: int) -> pb.Record:
    if isinstance(item, bytes | bytearray | memoryview):
        item = ProducerRecord(bytes(item))
    elif not isinstance(item, ProducerRecord):
        raise TypeError(
            f"records[{index}] must be a ProducerRecord or bytes, got {type(item).__name__}"
        )
    record = pb.Record()
    value = check_bytes_or_none(item.value, f"records[{index}].value")
    key = check_bytes_or_none(item.key, f"records[{index}].key")
    if value is not None:
        record.value = value
    if key is not None:
        record.key = key
    if item.timestamp_ms is not None:
        record.timestamp = check_int(
            item.timestamp_ms, f"records[{index}].timestamp_ms", 0, INT64_MAX
        )
    for header_key, header_value in check_headers(item.headers, f"records[{index}].headers"):
        header = record.headers.add(key=header_key)
        if header_value is not None:
            header.value = header_value
    return record


def produce_request(
    topic: str,
    partition: int,
    records: Sequence[ProducerRecord | bytes] | None,
    record_batches: bytes | None,
    compression: Compression | str,
    flush: bool,
    producer_id: int | None = None,
    producer_epoch: int = 0,
    base_sequence: int = 0,
    transactional: bool = False,
    acks: int | str = -1,
    transactional_id: str | None = None,
) -> pb.ProduceRequest:
    """Exactly one of ``records`` (encoded by the server) and ``record_batches`` (v2 batches).
    ``acks`` (:func:`parse_acks`) is set on every request, -1 included. ``transactional_id``:
    a transactional produce's, sent so that a cluster's leader can ask its coordinator.

    ``producer_id`` (with ``producer_epoch``, ``base_sequence``, ``transactional``): an
    idempotent or transactional produce of ``records``; batches in ``record_batches`` carry
    these fields in their own headers, so the two do not go together.
    """
    topic = check_topic(topic)
    partition = check_partition(partition)
    if (records is None) == (record_batches is None):
        raise ValueError("pass exactly one of records and record_batches")
    if not isinstance(flush, bool):
        raise TypeError(f"flush must be a bool, got {type(flush).__name__}")
    if not isinstance(transactional, bool):
        raise TypeError(f"transactional must be a bool, got {type(transactional).__name__}")
    codec = parse_compression(compression)
    acks = parse_acks(acks)
    if transactional_id is not None:
        transactional_id = check_transactional_id(transactional_id)
    if producer_id is None:
        if producer_epoch != 0 or base_sequence != 0 or transactional:
            raise ValueError(
                "producer_epoch, base_sequence and transactional need a producer_id "
                "(from init_producer_id)"
            )
    else:
        check_producer_id(producer_id)
        check_producer_epoch(producer_epoch)
        check_int(base_sequence, "base_sequence", 0, INT32_MAX)
        if record_batches is not None:
            raise ValueError(
                "producer_id, producer_epoch, base_sequence and transactional are for the "
                "records form; record_batches carry them in their batch headers"
            )
    if record_batches is not None:
        batches = check_bytes_or_none(record_batches, "record_batches")
        if not batches:
            raise ValueError("record_batches must not be empty")
        return pb.ProduceRequest(
            topic=topic, partition=partition, record_batches=batches, flush=flush, acks=acks,
            transactional_id=transactional_id,
        )
    if isinstance(records, bytes | str) or not isinstance(records, Iterable):
        raise TypeError("records must be a sequence of ProducerRecord or bytes values")
    proto_records = [_proto_record(item, index) for index, item in enumerate(records)]
    if not proto_records:
        raise ValueError("records must not be empty")
    request = pb.ProduceRequest(
        topic=topic,
        partition=partition,
        records=proto_records,
        compression=int(codec),
        flush=flush,
        acks=acks,
        transactional_id=transactional_id,
    )
    if producer_id is not None:
        request.producer_id = producer_id
        request.producer_epoch = producer_epoch
        request.base_sequence = base_sequence
        request.transactional = transactional
    return request


def fetch_by_offset_request(
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    max_wait_ms: int,
    min_bytes: int,
    fetch_format: FetchFormat | int,
    isolation_level: IsolationLevel | int,
    max_records: int = 0,
) -> pb.FetchByOffsetRequest:
    return pb.FetchByOffsetRequest(
        topic=check_topic(topic),
        partition=check_partition(partition),
        offset=check_int(offset, "offset", 0, INT64_MAX),
        max_bytes=check_int(max_bytes, "max_bytes", 0, INT32_MAX),
        max_wait_ms=check_int(max_wait_ms, "max_wait_ms", 0, INT32_MAX),
        min_bytes=check_int(min_bytes, "min_bytes", 0, INT32_MAX),
        format=_check_enum(fetch_format, FetchFormat, "fetch_format"),
        isolation_level=_check_enum(isolation_level, IsolationLevel, "isolation_level"),
        max_records=check_int(max_records, "max_records", 0, INT32_MAX),
    )


def fetch_by_timestamp_request(
    topic: str,
    partition: int,
    timestamp_ms: int,
    max_bytes: int,
    fetch_format: FetchFormat | int,
    isolation_level: IsolationLevel | int,
    max_records: int = 0,
) -> pb.FetchByTimestampRequest:
    return pb.FetchByTimestampRequest(
        topic=check_topic(topic),
        partition=check_partition(partition),
        timestamp=check_int(timestamp_ms, "timestamp_ms", 0, INT64_MAX),
        max_bytes=check_int(max_bytes, "max_bytes", 0, INT32_MAX),
        format=_check_enum(fetch_format, FetchFormat, "fetch_format"),
        isolation_level=_check_enum(isolation_level, IsolationLevel, "isolation_level"),
        max_records=check_int(max_records, "max_records", 0, INT32_MAX),
    )


def list_offsets_request(
    topic: str, partition: int, timestamp_ms: int, isolation_level: IsolationLevel | int
) -> pb.ListOffsetsRequest:
    """``timestamp_ms``: EARLIEST (-2), LATEST (-1), MAX_TIMESTAMP (-3), or a time >= 0."""
    return pb.ListOffsetsRequest(
        topic=check_topic(topic),
        partition=check_partition(partition),
        timestamp=check_int(timestamp_ms, "timestamp_ms", MAX_TIMESTAMP, INT64_MAX),
        isolation_level=_check_enum(isolation_level, IsolationLevel, "isolation_level"),
    )


def subscribe_request(
    topic: str,
    partition: int,
    offset: int | None,
    timestamp_ms: int | None,
    max_bytes: int,
    fetch_format: FetchFormat | int,
    isolation_level: IsolationLevel | int,
) -> pb.SubscribeRequest:
    """Start at ``offset`` or at the first record with timestamp >= ``timestamp_ms`` (one)."""
    if (offset is None) == (timestamp_ms is None):
        raise ValueError("pass exactly one of offset and timestamp_ms")
    request = pb.SubscribeRequest(
        topic=check_topic(topic),
        partition=check_partition(partition),
        max_bytes=check_int(max_bytes, "max_bytes", 0, INT32_MAX),
        format=_check_enum(fetch_format, FetchFormat, "fetch_format"),
        isolation_level=_check_enum(isolation_level, IsolationLevel, "isolation_level"),
    )
    if offset is not None:
        request.offset = check_int(offset, "offset", 0, INT64_MAX)
    else:
        request.timestamp = check_int(timestamp_ms, "timestamp_ms", 0, INT64_MAX)
    return request


def delete_records_request(
    topic: str, partition: int, before_offset: int
) -> pb.DeleteRecordsRequest:
    """``before_offset`` = the new log start offset, or -1 for the high watermark."""
    return pb.DeleteRecordsRequest(
        topic=check_topic(topic),
        partition=check_partition(partition),
        before_offset=check_int(before_offset, "before_offset", -1, INT64_MAX),
    )


def clean_partition_request(topic: str, partition: int) -> pb.CleanPartitionRequest:
    return pb.CleanPartitionRequest(topic=check_topic(topic), partition=check_partition(partition))


def init_producer_id_request(
    transactional_id: str | None, transaction_timeout_ms: int
) -> pb.InitProducerIdRequest:
    """A new producer id (``transactional_id=None``), or the transactional id's own with its
    epoch bumped; ``transaction_timeout_ms`` 0 = the server's default (60000)."""
    timeout_ms = check_int(transaction_timeout_ms, "transaction_timeout_ms", 0, INT32_MAX)
    if transactional_id is None:
        if timeout_ms:
            raise ValueError(
                "transaction_timeout_ms applies to a transactional_id: pass one, or leave the "
                "timeout 0 for an idempotent producer id"
            )
        return pb.InitProducerIdRequest()
    return pb.InitProducerIdRequest(
        transactional_id=check_transactional_id(transactional_id),
        transaction_timeout_ms=timeout_ms,
    )


def _topic_partitions(partitions: object) -> list[pb.TopicPartition]:
    """``TopicPartition`` values or ``(topic, partition)`` pairs, each once, in order."""
    if isinstance(partitions, str | bytes) or not isinstance(partitions, Iterable):
        raise TypeError("partitions must be a sequence of (topic, partition) pairs")
    seen: set[tuple[str, int]] = set()
    out = []
    for index, pair in enumerate(partitions):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(
                f"partitions[{index}] must be a TopicPartition or a (topic, partition) pair, "
                f"got {pair!r}"
            )
        topic = check_topic(pair[0], f"partitions[{index}] topic")
        partition = check_int(pair[1], f"partitions[{index}] partition", 0, INT32_MAX)
        if (topic, partition) not in seen:
            seen.add((topic, partition))
            out.append(pb.TopicPartition(topic=topic, partition=partition))
    if not out:
        raise ValueError("partitions must not be empty")
    return out


def add_partitions_to_txn_request(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition | tuple[str, int]],
) -> pb.AddPartitionsToTxnRequest:
    return pb.AddPartitionsToTxnRequest(
        transactional_id=check_transactional_id(transactional_id),
        producer_id=check_producer_id(producer_id),
        producer_epoch=check_producer_epoch(producer_epoch),
        partitions=_topic_partitions(partitions),
    )


def end_txn_request(
    transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
) -> pb.EndTxnRequest:
    if not isinstance(commit, bool):
        raise TypeError(f"commit must be a bool, got {type(commit).__name__}")
    return pb.EndTxnRequest(
        transactional_id=check_transactional_id(transactional_id),
        producer_id=check_producer_id(producer_id),
        producer_epoch=check_producer_epoch(producer_epoch),
        commit=commit,
    )


def describe_transaction_request(transactional_id: str) -> pb.DescribeTransactionRequest:
    return pb.DescribeTransactionRequest(
        transactional_id=check_transactional_id(transactional_id)
    )


# --- responses -----------------------------------------------------------------------------------


def topic_info(description: pb.TopicDescription) -> TopicInfo:
    partitions = tuple(
        PartitionInfo(
            partition=p.partition,
            log_start_offset=p.log_start_offset,
            log_end_offset=p.log_end_offset,
            size_bytes=p.size_bytes,
            segment_count=p.segment_count,
            log_dir=p.log_dir,
            max_timestamp=p.max_timestamp,
            **_cleaner_position(p),
        )
        for p in sorted(description.partitions, key=lambda p: p.partition)
    )
    return TopicInfo(description.name, dict(description.configs), partitions,
                     frozenset(description.overridden_configs))


def _cleaner_position(p: pb.PartitionDescription) -> dict[str, Any]:
    # cleaned_offset is set for the partitions of compacted topics only (and never by a
    # server older than issue 16): the three fields are None otherwise.
    if not p.HasField("cleaned_offset"):
        return {}
    return {
        "cleaned_offset": p.cleaned_offset,
        "dirty_ratio": p.dirty_ratio,
        "last_clean_ms": p.last_clean_ms,
    }


def cleaning_result(
    topic: str, partition: int, response: pb.CleanPartitionResponse
) -> CleaningResult:
    return CleaningResult(
        topic=topic,
        partition=partition,
        first_dirty_offset_before=response.first_dirty_offset_before,
        end_offset=response.end_offset,
        bytes_read=response.bytes_read,
        bytes_written=response.bytes_written,
        records_read=response.records_read,
        records_kept=response.records_kept,
        segments_before=response.segments_before,
        segments_after=response.segments_after,
        duration_ms=response.duration_ms,
    )


def produce_result(response: pb.ProduceResponse) -> ProduceResult:
    return ProduceResult(
        base_offset=response.base_offset,
        last_offset=response.last_offset,
        log_append_time=response.log_append_time,
        log_start_offset=response.log_start_offset,
        record_count=response.record_count,
        duplicate=response.duplicate,
        throttle_time_ms=response.throttle_time_ms,
    )


def producer_id_and_epoch(response: pb.InitProducerIdResponse) -> ProducerIdAndEpoch:
    return ProducerIdAndEpoch(response.producer_id, response.producer_epoch)


def transaction_description(
    response: pb.DescribeTransactionResponse,
) -> TransactionDescription:
    return TransactionDescription(
        transactional_id=response.transactional_id,
        producer_id=response.producer_id,
        producer_epoch=response.producer_epoch,
        state=response.state,
        transaction_timeout_ms=response.transaction_timeout_ms,
        transaction_start_time_ms=response.transaction_start_time_ms,
        last_update_time_ms=response.last_update_time_ms,
        partitions=tuple(
            TopicPartition(tp.topic, tp.partition) for tp in response.partitions
        ),
    )


def offset_and_timestamp(response: pb.ListOffsetsResponse) -> OffsetAndTimestamp:
    return OffsetAndTimestamp(response.offset, response.timestamp)


def _consumer_records(
    topic: str, partition: int, records: Sequence[pb.Record]
) -> list[ConsumerRecord]:
    new = tuple.__new__
    timestamp_types = _TIMESTAMP_TYPES
    out = []
    append = out.append
    for r, t, p in zip(records, repeat(topic), repeat(partition)):
        append(
            new(
                ConsumerRecord,
                (
                    t,
                    p,
                    r.offset,
                    r.timestamp,
                    timestamp_types.get(r.timestamp_type, TimestampType.CREATE_TIME),
                    r.key if r.HasField("key") else None,
                    r.value if r.HasField("value") else None,
                    tuple((h.key, h.value if h.HasField("value") else None) for h in r.headers)
                    if r.headers
                    else (),
                ),
            )
        )
    return out


def fetch_result(response: pb.FetchResponse, *, by_timestamp: bool) -> FetchResult:
    """``by_timestamp``: the fetch started from a timestamp, so the matched_* fields mean
    something; otherwise they are reported as -1 whatever proto3's defaults say."""
    topic, partition = response.topic, response.partition
    return FetchResult(
        topic=topic,
        partition=partition,
        high_watermark=response.high_watermark,
        log_start_offset=response.log_start_offset,
        next_offset=response.next_offset,
        records=_consumer_records(topic, partition, response.records),
        record_batches=response.record_batches,
        matched_offset=response.matched_offset if by_timestamp else -1,
        matched_timestamp=response.matched_timestamp if by_timestamp else -1,
        aborted_transactions=tuple(
            AbortedTransaction(a.producer_id, a.first_offset)
            for a in response.aborted_transactions
        ),
        last_stable_offset=response.last_stable_offset,
        throttle_time_ms=response.throttle_time_ms,
    )


# --- ACLs ----------------------------------------------------------------------------------------


def _acl_enum(enum_type: type[enum.IntEnum], value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a {enum_type.__name__}, got {value!r}")
    return int(value)


def _acl_text(value: object, name: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str{' or None' if optional else ''}, got {value!r}")
    return value


def _binding_message(binding: AclBinding, name: str) -> pb.AclBinding:
    if not isinstance(binding, AclBinding):
        raise TypeError(f"{name} must be an AclBinding, got {type(binding).__name__}")
    return pb.AclBinding(
        resource_type=_acl_enum(ResourceType, binding.resource_type, f"{name}.resource_type"),
        resource_name=_acl_text(binding.resource_name, f"{name}.resource_name"),
        pattern_type=_acl_enum(PatternType, binding.pattern_type, f"{name}.pattern_type"),
        principal=_acl_text(binding.principal, f"{name}.principal"),
        host=_acl_text(binding.host, f"{name}.host"),
        operation=_acl_enum(AclOperation, binding.operation, f"{name}.operation"),
        permission_type=_acl_enum(
            AclPermissionType, binding.permission_type, f"{name}.permission_type"
        ),
    )


def _filter_message(acl_filter: AclBindingFilter, name: str) -> pb.AclBindingFilter:
    if not isinstance(acl_filter, AclBindingFilter):
        raise TypeError(f"{name} must be an AclBindingFilter, got {type(acl_filter).__name__}")
    message = pb.AclBindingFilter(
        resource_type=_acl_enum(ResourceType, acl_filter.resource_type, f"{name}.resource_type"),
        pattern_type=_acl_enum(PatternType, acl_filter.pattern_type, f"{name}.pattern_type"),
        operation=_acl_enum(AclOperation, acl_filter.operation, f"{name}.operation"),
        permission_type=_acl_enum(
            AclPermissionType, acl_filter.permission_type, f"{name}.permission_type"
        ),
    )
    # Unset optional strings match everything; set ones (even empty) match exactly.
    for field in ("resource_name", "principal", "host"):
        value = _acl_text(getattr(acl_filter, field), f"{name}.{field}", optional=True)
        if value is not None:
            setattr(message, field, value)
    return message


def create_acls_request(bindings: Iterable[AclBinding]) -> pb.CreateAclsRequest:
    if isinstance(bindings, AclBinding):
        raise TypeError("bindings must be a sequence of AclBinding, got one AclBinding")
    return pb.CreateAclsRequest(
        creations=[_binding_message(b, f"bindings[{i}]") for i, b in enumerate(bindings)]
    )


def delete_acls_request(filters: Iterable[AclBindingFilter]) -> pb.DeleteAclsRequest:
    if isinstance(filters, AclBindingFilter):
        raise TypeError("filters must be a sequence of AclBindingFilter, got one filter")
    return pb.DeleteAclsRequest(
        filters=[_filter_message(f, f"filters[{i}]") for i, f in enumerate(filters)]
    )


def describe_acls_request(acl_filter: AclBindingFilter) -> pb.DescribeAclsRequest:
    return pb.DescribeAclsRequest(filter=_filter_message(acl_filter, "acl_filter"))


def _known(enum_type: type[enum.IntEnum], value: int) -> int:
    # A number this client does not know (a newer server) stays a plain int.
    return enum_type._value2member_map_.get(value, value)  # type: ignore[return-value]


def acl_binding(message: pb.AclBinding) -> AclBinding:
    return AclBinding(
        resource_type=_known(ResourceType, message.resource_type),
        resource_name=message.resource_name,
        pattern_type=_known(PatternType, message.pattern_type),
        principal=message.principal,
        host=message.host,
        operation=_known(AclOperation, message.operation),
        permission_type=_known(AclPermissionType, message.permission_type),
    )


def cluster_metadata(response: pb.MetadataResponse) -> ClusterMetadata:
    """A Metadata answer as the client's :class:`ClusterMetadata`."""
    return ClusterMetadata(
        node_id=response.node_id,
        controller_id=response.controller_id,
        controller_epoch=response.controller_epoch,
        brokers=tuple(BrokerAddress(b.node_id, b.address, b.rack) for b in response.brokers),
        topics={
            t.name: tuple(
                PartitionLeadership(p.partition, p.leader, p.leader_epoch, tuple(p.replicas),
                                    tuple(p.isr))
                for p in t.partitions
            )
            for t in response.topics
        },
    )


def metadata_request(
    topics: Sequence[str], allow_auto_topic_creation: bool = False
) -> pb.MetadataRequest:
    return pb.MetadataRequest(topics=[check_topic(t) for t in topics],
                              allow_auto_topic_creation=bool(allow_auto_topic_creation))
