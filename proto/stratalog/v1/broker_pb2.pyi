from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorReason]
    OFFSET_OUT_OF_RANGE: _ClassVar[ErrorReason]
    CORRUPT_RECORD: _ClassVar[ErrorReason]
    INVALID_RECORD: _ClassVar[ErrorReason]
    RECORD_TOO_LARGE: _ClassVar[ErrorReason]
    INVALID_TOPIC: _ClassVar[ErrorReason]
    TOPIC_ALREADY_EXISTS: _ClassVar[ErrorReason]
    INVALID_TIMESTAMP: _ClassVar[ErrorReason]
    INVALID_CONFIG: _ClassVar[ErrorReason]
    INVALID_REQUEST: _ClassVar[ErrorReason]
    STORAGE_FULL: _ClassVar[ErrorReason]
    STORAGE_ERROR: _ClassVar[ErrorReason]
    SHUTTING_DOWN: _ClassVar[ErrorReason]
    AUTHENTICATION_FAILED: _ClassVar[ErrorReason]
    NOT_AUTHORIZED: _ClassVar[ErrorReason]
    OUT_OF_ORDER_SEQUENCE: _ClassVar[ErrorReason]
    INVALID_PRODUCER_EPOCH: _ClassVar[ErrorReason]
    UNKNOWN_PRODUCER_ID: _ClassVar[ErrorReason]
    INVALID_TXN_STATE: _ClassVar[ErrorReason]
    TRANSACTION_COORDINATOR_FENCED: _ClassVar[ErrorReason]
    CONCURRENT_TRANSACTIONS: _ClassVar[ErrorReason]
    COORDINATOR_LOAD_IN_PROGRESS: _ClassVar[ErrorReason]
    PRODUCER_FENCED: _ClassVar[ErrorReason]
    INVALID_PRODUCER_ID_MAPPING: _ClassVar[ErrorReason]
    TRANSACTIONAL_ID_NOT_FOUND: _ClassVar[ErrorReason]
    INVALID_TRANSACTION_TIMEOUT: _ClassVar[ErrorReason]
    RESOURCE_LIMIT_EXCEEDED: _ClassVar[ErrorReason]
    NOT_LEADER_OR_FOLLOWER: _ClassVar[ErrorReason]
    NOT_ENOUGH_REPLICAS: _ClassVar[ErrorReason]
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: _ClassVar[ErrorReason]
    FENCED_LEADER_EPOCH: _ClassVar[ErrorReason]
    UNKNOWN_LEADER_EPOCH: _ClassVar[ErrorReason]
    LEADER_NOT_AVAILABLE: _ClassVar[ErrorReason]
    INVALID_REPLICATION_FACTOR: _ClassVar[ErrorReason]
    REQUEST_TIMED_OUT: _ClassVar[ErrorReason]
    COORDINATION_UNAVAILABLE: _ClassVar[ErrorReason]
    INVALID_PARTITIONS: _ClassVar[ErrorReason]
    COORDINATOR_NOT_AVAILABLE: _ClassVar[ErrorReason]
    NOT_COORDINATOR: _ClassVar[ErrorReason]
    UNKNOWN_MEMBER_ID: _ClassVar[ErrorReason]
    ILLEGAL_GENERATION: _ClassVar[ErrorReason]
    REBALANCE_IN_PROGRESS: _ClassVar[ErrorReason]
    FENCED_INSTANCE_ID: _ClassVar[ErrorReason]
    MEMBER_ID_REQUIRED: _ClassVar[ErrorReason]
    GROUP_MAX_SIZE_REACHED: _ClassVar[ErrorReason]
    INCONSISTENT_GROUP_PROTOCOL: _ClassVar[ErrorReason]
    INVALID_GROUP_ID: _ClassVar[ErrorReason]
    INVALID_SESSION_TIMEOUT: _ClassVar[ErrorReason]
    NON_EMPTY_GROUP: _ClassVar[ErrorReason]
    GROUP_ID_NOT_FOUND: _ClassVar[ErrorReason]
    UNSTABLE_OFFSET_COMMIT: _ClassVar[ErrorReason]
    OFFSET_METADATA_TOO_LARGE: _ClassVar[ErrorReason]
    GROUP_SUBSCRIBED_TO_TOPIC: _ClassVar[ErrorReason]
    ELECTION_NOT_NEEDED: _ClassVar[ErrorReason]
    PREFERRED_LEADER_NOT_AVAILABLE: _ClassVar[ErrorReason]
    ELIGIBLE_LEADERS_NOT_AVAILABLE: _ClassVar[ErrorReason]
    INVALID_REPLICA_ASSIGNMENT: _ClassVar[ErrorReason]
    NO_REASSIGNMENT_IN_PROGRESS: _ClassVar[ErrorReason]

