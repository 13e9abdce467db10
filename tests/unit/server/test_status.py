"""server/rpc/status.py: every domain error becomes the contract's status code, reason and metadata.

Statuses are decoded the way a client sees them: the ``grpc-status-details-bin`` trailer parsed
into google.rpc.Status and its ErrorInfo unpacked. The round trip through a live server is in
tests/unit/client/test_errors.py.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from stratalog.records import errors as record_errors
from stratalog.server.client_limits import ClientLimitExceededError
from stratalog.server.rpc import status
from stratalog.server.security.errors import NotAuthorizedError
from stratalog.server.storage import errors as storage_errors
from stratalog.server.transactions import errors as transaction_errors
from stratalog.v1 import broker_pb2

DETAILS_KEY = "grpc-status-details-bin"
SERVER_PATH = "/srv/stratalog/data/orders-3/00000000000000000000.index"


def decode(grpc_status: grpc.Status) -> tuple[status_pb2.Status, error_details_pb2.ErrorInfo | None]:
    """The rich status and its ErrorInfo (None when absent), checked against the plain status."""
    trailers = dict(grpc_status.trailing_metadata)
    assert set(trailers) == {DETAILS_KEY}
    rich = status_pb2.Status.FromString(trailers[DETAILS_KEY])
    assert rich.code == grpc_status.code.value[0]
    assert rich.message == grpc_status.details
    infos = []
    for detail in rich.details:
        info = error_details_pb2.ErrorInfo()
        assert detail.Unpack(info), f"unexpected detail type {detail.type_url}"
        infos.append(info)
    assert len(infos) <= 1
    return rich, (infos[0] if infos else None)


def out_of_range() -> storage_errors.OffsetOutOfRangeError:
    return storage_errors.OffsetOutOfRangeError(
        "offset 7 is out of range [100, 250) of orders-3", log_start_offset=100, log_end_offset=250
    )


def io_error(code: int, *, explicit_cause: bool = True) -> storage_errors.StorageIOError:
    """A StorageIOError raised from (or while handling) an OSError, as the engine wraps them."""
    try:
        try:
            raise OSError(code, "simulated", SERVER_PATH)
        except OSError as os_error:
            if explicit_cause:
                raise storage_errors.StorageIOError(f"append to {SERVER_PATH} failed") from os_error
            raise storage_errors.StorageIOError(f"append to {SERVER_PATH} failed") from None
    except storage_errors.StorageIOError as exc:
        if not explicit_cause:
            # `from None` hides the context from tracebacks but keeps it: the status still sees it.
            assert exc.__context__ is not None
        return exc


# Client-caused errors: the exception's own message goes to the client.
CLIENT_CASES = [
    (record_errors.CorruptRecordError("CRC mismatch at position 61"), "INVALID_ARGUMENT",
     "CORRUPT_RECORD"),
    (record_errors.InvalidRecordError("magic 1 at position 16; only 2 is supported"),
     "INVALID_ARGUMENT", "INVALID_RECORD"),
    (record_errors.UnsupportedCompressionError("codec id 6"), "INVALID_ARGUMENT", "INVALID_RECORD"),
    (record_errors.RecordTooLargeError("batch of 2000000 bytes over 1048588"), "INVALID_ARGUMENT",
     "RECORD_TOO_LARGE"),
    (record_errors.RecordError("some future codec failure"), "INVALID_ARGUMENT", "INVALID_RECORD"),
    (storage_errors.UnknownTopicOrPartitionError("orders-9"), "NOT_FOUND",
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (storage_errors.TopicAlreadyExistsError("orders"), "ALREADY_EXISTS", "TOPIC_ALREADY_EXISTS"),
    (storage_errors.InvalidTopicError("'..' is not a topic name"), "INVALID_ARGUMENT",
     "INVALID_TOPIC"),
    (storage_errors.InvalidConfigError("segment.bytes=-1 below 14"), "INVALID_ARGUMENT",
     "INVALID_CONFIG"),
    (storage_errors.InvalidTimestampError("timestamp 5 more than 1h before now"),
     "INVALID_ARGUMENT", "INVALID_TIMESTAMP"),
    (storage_errors.RecordBatchTooLargeError("2000000 bytes over segment.bytes 1048576"),
     "INVALID_ARGUMENT", "RECORD_TOO_LARGE"),
    # The partition's producer state (idempotent and transactional produce).
    (storage_errors.OutOfOrderSequenceError("producer 7: sequence 5 after 2", producer_id=7),
     "FAILED_PRECONDITION", "OUT_OF_ORDER_SEQUENCE"),
    (storage_errors.InvalidProducerEpochError("producer 7: epoch 1 below 2", producer_id=7),
     "FAILED_PRECONDITION", "INVALID_PRODUCER_EPOCH"),
    (storage_errors.UnknownProducerIdError("producer 7 unknown, sequence 9", producer_id=7),
     "FAILED_PRECONDITION", "UNKNOWN_PRODUCER_ID"),
    (storage_errors.InvalidTxnStateError("producer 7: plain batch in a transaction",
                                         producer_id=7), "FAILED_PRECONDITION",
     "INVALID_TXN_STATE"),
    (storage_errors.TransactionCoordinatorFencedError("coordinator epoch 3 below 4",
                                                      producer_id=7),
     "FAILED_PRECONDITION", "TRANSACTION_COORDINATOR_FENCED"),
    # The transaction coordinator: what the producer asked for does not fit its state.
    (transaction_errors.ProducerFencedError("epoch 3 is not 4"), "FAILED_PRECONDITION",
     "PRODUCER_FENCED"),
    (transaction_errors.InvalidTxnStateError(
        "partition orders-1 was not added to the transaction of producer 7 (transactional id "
        "'x', state Ongoing); call AddPartitionsToTxn first"),
     "FAILED_PRECONDITION", "INVALID_TXN_STATE"),
    (transaction_errors.InvalidProducerIdMappingError("producer id 7 is not 'x''s"),
     "FAILED_PRECONDITION", "INVALID_PRODUCER_ID_MAPPING"),
    (transaction_errors.TransactionalIdNotFoundError("'x' is unknown"), "NOT_FOUND",
     "TRANSACTIONAL_ID_NOT_FOUND"),
    (transaction_errors.InvalidTransactionTimeoutError("0 ms is not in 1 .. 900000"),
     "INVALID_ARGUMENT", "INVALID_TRANSACTION_TIMEOUT"),
    (transaction_errors.InvalidTransactionalIdError("no partitions to add"), "INVALID_ARGUMENT",
     "INVALID_REQUEST"),
    # Issue 16: CleanPartition on a topic that is not compacted.
    (storage_errors.LogNotCompactedError(
        "topic orders has cleanup.policy=delete: only a compacted topic is cleaned"),
     "INVALID_ARGUMENT", "INVALID_CONFIG"),
    # Retriable: the same request succeeds later (the client's table says so too).
    (transaction_errors.ConcurrentTransactionsError("markers being written; retry"), "ABORTED",
     "CONCURRENT_TRANSACTIONS"),
    (transaction_errors.CoordinatorLoadInProgressError("loading; retry"), "UNAVAILABLE",
     "COORDINATOR_LOAD_IN_PROGRESS"),
]


@pytest.mark.parametrize(("exc", "code", "reason"), CLIENT_CASES,
                         ids=[type(c[0]).__name__ for c in CLIENT_CASES])
def test_client_caused_errors_carry_code_reason_and_their_message(exc, code, reason) -> None:
    grpc_status = status.to_status(exc)
    _, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode[code]
    assert grpc_status.details == str(exc)
    assert info is not None
    assert (info.reason, info.domain) == (reason, "stratalog")
    assert dict(info.metadata) == {}
    assert status.classify(exc) == status.ErrorMapping(grpc.StatusCode[code], reason)


def test_offset_out_of_range_carries_the_log_bounds() -> None:
    exc = out_of_range()
    grpc_status = status.to_status(exc)
    _, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode.OUT_OF_RANGE
    assert grpc_status.details == "offset 7 is out of range [100, 250) of orders-3"
    assert info.reason == "OFFSET_OUT_OF_RANGE"
    assert dict(info.metadata) == {"log_start_offset": "100", "log_end_offset": "250"}


SERVER_SIDE_CASES = [
    (storage_errors.CorruptIndexError(f"{SERVER_PATH}: 13 bytes is not a multiple of 8"),
     "UNAVAILABLE", "STORAGE_ERROR"),
    (storage_errors.InvalidOffsetError(f"{SERVER_PATH}: offset 5 after 9"), "UNAVAILABLE",
     "STORAGE_ERROR"),
    (storage_errors.OffsetOverflowError(f"{SERVER_PATH}: 2^31 past base"), "UNAVAILABLE",
     "STORAGE_ERROR"),
    (storage_errors.LogDirLockedError(f"{SERVER_PATH} locked by pid 12"), "UNAVAILABLE",
     "STORAGE_ERROR"),
    (storage_errors.StorageError(f"{SERVER_PATH} is odd"), "UNAVAILABLE", "STORAGE_ERROR"),
    (storage_errors.LogClosedError(f"log {SERVER_PATH} is closed"), "UNAVAILABLE",
     "SHUTTING_DOWN"),
]


@pytest.mark.parametrize(("exc", "code", "reason"), SERVER_SIDE_CASES,
                         ids=[type(c[0]).__name__ for c in SERVER_SIDE_CASES])
def test_server_side_errors_get_a_fixed_message_without_paths(exc, code, reason, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="stratalog.server.rpc.status"):
        grpc_status = status.to_status(exc)
    _, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode[code]
    assert (info.reason, info.domain) == (reason, "stratalog")
    assert "/srv" not in grpc_status.details and "orders-3" not in grpc_status.details
    incident = re.search(r"incident ([0-9a-f]{12})", grpc_status.details).group(1)
    # The operator finds the whole story, path included, under the same incident id.
    logged = [r for r in caplog.records if incident in r.getMessage()]
    assert len(logged) == 1
    assert SERVER_PATH in logged[0].getMessage() or logged[0].exc_info[1] is exc


def test_storage_errors_are_logged_with_their_traceback(caplog) -> None:
    exc = io_error(errno.EIO)
    with caplog.at_level(logging.ERROR, logger="stratalog.server.rpc.status"):
        status.to_status(exc)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info[1] is exc


def test_an_io_error_is_a_storage_error_with_its_errno_name() -> None:
    grpc_status = status.to_status(io_error(errno.EIO))
    _, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode.UNAVAILABLE
    assert info.reason == "STORAGE_ERROR"
    assert dict(info.metadata) == {"errno": "EIO"}
    assert "/srv" not in grpc_status.details


@pytest.mark.parametrize("explicit_cause", [True, False])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_full_disk_is_resource_exhausted(code, explicit_cause) -> None:
    grpc_status = status.to_status(io_error(code, explicit_cause=explicit_cause))
    _, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.reason == "STORAGE_FULL"
    assert dict(info.metadata) == {"errno": errno.errorcode[code]}
    assert "/srv" not in grpc_status.details


def test_a_full_disk_deep_in_the_chain_of_any_storage_error_is_found() -> None:
    try:
        try:
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as e:
                raise storage_errors.StorageIOError("flush failed") from e
        except storage_errors.StorageIOError as e:
            raise storage_errors.LogClosedError("closed after a failed flush") from e
    except storage_errors.LogClosedError as exc:
        assert status.classify(exc).reason == "STORAGE_FULL"


def test_a_bare_os_error_is_storage_full_when_the_disk_is_full_else_internal() -> None:
    full = status.to_status(OSError(errno.ENOSPC, "No space left on device", SERVER_PATH))
    assert full.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    denied = status.to_status(PermissionError(errno.EACCES, "Permission denied", SERVER_PATH))
    assert denied.code is grpc.StatusCode.INTERNAL
    assert "/srv" not in denied.details


def test_a_cyclic_cause_chain_terminates() -> None:
    a = storage_errors.StorageIOError("a")
    b = storage_errors.StorageIOError("b")
    a.__cause__, b.__cause__ = b, a
    assert status.classify(a).reason == "STORAGE_ERROR"


def test_unknown_leaves_fall_back_to_their_nearest_base() -> None:
    class CorruptCheckpointError(storage_errors.StorageError):
        pass

    class StaleOffsetError(storage_errors.OffsetOutOfRangeError):
        pass

    class TopicMarkedForDeletionError(storage_errors.UnknownTopicOrPartitionError):
        pass

    class BadHeaderError(record_errors.CorruptRecordError):
        pass

    assert status.classify(CorruptCheckpointError("x")).reason == "STORAGE_ERROR"
    stale = StaleOffsetError("x", log_start_offset=1, log_end_offset=2)
    assert status.classify(stale).reason == "OFFSET_OUT_OF_RANGE"
    _, info = decode(status.to_status(stale))
    assert dict(info.metadata) == {"log_start_offset": "1", "log_end_offset": "2"}
    assert status.classify(TopicMarkedForDeletionError("x")).code is grpc.StatusCode.NOT_FOUND
    assert status.classify(BadHeaderError("x")).reason == "CORRUPT_RECORD"


def _instance(cls: type[Exception]) -> Exception:
    # Bypasses __init__: leaves may require keyword arguments (path=...) this test cannot know,
    # and the mapping depends on the class alone.
    return cls.__new__(cls)


@pytest.mark.parametrize("name", storage_errors.__all__)
def test_every_storage_error_maps_to_a_contract_reason(name) -> None:
    # Iterates the module's __all__, so leaves other helpers add are covered as they land.
    mapping = status.classify(_instance(getattr(storage_errors, name)))
    assert mapping is not None
    assert mapping.code is status.REASON_CODES[mapping.reason]


@pytest.mark.parametrize("name", transaction_errors.__all__)
def test_every_transaction_error_maps_to_a_contract_reason(name) -> None:
    mapping = status.classify(_instance(getattr(transaction_errors, name)))
    assert mapping is not None
    assert mapping.code is status.REASON_CODES[mapping.reason]


def test_the_coordinators_own_trouble_is_a_storage_error_without_its_paths(caplog) -> None:
    for exc in (
        transaction_errors.CorruptTransactionLogError(
            "transaction state log /srv/data/__transaction_state-0, record at offset 4: "
            "unknown key version 32639"),
        transaction_errors.ProducerIdsExhaustedError("no producer id left below 2^63 - 1"),
    ):
        grpc_status = status.to_status(exc)
        _, info = decode(grpc_status)
        assert grpc_status.code is grpc.StatusCode.UNAVAILABLE
        assert info.reason == "STORAGE_ERROR"
        assert "/srv" not in grpc_status.details and "producer id" not in grpc_status.details


_RECORD_ERROR_NAMES = [
    name for name in record_errors.__all__
    if issubclass(getattr(record_errors, name), record_errors.RecordError)
]
_LAYOUT_ERROR_NAMES = [
    name for name in record_errors.__all__
    if issubclass(getattr(record_errors, name), record_errors.LayoutError)
]


@pytest.mark.parametrize("name", _RECORD_ERROR_NAMES)
def test_every_record_error_is_an_invalid_argument(name) -> None:
    mapping = status.classify(_instance(getattr(record_errors, name)))
    assert mapping.code is grpc.StatusCode.INVALID_ARGUMENT
    assert mapping.reason in {"CORRUPT_RECORD", "INVALID_RECORD", "RECORD_TOO_LARGE"}


@pytest.mark.parametrize("name", _LAYOUT_ERROR_NAMES)
def test_a_layout_error_is_never_blamed_on_the_client(name) -> None:
    # Names and metadata files of a log directory: the storage engine wraps these in its own
    # errors; one that escapes it unwrapped is a server bug, so INTERNAL (no message passed on).
    assert status.classify(_instance(getattr(record_errors, name))) is None
    assert status.to_status(_instance(getattr(record_errors, name))).code is (
        grpc.StatusCode.INTERNAL
    )


def test_unexpected_errors_are_internal_without_details_or_paths(caplog) -> None:
    exc = KeyError(f"{SERVER_PATH} vanished")
    with caplog.at_level(logging.ERROR, logger="stratalog.server.rpc.status"):
        grpc_status = status.to_status(exc)
    rich, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode.INTERNAL
    assert info is None and len(rich.details) == 0
    assert "/srv" not in grpc_status.details
    assert status.classify(exc) is None
    incident = re.search(r"incident ([0-9a-f]{12})", grpc_status.details).group(1)
    (record,) = caplog.records
    assert incident in record.getMessage()
    assert record.exc_info[1] is exc


def test_long_messages_are_cut() -> None:
    grpc_status = status.to_status(storage_errors.InvalidConfigError("v" * 10_000))
    # Cut to the characters, then to the UTF-8 bytes (the ellipsis is 3 of them).
    assert len(grpc_status.details.encode()) == status.MESSAGE_BYTES_MAX
    assert len(grpc_status.details) < status.MESSAGE_CHARS_MAX
    assert grpc_status.details.endswith("…")
    rich, _ = decode(grpc_status)
    assert rich.message == grpc_status.details


def test_long_names_are_cut_in_the_trailers_within_grpcs_metadata_limit() -> None:
    # A 256 KiB topic name of 3-byte characters: the message and every metadata value it
    # reaches are cut so that the trailers stay under gRPC's 8 KiB default.
    name = "\u20ac" * (256 * 1024)
    exc = NotAuthorizedError(f"not authorized: may not DESCRIBE Topic:{name}",
                             operation="DESCRIBE", resource=f"Topic:{name}", topic=name)
    grpc_status = status.to_status(exc)
    assert len(grpc_status.details.encode()) <= status.MESSAGE_BYTES_MAX
    trailers = sum(len(key) + len(value) for key, value in grpc_status.trailing_metadata)
    percent_encoded = 3 * len(grpc_status.details.encode())
    assert trailers + percent_encoded < 8 * 1024
    _, info = decode(grpc_status)
    assert all(len(value.encode()) <= status.METADATA_VALUE_BYTES_MAX
               for value in info.metadata.values())
    assert info.metadata["operation"] == "DESCRIBE"


def test_an_empty_message_becomes_the_class_name() -> None:
    grpc_status = status.to_status(storage_errors.TopicAlreadyExistsError())
    assert grpc_status.details == "TopicAlreadyExistsError"


def test_topic_partition_and_offset_attributes_become_metadata() -> None:
    exc = storage_errors.UnknownTopicOrPartitionError("orders-9")
    exc.topic, exc.partition, exc.offset = "orders", 9, 12
    exc.log_end_offset = True  # a flag, not an offset: left out
    _, info = decode(status.to_status(exc))
    assert dict(info.metadata) == {"topic": "orders", "partition": "9", "offset": "12"}


def test_invalid_request_defaults_to_invalid_request() -> None:
    grpc_status = status.invalid_request("exactly one of records and record_batches must be set")
    _, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_status.details == "exactly one of records and record_batches must be set"
    assert (info.reason, info.domain, dict(info.metadata)) == ("INVALID_REQUEST", "stratalog", {})


def test_invalid_request_takes_another_invalid_argument_reason_and_metadata() -> None:
    grpc_status = status.invalid_request(
        "max_bytes must be >= 0, got -1", reason="INVALID_REQUEST", metadata={"field": "max_bytes"}
    )
    _, info = decode(grpc_status)
    assert dict(info.metadata) == {"field": "max_bytes"}
    topic = status.invalid_request("empty topic name", reason="INVALID_TOPIC")
    assert decode(topic)[1].reason == "INVALID_TOPIC"


@pytest.mark.parametrize("reason", ["OFFSET_OUT_OF_RANGE", "STORAGE_ERROR", "NOT_A_REASON", ""])
def test_invalid_request_refuses_reasons_of_other_codes(reason) -> None:
    with pytest.raises(ValueError, match="INVALID_ARGUMENT"):
        status.invalid_request("x", reason=reason)


def test_reason_codes_cover_the_error_reason_enum_and_follow_the_contract() -> None:
    names = set(broker_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}
    assert set(status.REASON_CODES) == names
    assert set(status.ERROR_TABLE.values()) <= names
    # Spot checks against broker.proto's contract comment.
    assert status.REASON_CODES["AUTHENTICATION_FAILED"] is grpc.StatusCode.UNAUTHENTICATED
    assert status.REASON_CODES["NOT_AUTHORIZED"] is grpc.StatusCode.PERMISSION_DENIED
    assert status.REASON_CODES["SHUTTING_DOWN"] is grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    "exc", [asyncio.CancelledError(), KeyboardInterrupt(), grpc.aio.AbortError()],
    ids=["CancelledError", "KeyboardInterrupt", "AbortError"],
)
async def test_abort_with_error_reraises_what_is_not_an_error(exc) -> None:
    # The context is never touched for these, so none is needed.
    with pytest.raises(type(exc)) as raised:
        await status.abort_with_error(None, exc)
    assert raised.value is exc


# ------------------------------------------------------------------ issue 13, storage limits


def _error_info(rpc: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    info = error_details_pb2.ErrorInfo()
    assert rpc.details[0].Unpack(info)
    return info


def test_the_open_files_limit_is_named_in_the_answer() -> None:
    exc = storage_errors.ResourceLimitExceededError("cannot create topic t ...", limit="RLIMIT_NOFILE")
    rpc = status.to_rpc_status(exc)
    assert rpc.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    info = _error_info(rpc)
    assert info.reason == "RESOURCE_LIMIT_EXCEEDED" and info.metadata["limit"] == "RLIMIT_NOFILE"
    assert rpc.message == "cannot create topic t ..."


def test_an_offline_partition_is_named_without_a_path() -> None:
    exc = storage_errors.LogDirOfflineError("orders", 3)
    rpc = status.to_rpc_status(exc)
    assert rpc.code == grpc.StatusCode.UNAVAILABLE.value[0]
    info = _error_info(rpc)
    assert info.reason == "STORAGE_ERROR"
    assert dict(info.metadata) == {"topic": "orders", "partition": "3"}
    assert rpc.message.startswith("partition orders-3 is unavailable: its log directory is offline")


def test_preallocation_beyond_the_free_space_is_storage_full_with_the_numbers() -> None:
    exc = storage_errors.InsufficientSpaceError("creating topic t needs ...", need_bytes=10,
                                                free_bytes=3)
    rpc = status.to_rpc_status(exc)
    info = _error_info(rpc)
    assert (info.reason, info.metadata["need_bytes"], info.metadata["free_bytes"]) == (
        "STORAGE_FULL", "10", "3")
    assert rpc.message == "creating topic t needs ..."


def test_a_client_limit_is_resource_exhausted_with_the_setting_named() -> None:
    exc = ClientLimitExceededError(
        "Subscribe stream refused: User:alice already holds 256 ...",
        limit="waiting_rpcs_per_client_max",
    )
    grpc_status = status.to_status(exc)
    _, info = decode(grpc_status)
    assert grpc_status.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert grpc_status.details == str(exc)  # the client's own doing: said as it is
    assert info.reason == "RESOURCE_LIMIT_EXCEEDED"
    assert dict(info.metadata) == {"limit": "waiting_rpcs_per_client_max"}
