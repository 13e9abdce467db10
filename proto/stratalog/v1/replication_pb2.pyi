from stratalog.v1 import broker_pb2 as _broker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaFetchRequest(_message.Message):
    __slots__ = ("replica_id", "max_wait_ms", "max_bytes", "response_max_bytes", "partitions", "forgotten")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    max_wait_ms: int
    max_bytes: int
    response_max_bytes: int
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartition]
    forgotten: _containers.RepeatedCompositeFieldContainer[PartitionId]
    def __init__(self, replica_id: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ..., response_max_bytes: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[FetchPartition, _Mapping]]] = ..., forgotten: _Optional[_Iterable[_Union[PartitionId, _Mapping]]] = ...) -> None: ...

class PartitionId(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class FetchPartition(_message.Message):
    __slots__ = ("topic", "partition", "current_leader_epoch", "fetch_offset", "last_fetched_epoch", "log_start_offset", "log_end_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    log_end_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...

class DivergingEpoch(_message.Message):
    __slots__ = ("epoch", "end_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    end_offset: int
    def __init__(self, epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class PartitionData(_message.Message):
    __slots__ = ("topic", "partition", "fetch_offset", "high_watermark", "log_start_offset", "log_end_offset", "diverging_epoch", "error", "next_fetch_offset", "records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NEXT_FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    fetch_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: DivergingEpoch
    error: _broker_pb2.SessionError
    next_fetch_offset: int
    records: bytes
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., diverging_epoch: _Optional[_Union[DivergingEpoch, _Mapping]] = ..., error: _Optional[_Union[_broker_pb2.SessionError, _Mapping]] = ..., next_fetch_offset: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class ReplicaFetchResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionData]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionData, _Mapping]]] = ...) -> None: ...