class Compression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_NONE: _ClassVar[Compression]
    COMPRESSION_GZIP: _ClassVar[Compression]
    COMPRESSION_SNAPPY: _ClassVar[Compression]
    COMPRESSION_LZ4: _ClassVar[Compression]
    COMPRESSION_ZSTD: _ClassVar[Compression]

class TimestampType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIMESTAMP_TYPE_UNSPECIFIED: _ClassVar[TimestampType]
    CREATE_TIME: _ClassVar[TimestampType]
    LOG_APPEND_TIME: _ClassVar[TimestampType]

class FetchFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FETCH_FORMAT_RECORDS: _ClassVar[FetchFormat]
    FETCH_FORMAT_RECORD_BATCHES: _ClassVar[FetchFormat]

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_UNCOMMITTED: _ClassVar[IsolationLevel]
    READ_COMMITTED: _ClassVar[IsolationLevel]

class ElectionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ELECTION_TYPE_PREFERRED: _ClassVar[ElectionType]
    ELECTION_TYPE_UNCLEAN: _ClassVar[ElectionType]

class ResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOURCE_TYPE_UNKNOWN: _ClassVar[ResourceType]
    RESOURCE_TYPE_ANY: _ClassVar[ResourceType]
    RESOURCE_TYPE_TOPIC: _ClassVar[ResourceType]
    RESOURCE_TYPE_GROUP: _ClassVar[ResourceType]
    RESOURCE_TYPE_CLUSTER: _ClassVar[ResourceType]
    RESOURCE_TYPE_TRANSACTIONAL_ID: _ClassVar[ResourceType]

class PatternType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PATTERN_TYPE_UNKNOWN: _ClassVar[PatternType]
    PATTERN_TYPE_ANY: _ClassVar[PatternType]
    PATTERN_TYPE_MATCH: _ClassVar[PatternType]
    PATTERN_TYPE_LITERAL: _ClassVar[PatternType]
    PATTERN_TYPE_PREFIXED: _ClassVar[PatternType]

class AclOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_OPERATION_UNKNOWN: _ClassVar[AclOperation]
    ACL_OPERATION_ANY: _ClassVar[AclOperation]
    ACL_OPERATION_ALL: _ClassVar[AclOperation]
    ACL_OPERATION_READ: _ClassVar[AclOperation]
    ACL_OPERATION_WRITE: _ClassVar[AclOperation]
    ACL_OPERATION_CREATE: _ClassVar[AclOperation]
    ACL_OPERATION_DELETE: _ClassVar[AclOperation]
    ACL_OPERATION_ALTER: _ClassVar[AclOperation]
    ACL_OPERATION_DESCRIBE: _ClassVar[AclOperation]
    ACL_OPERATION_CLUSTER_ACTION: _ClassVar[AclOperation]
    ACL_OPERATION_DESCRIBE_CONFIGS: _ClassVar[AclOperation]
    ACL_OPERATION_ALTER_CONFIGS: _ClassVar[AclOperation]
    ACL_OPERATION_IDEMPOTENT_WRITE: _ClassVar[AclOperation]

class AclPermissionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_PERMISSION_TYPE_UNKNOWN: _ClassVar[AclPermissionType]
    ACL_PERMISSION_TYPE_ANY: _ClassVar[AclPermissionType]
    ACL_PERMISSION_TYPE_DENY: _ClassVar[AclPermissionType]
    ACL_PERMISSION_TYPE_ALLOW: _ClassVar[AclPermissionType]

class CoordinatorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COORDINATOR_TYPE_GROUP: _ClassVar[CoordinatorType]
    COORDINATOR_TYPE_TRANSACTION: _ClassVar[CoordinatorType]
ERROR_REASON_UNSPECIFIED: ErrorReason
UNKNOWN_TOPIC_OR_PARTITION: ErrorReason
OFFSET_OUT_OF_RANGE: ErrorReason
CORRUPT_RECORD: ErrorReason
INVALID_RECORD: ErrorReason
RECORD_TOO_LARGE: ErrorReason
INVALID_TOPIC: ErrorReason
TOPIC_ALREADY_EXISTS: ErrorReason
INVALID_TIMESTAMP: ErrorReason
INVALID_CONFIG: ErrorReason
INVALID_REQUEST: ErrorReason
STORAGE_FULL: ErrorReason
STORAGE_ERROR: ErrorReason
SHUTTING_DOWN: ErrorReason
AUTHENTICATION_FAILED: ErrorReason
NOT_AUTHORIZED: ErrorReason
OUT_OF_ORDER_SEQUENCE: ErrorReason
INVALID_PRODUCER_EPOCH: ErrorReason
UNKNOWN_PRODUCER_ID: ErrorReason
INVALID_TXN_STATE: ErrorReason
TRANSACTION_COORDINATOR_FENCED: ErrorReason
CONCURRENT_TRANSACTIONS: ErrorReason
COORDINATOR_LOAD_IN_PROGRESS: ErrorReason
PRODUCER_FENCED: ErrorReason
INVALID_PRODUCER_ID_MAPPING: ErrorReason
TRANSACTIONAL_ID_NOT_FOUND: ErrorReason
INVALID_TRANSACTION_TIMEOUT: ErrorReason
RESOURCE_LIMIT_EXCEEDED: ErrorReason
NOT_LEADER_OR_FOLLOWER: ErrorReason
NOT_ENOUGH_REPLICAS: ErrorReason
NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorReason
FENCED_LEADER_EPOCH: ErrorReason
UNKNOWN_LEADER_EPOCH: ErrorReason
LEADER_NOT_AVAILABLE: ErrorReason
INVALID_REPLICATION_FACTOR: ErrorReason
REQUEST_TIMED_OUT: ErrorReason
COORDINATION_UNAVAILABLE: ErrorReason
INVALID_PARTITIONS: ErrorReason
COORDINATOR_NOT_AVAILABLE: ErrorReason
NOT_COORDINATOR: ErrorReason
UNKNOWN_MEMBER_ID: ErrorReason
ILLEGAL_GENERATION: ErrorReason
REBALANCE_IN_PROGRESS: ErrorReason
FENCED_INSTANCE_ID: ErrorReason
MEMBER_ID_REQUIRED: ErrorReason
GROUP_MAX_SIZE_REACHED: ErrorReason
INCONSISTENT_GROUP_PROTOCOL: ErrorReason
INVALID_GROUP_ID: ErrorReason
INVALID_SESSION_TIMEOUT: ErrorReason
NON_EMPTY_GROUP: ErrorReason
GROUP_ID_NOT_FOUND: ErrorReason
UNSTABLE_OFFSET_COMMIT: ErrorReason
OFFSET_METADATA_TOO_LARGE: ErrorReason
GROUP_SUBSCRIBED_TO_TOPIC: ErrorReason
ELECTION_NOT_NEEDED: ErrorReason
PREFERRED_LEADER_NOT_AVAILABLE: ErrorReason
ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorReason
INVALID_REPLICA_ASSIGNMENT: ErrorReason
NO_REASSIGNMENT_IN_PROGRESS: ErrorReason
COMPRESSION_NONE: Compression
COMPRESSION_GZIP: Compression
COMPRESSION_SNAPPY: Compression
COMPRESSION_LZ4: Compression
COMPRESSION_ZSTD: Compression
TIMESTAMP_TYPE_UNSPECIFIED: TimestampType
CREATE_TIME: TimestampType
LOG_APPEND_TIME: TimestampType
FETCH_FORMAT_RECORDS: FetchFormat
FETCH_FORMAT_RECORD_BATCHES: FetchFormat
READ_UNCOMMITTED: IsolationLevel
READ_COMMITTED: IsolationLevel
ELECTION_TYPE_PREFERRED: ElectionType
ELECTION_TYPE_UNCLEAN: ElectionType
RESOURCE_TYPE_UNKNOWN: ResourceType
RESOURCE_TYPE_ANY: ResourceType
RESOURCE_TYPE_TOPIC: ResourceType
RESOURCE_TYPE_GROUP: ResourceType
RESOURCE_TYPE_CLUSTER: ResourceType
RESOURCE_TYPE_TRANSACTIONAL_ID: ResourceType
PATTERN_TYPE_UNKNOWN: PatternType
PATTERN_TYPE_ANY: PatternType
PATTERN_TYPE_MATCH: PatternType
PATTERN_TYPE_LITERAL: PatternType
PATTERN_TYPE_PREFIXED: PatternType
ACL_OPERATION_UNKNOWN: AclOperation
ACL_OPERATION_ANY: AclOperation
ACL_OPERATION_ALL: AclOperation
ACL_OPERATION_READ: AclOperation
ACL_OPERATION_WRITE: AclOperation
ACL_OPERATION_CREATE: AclOperation
ACL_OPERATION_DELETE: AclOperation
ACL_OPERATION_ALTER: AclOperation
ACL_OPERATION_DESCRIBE: AclOperation
ACL_OPERATION_CLUSTER_ACTION: AclOperation
ACL_OPERATION_DESCRIBE_CONFIGS: AclOperation
ACL_OPERATION_ALTER_CONFIGS: AclOperation
ACL_OPERATION_IDEMPOTENT_WRITE: AclOperation
ACL_PERMISSION_TYPE_UNKNOWN: AclPermissionType
ACL_PERMISSION_TYPE_ANY: AclPermissionType
ACL_PERMISSION_TYPE_DENY: AclPermissionType
ACL_PERMISSION_TYPE_ALLOW: AclPermissionType
COORDINATOR_TYPE_GROUP: CoordinatorType
COORDINATOR_TYPE_TRANSACTION: CoordinatorType

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("offset", "timestamp", "key", "value", "headers", "timestamp_type")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    timestamp: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    timestamp_type: TimestampType
    def __init__(self, offset: _Optional[int] = ..., timestamp: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "partition", "records", "record_batches", "compression", "flush", "producer_id", "producer_epoch", "base_sequence", "transactional", "acks", "transactional_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_BATCHES_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    records: _containers.RepeatedCompositeFieldContainer[Record]
    record_batches: bytes
    compression: Compression
    flush: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    acks: int
    transactional_id: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., record_batches: _Optional[bytes] = ..., compression: _Optional[_Union[Compression, str]] = ..., flush: _Optional[bool] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., base_sequence: _Optional[int] = ..., transactional: _Optional[bool] = ..., acks: _Optional[int] = ..., transactional_id: _Optional[str] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("base_offset", "last_offset", "log_append_time", "log_start_offset", "record_count", "duplicate", "throttle_time_ms")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_APPEND_TIME_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool
    throttle_time_ms: int
    def __init__(self, base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., log_append_time: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., record_count: _Optional[int] = ..., duplicate: _Optional[bool] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class FetchByOffsetRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_bytes", "max_wait_ms", "min_bytes", "format", "isolation_level", "max_records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int
    min_bytes: int
    format: FetchFormat
    isolation_level: IsolationLevel
    max_records: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., format: _Optional[_Union[FetchFormat, str]] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., max_records: _Optional[int] = ...) -> None: ...

class FetchByTimestampRequest(_message.Message):
    __slots__ = ("topic", "partition", "timestamp", "max_bytes", "format", "isolation_level", "max_records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    timestamp: int
    max_bytes: int
    format: FetchFormat
    isolation_level: IsolationLevel
    max_records: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., timestamp: _Optional[int] = ..., max_bytes: _Optional[int] = ..., format: _Optional[_Union[FetchFormat, str]] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., max_records: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("topic", "partition", "high_watermark", "log_start_offset", "next_offset", "records", "record_batches", "matched_offset", "matched_timestamp", "aborted_transactions", "last_stable_offset", "throttle_time_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_BATCHES_FIELD_NUMBER: _ClassVar[int]
    MATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int
    next_offset: int
    records: _containers.RepeatedCompositeFieldContainer[Record]
    record_batches: bytes
    matched_offset: int
    matched_timestamp: int
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[AbortedTransaction]
    last_stable_offset: int
    throttle_time_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., record_batches: _Optional[bytes] = ..., matched_offset: _Optional[int] = ..., matched_timestamp: _Optional[int] = ..., aborted_transactions: _Optional[_Iterable[_Union[AbortedTransaction, _Mapping]]] = ..., last_stable_offset: _Optional[int] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class AbortedTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic", "partition", "timestamp", "isolation_level")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    timestamp: int
    isolation_level: IsolationLevel
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., timestamp: _Optional[int] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("offset", "timestamp")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    offset: int
    timestamp: int
    def __init__(self, offset: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "timestamp", "max_bytes", "format", "isolation_level")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    timestamp: int
    max_bytes: int
    format: FetchFormat
    isolation_level: IsolationLevel
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., timestamp: _Optional[int] = ..., max_bytes: _Optional[int] = ..., format: _Optional[_Union[FetchFormat, str]] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ...) -> None: ...

class DeleteRecordsRequest(_message.Message):
    __slots__ = ("topic", "partition", "before_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BEFORE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    before_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., before_offset: _Optional[int] = ...) -> None: ...

class DeleteRecordsResponse(_message.Message):
    __slots__ = ("log_start_offset",)
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    log_start_offset: int
    def __init__(self, log_start_offset: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "configs", "replication_factor")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    configs: _containers.ScalarMap[str, str]
    replication_factor: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicDescription
    def __init__(self, topic: _Optional[_Union[TopicDescription, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicDescription]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicDescription, _Mapping]]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DescribeTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicDescription
    def __init__(self, topic: _Optional[_Union[TopicDescription, _Mapping]] = ...) -> None: ...

class AlterTopicConfigsRequest(_message.Message):
    __slots__ = ("name", "set", "delete")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    name: str
    set: _containers.ScalarMap[str, str]
    delete: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., set: _Optional[_Mapping[str, str]] = ..., delete: _Optional[_Iterable[str]] = ...) -> None: ...

class AlterTopicConfigsResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicDescription
    def __init__(self, topic: _Optional[_Union[TopicDescription, _Mapping]] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("name", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicDescription
    def __init__(self, topic: _Optional[_Union[TopicDescription, _Mapping]] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("partitions", "election_type")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ELECTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    election_type: ElectionType
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., election_type: _Optional[_Union[ElectionType, str]] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ElectLeadersResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ElectLeadersResult, _Mapping]]] = ...) -> None: ...

class ElectLeadersResult(_message.Message):
    __slots__ = ("topic", "partition", "reason", "message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    reason: ErrorReason
    message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., reason: _Optional[_Union[ErrorReason, str]] = ..., message: _Optional[str] = ...) -> None: ...

class AlterPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionReassignmentTarget]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionReassignmentTarget, _Mapping]]] = ...) -> None: ...

