from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaFetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "replica_id", "current_leader_epoch", "fetch_offset", "last_fetched_epoch", "log_start_offset", "max_bytes", "max_wait_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int
    max_wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replica_id: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class DivergingEpoch(_message.Message):
    __slots__ = ("epoch", "end_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    end_offset: int
    def __init__(self, epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class ReplicaFetchResponse(_message.Message):
    __slots__ = ("high_watermark", "log_start_offset", "records", "diverging_epoch", "log_end_offset")
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    high_watermark: int
    log_start_offset: int
    records: bytes
    diverging_epoch: DivergingEpoch
    log_end_offset: int
    def __init__(self, high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., diverging_epoch: _Optional[_Union[DivergingEpoch, _Mapping]] = ..., log_end_offset: _Optional[int] = ...) -> None: ...
