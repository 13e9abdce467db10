from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TxnPartitionError(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_PARTITION_ERROR_NONE: _ClassVar[TxnPartitionError]
    TXN_PARTITION_ERROR_NOT_LEADER: _ClassVar[TxnPartitionError]
    TXN_PARTITION_ERROR_UNKNOWN_PARTITION: _ClassVar[TxnPartitionError]
    TXN_PARTITION_ERROR_COORDINATOR_FENCED: _ClassVar[TxnPartitionError]
    TXN_PARTITION_ERROR_RETRIABLE: _ClassVar[TxnPartitionError]
    TXN_PARTITION_ERROR_PRODUCER_EPOCH_NEWER: _ClassVar[TxnPartitionError]
    TXN_PARTITION_ERROR_INVALID_TXN_STATE: _ClassVar[TxnPartitionError]
TXN_PARTITION_ERROR_NONE: TxnPartitionError
TXN_PARTITION_ERROR_NOT_LEADER: TxnPartitionError
TXN_PARTITION_ERROR_UNKNOWN_PARTITION: TxnPartitionError
TXN_PARTITION_ERROR_COORDINATOR_FENCED: TxnPartitionError
TXN_PARTITION_ERROR_RETRIABLE: TxnPartitionError
TXN_PARTITION_ERROR_PRODUCER_EPOCH_NEWER: TxnPartitionError
TXN_PARTITION_ERROR_INVALID_TXN_STATE: TxnPartitionError

class TxnPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class TxnPartitionResult(_message.Message):
    __slots__ = ("partition", "error", "error_message")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    partition: TxnPartition
    error: TxnPartitionError
    error_message: str
    def __init__(self, partition: _Optional[_Union[TxnPartition, _Mapping]] = ..., error: _Optional[_Union[TxnPartitionError, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class WriteTxnMarkersRequest(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "commit", "partitions")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: _containers.RepeatedCompositeFieldContainer[TxnPartition]
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., commit: _Optional[bool] = ..., partitions: _Optional[_Iterable[_Union[TxnPartition, _Mapping]]] = ...) -> None: ...

class WriteTxnMarkersResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TxnPartitionResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TxnPartitionResult, _Mapping]]] = ...) -> None: ...

class AllowTxnAppendsRequest(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "partitions")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[TxnPartition]
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TxnPartition, _Mapping]]] = ...) -> None: ...

class AllowTxnAppendsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TxnPartitionResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TxnPartitionResult, _Mapping]]] = ...) -> None: ...

class VerifyTxnAppendRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "partition")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partition: TxnPartition
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partition: _Optional[_Union[TxnPartition, _Mapping]] = ...) -> None: ...

class VerifyTxnAppendResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: TxnPartitionResult
    def __init__(self, result: _Optional[_Union[TxnPartitionResult, _Mapping]] = ...) -> None: ...