class PartitionReassignmentTarget(_message.Message):
    __slots__ = ("topic", "partition", "replicas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class AlterPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReassignmentResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ReassignmentResult, _Mapping]]] = ...) -> None: ...

class ReassignmentResult(_message.Message):
    __slots__ = ("topic", "partition", "reason", "message", "replicas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    reason: ErrorReason
    message: str
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., reason: _Optional[_Union[ErrorReason, str]] = ..., message: _Optional[str] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class ListPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class ListPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("reassignments",)
    REASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    reassignments: _containers.RepeatedCompositeFieldContainer[OngoingReassignment]
    def __init__(self, reassignments: _Optional[_Iterable[_Union[OngoingReassignment, _Mapping]]] = ...) -> None: ...

class OngoingReassignment(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "adding_replicas", "removing_replicas", "leader", "leader_log_end_offset", "progress")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    leader_log_end_offset: int
    progress: _containers.RepeatedCompositeFieldContainer[ReplicaProgress]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_log_end_offset: _Optional[int] = ..., progress: _Optional[_Iterable[_Union[ReplicaProgress, _Mapping]]] = ...) -> None: ...

class ReplicaProgress(_message.Message):
    __slots__ = ("node_id", "log_end_offset")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    log_end_offset: int
    def __init__(self, node_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...

class DrainBrokerRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    def __init__(self, node_id: _Optional[int] = ...) -> None: ...

class DrainBrokerResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReassignmentResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ReassignmentResult, _Mapping]]] = ...) -> None: ...

class TopicDescription(_message.Message):
    __slots__ = ("name", "configs", "partitions", "overridden_configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OVERRIDDEN_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    configs: _containers.ScalarMap[str, str]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    overridden_configs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., configs: _Optional[_Mapping[str, str]] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ..., overridden_configs: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition", "log_start_offset", "log_end_offset", "size_bytes", "segment_count", "log_dir", "max_timestamp", "cleaned_offset", "dirty_ratio", "last_clean_ms")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CLEANED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIRTY_RATIO_FIELD_NUMBER: _ClassVar[int]
    LAST_CLEAN_MS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segment_count: int
    log_dir: str
    max_timestamp: int
    cleaned_offset: int
    dirty_ratio: float
    last_clean_ms: int
    def __init__(self, partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., size_bytes: _Optional[int] = ..., segment_count: _Optional[int] = ..., log_dir: _Optional[str] = ..., max_timestamp: _Optional[int] = ..., cleaned_offset: _Optional[int] = ..., dirty_ratio: _Optional[float] = ..., last_clean_ms: _Optional[int] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id", "transaction_timeout_ms")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    transaction_timeout_ms: int
    def __init__(self, transactional_id: _Optional[str] = ..., transaction_timeout_ms: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("producer_id", "producer_epoch")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class TopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class AddPartitionsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "commit")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., commit: _Optional[bool] = ...) -> None: ...

class EndTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeTransactionRequest(_message.Message):
    __slots__ = ("transactional_id",)
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    def __init__(self, transactional_id: _Optional[str] = ...) -> None: ...

class DescribeTransactionResponse(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "state", "transaction_timeout_ms", "transaction_start_time_ms", "last_update_time_ms", "partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    last_update_time_ms: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., state: _Optional[str] = ..., transaction_timeout_ms: _Optional[int] = ..., transaction_start_time_ms: _Optional[int] = ..., last_update_time_ms: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType
    def __init__(self, resource_type: _Optional[_Union[ResourceType, str]] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[_Union[PatternType, str]] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[_Union[AclOperation, str]] = ..., permission_type: _Optional[_Union[AclPermissionType, str]] = ...) -> None: ...

class AclBindingFilter(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType
    def __init__(self, resource_type: _Optional[_Union[ResourceType, str]] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[_Union[PatternType, str]] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[_Union[AclOperation, str]] = ..., permission_type: _Optional[_Union[AclPermissionType, str]] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("creations",)
    CREATIONS_FIELD_NUMBER: _ClassVar[int]
    creations: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, creations: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclBindingFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[AclBindingFilter, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, deleted: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AclBindingFilter
    def __init__(self, filter: _Optional[_Union[AclBindingFilter, _Mapping]] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("principal", "authenticated_by", "host")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    AUTHENTICATED_BY_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    principal: str
    authenticated_by: str
    host: str
    def __init__(self, principal: _Optional[str] = ..., authenticated_by: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("id", "produce", "fetch_by_offset", "fetch_by_timestamp", "list_offsets")
    ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_FIELD_NUMBER: _ClassVar[int]
    FETCH_BY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FETCH_BY_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    LIST_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    id: int
    produce: ProduceRequest
    fetch_by_offset: FetchByOffsetRequest
    fetch_by_timestamp: FetchByTimestampRequest
    list_offsets: ListOffsetsRequest
    def __init__(self, id: _Optional[int] = ..., produce: _Optional[_Union[ProduceRequest, _Mapping]] = ..., fetch_by_offset: _Optional[_Union[FetchByOffsetRequest, _Mapping]] = ..., fetch_by_timestamp: _Optional[_Union[FetchByTimestampRequest, _Mapping]] = ..., list_offsets: _Optional[_Union[ListOffsetsRequest, _Mapping]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("id", "produce", "fetch", "list_offsets", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    LIST_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    produce: ProduceResponse
    fetch: FetchResponse
    list_offsets: ListOffsetsResponse
    error: SessionError
    def __init__(self, id: _Optional[int] = ..., produce: _Optional[_Union[ProduceResponse, _Mapping]] = ..., fetch: _Optional[_Union[FetchResponse, _Mapping]] = ..., list_offsets: _Optional[_Union[ListOffsetsResponse, _Mapping]] = ..., error: _Optional[_Union[SessionError, _Mapping]] = ...) -> None: ...

class SessionError(_message.Message):
    __slots__ = ("code", "message", "reason", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: ErrorReason
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[_Union[ErrorReason, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CleanPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class CleanPartitionResponse(_message.Message):
    __slots__ = ("first_dirty_offset_before", "end_offset", "bytes_read", "bytes_written", "records_read", "records_kept", "segments_before", "segments_after", "duration_ms")
    FIRST_DIRTY_OFFSET_BEFORE_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_READ_FIELD_NUMBER: _ClassVar[int]
    RECORDS_KEPT_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_AFTER_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    first_dirty_offset_before: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    segments_before: int
    segments_after: int
    duration_ms: int
    def __init__(self, first_dirty_offset_before: _Optional[int] = ..., end_offset: _Optional[int] = ..., bytes_read: _Optional[int] = ..., bytes_written: _Optional[int] = ..., records_read: _Optional[int] = ..., records_kept: _Optional[int] = ..., segments_before: _Optional[int] = ..., segments_after: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics", "allow_auto_topic_creation")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_AUTO_TOPIC_CREATION_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    allow_auto_topic_creation: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., allow_auto_topic_creation: _Optional[bool] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("brokers", "controller_id", "controller_epoch", "topics", "node_id")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerMetadata]
    controller_id: int
    controller_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicMetadata]
    node_id: int
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerMetadata, _Mapping]]] = ..., controller_id: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicMetadata, _Mapping]]] = ..., node_id: _Optional[int] = ...) -> None: ...

class BrokerMetadata(_message.Message):
    __slots__ = ("node_id", "address", "rack")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    address: str
    rack: str
    def __init__(self, node_id: _Optional[int] = ..., address: _Optional[str] = ..., rack: _Optional[str] = ...) -> None: ...

class TopicMetadata(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("partition", "leader", "leader_epoch", "replicas", "isr")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    partition: int
    leader: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("key", "key_type")
    KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    key: str
    key_type: CoordinatorType
    def __init__(self, key: _Optional[str] = ..., key_type: _Optional[_Union[CoordinatorType, str]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("node_id", "address", "partition")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    address: str
    partition: int
    def __init__(self, node_id: _Optional[int] = ..., address: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class GroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "group_instance_id", "protocol_type", "protocols", "reason")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[GroupProtocol]
    reason: str
    def __init__(self, group_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[GroupProtocol, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class JoinGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "metadata")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    metadata: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("generation_id", "protocol_type", "protocol_name", "leader_id", "member_id", "skip_assignment", "members")
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader_id: str
    member_id: str
    skip_assignment: bool
    members: _containers.RepeatedCompositeFieldContainer[JoinGroupMember]
    def __init__(self, generation_id: _Optional[int] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., leader_id: _Optional[str] = ..., member_id: _Optional[str] = ..., skip_assignment: _Optional[bool] = ..., members: _Optional[_Iterable[_Union[JoinGroupMember, _Mapping]]] = ...) -> None: ...

class SyncGroupAssignment(_message.Message):
    __slots__ = ("member_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "protocol_type", "protocol_name", "assignments")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocol_name: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupAssignment]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupAssignment, _Mapping]]] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("protocol_type", "protocol_name", "assignment")
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    protocol_type: str
    protocol_name: str
    assignment: bytes
    def __init__(self, protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "max_wait_ms")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    max_wait_ms: int
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeavingMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "reason")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    reason: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    members: _containers.RepeatedCompositeFieldContainer[LeavingMember]
    def __init__(self, group_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeavingMember, _Mapping]]] = ...) -> None: ...

class LeftMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "error", "error_message")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    error: ErrorReason
    error_message: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., error: _Optional[_Union[ErrorReason, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[LeftMember]
    def __init__(self, members: _Optional[_Iterable[_Union[LeftMember, _Mapping]]] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "leader_epoch", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "offsets")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "partitions", "require_stable")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("states_filter",)
    STATES_FILTER_FIELD_NUMBER: _ClassVar[int]
    states_filter: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, states_filter: _Optional[_Iterable[str]] = ...) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group_id", "protocol_type", "state")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    protocol_type: str
    state: str
    def __init__(self, group_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribedMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "metadata", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., metadata: _Optional[bytes] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class DescribedGroup(_message.Message):
    __slots__ = ("group_id", "error", "error_message", "state", "protocol_type", "protocol_name", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error: ErrorReason
    error_message: str
    state: str
    protocol_type: str
    protocol_name: str
    members: _containers.RepeatedCompositeFieldContainer[DescribedMember]
    def __init__(self, group_id: _Optional[str] = ..., error: _Optional[_Union[ErrorReason, str]] = ..., error_message: _Optional[str] = ..., state: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribedMember, _Mapping]]] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribedGroup, _Mapping]]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeletedGroup(_message.Message):
    __slots__ = ("group_id", "error", "error_message")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error: ErrorReason
    error_message: str
    def __init__(self, group_id: _Optional[str] = ..., error: _Optional[_Union[ErrorReason, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DeletedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[DeletedGroup, _Mapping]]] = ...) -> None: ...

class OffsetDeleteRequest(_message.Message):
    __slots__ = ("group_id", "partitions")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class OffsetDeleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddOffsetsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "group_id")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., group_id: _Optional[str] = ...) -> None: ...

class AddOffsetsToTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TxnOffsetCommitRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "group_id", "generation_id", "member_id", "group_instance_id", "offsets")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
