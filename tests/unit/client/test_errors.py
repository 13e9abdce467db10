"""client/errors.py against a live grpc.aio server: each domain error arrives as its own class.

A minimal Broker servicer on 127.0.0.1:0 raises domain errors chosen by the request's topic and
reports them through server/rpc/status.py's ``abort_with_error``, exactly as the real servicer will.
The client calls through the generated stub (async and sync channels) and maps the RpcError back
with ``from_rpc_error``. Nothing is mocked: statuses cross a real HTTP/2 connection.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import socket
from collections.abc import AsyncIterator, Callable

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2, status_pb2

from stratalog.client import errors
from stratalog.records import errors as record_errors
from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.groups import group_errors
from stratalog.server.rpc import status
from stratalog.server.storage import errors as storage_errors
from stratalog.v1 import broker_pb2, broker_pb2_grpc

DETAILS_KEY = "grpc-status-details-bin"


def _disk_full() -> storage_errors.StorageIOError:
    try:
        raise OSError(errno.ENOSPC, "No space left on device", "/srv/data/t-0/0.log")
    except OSError as e:
        error = storage_errors.StorageIOError("append to /srv/data/t-0/0.log failed")
        error.__cause__ = e
        return error


def _rich(code: grpc.StatusCode, message: str, reason: str, domain: str = "stratalog",
          **metadata: str) -> status_pb2.Status:
    rich = status_pb2.Status(code=code.value[0], message=message)
    info = error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata)
    rich.details.add().Pack(info)
    return rich


# topic -> the domain error the servicer raises for it.
DOMAIN_ERRORS: dict[str, Callable[[], Exception]] = {
    "unknown": lambda: storage_errors.UnknownTopicOrPartitionError("no partition 9 of orders"),
    "range": lambda: storage_errors.OffsetOutOfRangeError(
        "offset 7 below log start 100", log_start_offset=100, log_end_offset=250
    ),
    "corrupt": lambda: record_errors.CorruptRecordError("CRC mismatch at position 61"),
    "invalid": lambda: record_errors.InvalidRecordError("magic 1 at position 16"),
    "codec": lambda: record_errors.UnsupportedCompressionError("codec id 6"),
    "large": lambda: record_errors.RecordTooLargeError("2000000 bytes over 1048588"),
    "segment": lambda: storage_errors.RecordBatchTooLargeError("over segment.bytes"),
    "topic": lambda: storage_errors.InvalidTopicError("'..' is not a topic name"),
    "exists": lambda: storage_errors.TopicAlreadyExistsError("orders exists"),
    "timestamp": lambda: storage_errors.InvalidTimestampError("timestamp 5 too old"),
    "config": lambda: storage_errors.InvalidConfigError("unknown config segment.byte"),
    "full": _disk_full,
    "eio": lambda: storage_errors.CorruptIndexError("/srv/data/t-0/0.index: 13 bytes"),
    "closed": lambda: storage_errors.LogClosedError("log /srv/data/t-0 is closed"),
    "bug": lambda: ZeroDivisionError("division by zero in /srv/app.py"),
    # Replication (issue 17): the server's own exceptions, as its leader checks raise them.
    "not-leader": lambda: cluster_errors.NotLeaderOrFollowerError("t", 0, 2, 7, "db2:50051"),
    "no-leader": lambda: cluster_errors.LeaderNotAvailableError("t", 1, "no leader"),
    "few-replicas": lambda: cluster_errors.NotEnoughReplicasError("t", 0, 1, 2),
    "after-append": lambda: cluster_errors.NotEnoughReplicasAfterAppendError("t", 0, "shrank"),
    "fenced-epoch": lambda: cluster_errors.FencedLeaderEpochError("t", 0, "epoch 3 < 4"),
    "unknown-epoch": lambda: cluster_errors.UnknownLeaderEpochError("t", 0, "epoch 5 > 4"),
    "factor": lambda: cluster_errors.InvalidReplicationFactorError("replication factor 4 > 3"),
    "replication-timeout": lambda: cluster_errors.ReplicationTimeoutError("t", 0, "30000 ms"),
    "etcd": lambda: cluster_errors.CoordinationUnavailableError("etcd did not answer"),
}

# topic -> (class, code, reason, retriable, metadata, message or None when fixed by the server)
EXPECTED = {
    "unknown": (errors.UnknownTopicOrPartitionError, "NOT_FOUND", "UNKNOWN_TOPIC_OR_PARTITION",
                False, {}, "no partition 9 of orders"),
    "range": (errors.OffsetOutOfRangeError, "OUT_OF_RANGE", "OFFSET_OUT_OF_RANGE", False,
              {"log_start_offset": "100", "log_end_offset": "250"}, "offset 7 below log start 100"),
    "corrupt": (errors.CorruptRecordError, "INVALID_ARGUMENT", "CORRUPT_RECORD", False, {},
                "CRC mismatch at position 61"),
    "invalid": (errors.InvalidRecordError, "INVALID_ARGUMENT", "INVALID_RECORD", False, {},
                "magic 1 at position 16"),
    "codec": (errors.InvalidRecordError, "INVALID_ARGUMENT", "INVALID_RECORD", False, {},
              "codec id 6"),
    "large": (errors.RecordTooLargeError, "INVALID_ARGUMENT", "RECORD_TOO_LARGE", False, {},
              "2000000 bytes over 1048588"),
    "segment": (errors.RecordTooLargeError, "INVALID_ARGUMENT", "RECORD_TOO_LARGE", False, {},
                "over segment.bytes"),
    "topic": (errors.InvalidTopicError, "INVALID_ARGUMENT", "INVALID_TOPIC", False, {},
              "'..' is not a topic name"),
    "exists": (errors.TopicAlreadyExistsError, "ALREADY_EXISTS", "TOPIC_ALREADY_EXISTS", False,
               {}, "orders exists"),
    "timestamp": (errors.InvalidTimestampError, "INVALID_ARGUMENT", "INVALID_TIMESTAMP", False,
                  {}, "timestamp 5 too old"),
    "config": (errors.InvalidConfigError, "INVALID_ARGUMENT", "INVALID_CONFIG", False, {},
               "unknown config segment.byte"),
    "full": (errors.StorageFullError, "RESOURCE_EXHAUSTED", "STORAGE_FULL", False,
             {"errno": "ENOSPC"}, None),
    "eio": (errors.StorageError, "UNAVAILABLE", "STORAGE_ERROR", True, {}, None),
    "closed": (errors.ShuttingDownError, "UNAVAILABLE", "SHUTTING_DOWN", True, {}, None),
    "bug": (errors.StratalogError, "INTERNAL", None, False, {}, None),
    "not-leader": (errors.NotLeaderOrFollowerError, "UNAVAILABLE", "NOT_LEADER_OR_FOLLOWER",
                   True, {"topic": "t", "partition": "0", "leader_id": "2", "leader_epoch": "7",
                          "leader_address": "db2:50051"},
                   "t-0: this server is not the partition's leader; the leader is node 2 at "
                   "db2:50051 (leader epoch 7): refresh the metadata and retry there"),
    "no-leader": (errors.LeaderNotAvailableError, "UNAVAILABLE", "LEADER_NOT_AVAILABLE", True,
                  {"topic": "t", "partition": "1"}, "t-1: no leader"),
    "few-replicas": (errors.NotEnoughReplicasError, "UNAVAILABLE", "NOT_ENOUGH_REPLICAS", True,
                     {"topic": "t", "partition": "0"},
                     "t-0: the in-sync replica set has 1 member(s), below "
                     "min.insync.replicas=2; nothing was written"),
    "after-append": (errors.NotEnoughReplicasAfterAppendError, "UNAVAILABLE",
                     "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, {"topic": "t", "partition": "0"},
                     "t-0: shrank"),
    "fenced-epoch": (errors.FencedLeaderEpochError, "FAILED_PRECONDITION", "FENCED_LEADER_EPOCH",
                     False, {"topic": "t", "partition": "0"}, "t-0: epoch 3 < 4"),
    "unknown-epoch": (errors.UnknownLeaderEpochError, "UNAVAILABLE", "UNKNOWN_LEADER_EPOCH",
                      True, {"topic": "t", "partition": "0"}, "t-0: epoch 5 > 4"),
    "factor": (errors.InvalidReplicationFactorError, "INVALID_ARGUMENT",
               "INVALID_REPLICATION_FACTOR", False, {}, "replication factor 4 > 3"),
    "replication-timeout": (errors.ReplicationTimeoutError, "DEADLINE_EXCEEDED",
                            "REQUEST_TIMED_OUT", True, {"topic": "t", "partition": "0"},
                            "t-0: 30000 ms"),
    "etcd": (errors.CoordinationUnavailableError, "UNAVAILABLE", "COORDINATION_UNAVAILABLE",
             True, {}, "etcd did not answer"),
}


# Statuses no current server sends, but a newer server, a proxy or a bug could:
# topic -> (code, grpc-message, grpc-status-details-bin trailer).
HANDCRAFTED: dict[str, Callable[[], tuple[grpc.StatusCode, str, bytes]]] = {
    "newer": lambda: (
        grpc.StatusCode.UNAVAILABLE, "rebalancing",
        _rich(grpc.StatusCode.UNAVAILABLE, "rebalancing", "PARTITION_MOVING",
              target="b2").SerializeToString()),
    "foreign": lambda: (
        grpc.StatusCode.NOT_FOUND, "not here",
        _rich(grpc.StatusCode.NOT_FOUND, "not here", "UNKNOWN_TOPIC_OR_PARTITION",
              domain="example.com").SerializeToString()),
    "rewritten": lambda: (
        grpc.StatusCode.OUT_OF_RANGE, "message rewritten by a proxy",
        _rich(grpc.StatusCode.OUT_OF_RANGE, "original", "OFFSET_OUT_OF_RANGE",
              log_start_offset="3", log_end_offset="x").SerializeToString()),
    "mismatched": lambda: (
        grpc.StatusCode.UNAVAILABLE, "m",
        _rich(grpc.StatusCode.NOT_FOUND, "m", "UNKNOWN_TOPIC_OR_PARTITION").SerializeToString()),
    "garbage": lambda: (grpc.StatusCode.UNAVAILABLE, "g", b"\xff\xff\xff not a proto"),
    # A RESOURCE_EXHAUSTED without ErrorInfo that is none of gRPC's own (a proxy's quota, say).
    "quota": lambda: (grpc.StatusCode.RESOURCE_EXHAUSTED, "quota exceeded by a proxy", b""),
}


class FailingBroker(broker_pb2_grpc.BrokerServicer):
    """Every RPC fails in a way chosen by the request; the servicer pattern status.py expects."""

    async def Produce(self, request, context):
        try:
            if request.topic == "shape":
                await context.abort_with_status(status.invalid_request(
                    "exactly one of records and record_batches must be set",
                    metadata={"field": "records"},
                ))
            if request.topic == "already-aborted":
                # An abort inside the try: abort_with_error must pass it through unchanged.
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no")
            if request.topic == "slow":
                await asyncio.sleep(60)
            if request.topic == "uncaught":
                raise RuntimeError("escaped the servicer")
            if request.topic == "cancelled":
                # What a stopping server's calls can end with (the real server's, in
                # tests/integration/test_client_exactly_once.py's restarts).
                await context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")
            if request.topic in HANDCRAFTED:
                code, details, trailer = HANDCRAFTED[request.topic]()
                await context.abort(code, details, ((DETAILS_KEY, trailer),) if trailer else ())
            raise DOMAIN_ERRORS[request.topic]()
        except (RuntimeError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await status.abort_with_error(context, exc)

    async def Subscribe(self, request, context) -> AsyncIterator[broker_pb2.FetchResponse]:
        # One message, then the log start moves past the subscriber: an error mid-stream.
        yield broker_pb2.FetchResponse(topic=request.topic, next_offset=1)
        try:
            raise storage_errors.OffsetOutOfRangeError(
                "offset 1 below log start 40", log_start_offset=40, log_end_offset=41
            )
        except Exception as exc:
            await status.abort_with_error(context, exc)


@pytest.fixture
async def target() -> AsyncIterator[str]:
    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(FailingBroker(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
async def stub(target: str) -> AsyncIterator[broker_pb2_grpc.BrokerStub]:
    async with grpc.aio.insecure_channel(target) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


async def _produce_error(stub, topic: str, **call_options) -> errors.StratalogError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.Produce(broker_pb2.ProduceRequest(topic=topic), **call_options)
    return errors.from_rpc_error(raised.value)


@pytest.mark.parametrize("topic", list(EXPECTED))
async def test_each_domain_error_round_trips_to_its_class(stub, topic) -> None:
    cls, code, reason, retriable, metadata, message = EXPECTED[topic]
    error = await _produce_error(stub, topic)
    assert type(error) is cls
    assert error.code is grpc.StatusCode[code]
    assert error.reason == reason
    assert error.retriable is retriable
    assert error.metadata == metadata
    if message is not None:
        assert error.message == message
    else:
        assert "incident" in error.message and "/srv" not in error.message
    assert isinstance(error, errors.StratalogError)


async def test_offset_out_of_range_exposes_the_bounds_as_ints(stub) -> None:
    error = await _produce_error(stub, "range")
    assert (error.log_start_offset, error.log_end_offset) == (100, 250)
    assert str(error) == "OFFSET_OUT_OF_RANGE: offset 7 below log start 100"


async def test_invalid_request_round_trips_with_its_metadata(stub) -> None:
    error = await _produce_error(stub, "shape")
    assert type(error) is errors.InvalidRequestError
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.metadata == {"field": "records"}
    assert not error.retriable


async def test_an_abort_inside_the_try_is_not_turned_into_internal(stub) -> None:
    error = await _produce_error(stub, "already-aborted")
    # No ErrorInfo: mapped by code alone.
    assert type(error) is errors.NotAuthorizedError
    assert error.reason == "NOT_AUTHORIZED"
    assert error.message == "no"


async def test_an_error_mid_stream_round_trips(stub) -> None:
    call = stub.Subscribe(broker_pb2.SubscribeRequest(topic="t", offset=0))
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for response in call:
            received.append(response.next_offset)
    assert received == [1]
    error = errors.from_rpc_error(raised.value)
    assert type(error) is errors.OffsetOutOfRangeError
    assert (error.log_start_offset, error.log_end_offset) == (40, 41)


async def test_a_sync_channel_rpc_error_maps_the_same(target) -> None:
    def call() -> errors.StratalogError:
        with grpc.insecure_channel(target) as channel:
            try:
                broker_pb2_grpc.BrokerStub(channel).Produce(broker_pb2.ProduceRequest(topic="range"))
            except grpc.RpcError as err:
                return errors.from_rpc_error(err)
        raise AssertionError("the call succeeded")

    # The server runs on this loop; the blocking client waits in a thread.
    error = await asyncio.to_thread(call)
    assert type(error) is errors.OffsetOutOfRangeError
    assert (error.log_start_offset, error.log_end_offset) == (100, 250)


async def test_an_exception_escaping_the_servicer_is_unknown_and_not_retriable(stub) -> None:
    error = await _produce_error(stub, "uncaught")
    assert type(error) is errors.StratalogError
    assert error.code is grpc.StatusCode.UNKNOWN
    assert (error.reason, error.retriable) == (None, False)


async def test_a_reason_from_a_newer_server_keeps_reason_and_retries_by_code(stub) -> None:
    error = await _produce_error(stub, "newer")
    assert type(error) is errors.StratalogError
    assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "PARTITION_MOVING")
    assert error.retriable
    assert error.metadata == {"target": "b2"}


async def test_error_info_of_another_domain_is_ignored(stub) -> None:
    error = await _produce_error(stub, "foreign")
    assert type(error) is errors.StratalogError
    assert (error.code, error.reason, error.metadata) == (grpc.StatusCode.NOT_FOUND, None, {})


async def test_a_rewritten_message_keeps_the_reason_and_a_bad_bound_is_none(stub) -> None:
    error = await _produce_error(stub, "rewritten")
    assert type(error) is errors.OffsetOutOfRangeError
    assert error.message == "message rewritten by a proxy"
    assert (error.log_start_offset, error.log_end_offset) == (3, None)


@pytest.mark.parametrize("topic", ["mismatched", "garbage"])
async def test_inconsistent_or_garbled_details_map_by_code_alone(stub, topic) -> None:
    error = await _produce_error(stub, topic)
    assert type(error) is errors.BrokerUnavailableError
    assert (error.reason, error.retriable) == (None, True)


async def test_a_passed_deadline_is_a_retriable_timeout(stub) -> None:
    error = await _produce_error(stub, "slow", timeout=0.2)
    assert type(error) is errors.RequestTimeoutError
    assert error.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert (error.reason, error.retriable) == (None, True)


async def test_no_server_listening_is_a_retriable_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port now; the call fails fast (no wait_for_ready).
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        error = await _produce_error(broker_pb2_grpc.BrokerStub(channel), "x", timeout=30)
    assert type(error) is errors.BrokerUnavailableError
    assert error.code is grpc.StatusCode.UNAVAILABLE
    assert (error.reason, error.retriable) == (None, True)
    assert error.unsent  # gRPC found no connection: the request never left the client


async def test_a_call_after_the_server_went_fails_unsent_on_a_channel_once_ready() -> None:
    """The channel was connected; its server stopped; gRPC's next call finds no connection to
    send on (the client's routing may have seen READY just before) and says so."""
    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(FailingBroker(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await asyncio.wait_for(channel.channel_ready(), 10)
        await server.stop(None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while channel.get_state() is grpc.ChannelConnectivity.READY:
            assert loop.time() < deadline, "the channel never noticed its server went"
            await asyncio.sleep(0.01)
        error = await _produce_error(broker_pb2_grpc.BrokerStub(channel), "x", timeout=30)
    assert type(error) is errors.BrokerUnavailableError
    assert error.unsent, error.message


async def test_a_request_the_server_was_handling_when_it_stopped_is_not_unsent() -> None:
    """The call reached the servicer, then the server went: the outcome is unknown, so the
    error must not claim the request was never sent."""
    reached = asyncio.Event()

    class Stalling(broker_pb2_grpc.BrokerServicer):
        async def Produce(self, request, context):
            reached.set()
            await asyncio.sleep(60)

    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(Stalling(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = asyncio.ensure_future(_produce_error(broker_pb2_grpc.BrokerStub(channel), "x",
                                                    timeout=30))
        await asyncio.wait_for(reached.wait(), 10)
        await server.stop(None)
        error = await call
    assert error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert not getattr(error, "unsent", False), error


@pytest.mark.parametrize("topic", ["mismatched", "garbage"])
async def test_a_servers_own_unavailable_is_not_unsent(stub, topic) -> None:
    error = await _produce_error(stub, topic)
    assert type(error) is errors.BrokerUnavailableError
    assert not error.unsent


async def test_not_leader_hint_reads_back_from_the_server_status(stub) -> None:
    error = await _produce_error(stub, "not-leader")
    assert isinstance(error, errors.NotLeaderOrFollowerError)
    assert (error.leader_id, error.leader_epoch, error.leader_address) == (2, 7, "db2:50051")


def test_not_leader_without_a_hint_has_none() -> None:
    error = errors.NotLeaderOrFollowerError(
        "x", metadata={"leader_id": "-1", "leader_epoch": "-1", "leader_address": ""}
    )
    assert (error.leader_id, error.leader_epoch, error.leader_address) == (None, None, None)


def test_the_table_covers_every_error_reason_once() -> None:
    names = set(broker_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}
    assert set(errors.ERRORS_BY_REASON) == names
    for reason, cls in errors.ERRORS_BY_REASON.items():
        assert cls.reason == reason
        assert issubclass(cls, errors.StratalogError)


# The consumer-group reasons (issue 27) and the status code broker.proto's comment gives each.
GROUP_REASON_CODES = {
    "COORDINATOR_NOT_AVAILABLE": "UNAVAILABLE",
    "NOT_COORDINATOR": "UNAVAILABLE",
    "UNKNOWN_MEMBER_ID": "FAILED_PRECONDITION",
    "ILLEGAL_GENERATION": "FAILED_PRECONDITION",
    "REBALANCE_IN_PROGRESS": "ABORTED",
    "FENCED_INSTANCE_ID": "FAILED_PRECONDITION",
    "MEMBER_ID_REQUIRED": "FAILED_PRECONDITION",
    "GROUP_MAX_SIZE_REACHED": "RESOURCE_EXHAUSTED",
    "INCONSISTENT_GROUP_PROTOCOL": "FAILED_PRECONDITION",
    "INVALID_GROUP_ID": "INVALID_ARGUMENT",
    "INVALID_SESSION_TIMEOUT": "INVALID_ARGUMENT",
    "NON_EMPTY_GROUP": "FAILED_PRECONDITION",
    "GROUP_ID_NOT_FOUND": "NOT_FOUND",
    "UNSTABLE_OFFSET_COMMIT": "UNAVAILABLE",
    "OFFSET_METADATA_TOO_LARGE": "INVALID_ARGUMENT",
    "GROUP_SUBSCRIBED_TO_TOPIC": "FAILED_PRECONDITION",
}


def test_client_and_server_agree_on_codes_and_domain() -> None:
    assert errors.DOMAIN == status.DOMAIN
    assert set(errors.ERRORS_BY_REASON) == set(status.REASON_CODES)
    for reason, cls in errors.ERRORS_BY_REASON.items():
        assert cls.code is status.REASON_CODES[reason], reason


@pytest.mark.parametrize("reason", sorted(GROUP_REASON_CODES))
def test_group_reasons_have_the_protos_codes(reason) -> None:
    cls = errors.ERRORS_BY_REASON[reason]
    assert cls.code is grpc.StatusCode[GROUP_REASON_CODES[reason]]
    assert broker_pb2.ErrorReason.Value(reason) in range(38, 54)


def test_member_id_required_carries_the_member_id() -> None:
    error = errors.from_session_error(broker_pb2.SessionError(
        code=grpc.StatusCode.FAILED_PRECONDITION.value[0],
        reason=broker_pb2.MEMBER_ID_REQUIRED, message="join again with your member id",
        metadata={"member_id": "c-1-4f1e"},
    ))
    assert type(error) is errors.MemberIdRequiredError
    assert error.member_id == "c-1-4f1e" and not error.retriable
    assert errors.MemberIdRequiredError("no id").member_id is None


def test_client_raised_group_errors_keep_what_they_carry() -> None:
    cause = errors.IllegalGenerationError("generation 3 is not 4")
    failed = errors.CommitFailedError("commit of generation 3 refused", cause=cause)
    assert failed.cause is cause and not failed.retriable and failed.reason is None
    assert failed.code is grpc.StatusCode.FAILED_PRECONDITION
    missing = errors.NoOffsetForPartitionError("none committed", partitions=[("t", 0)])
    assert missing.partitions == (("t", 0),) and not missing.retriable


def test_retriable_flags_are_the_documented_ones() -> None:
    retriable = {reason for reason, cls in errors.ERRORS_BY_REASON.items() if cls.retriable}
    assert retriable == {
        "SHUTTING_DOWN", "STORAGE_ERROR", "CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS",
        "RESOURCE_LIMIT_EXCEEDED",
        # Replication (issue 17): ask the leader again, or wait for the followers.
        "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "UNKNOWN_LEADER_EPOCH",
        "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT",
        "COORDINATION_UNAVAILABLE",
        # Consumer groups (issue 27), as Kafka's: find the coordinator again, retry, or rejoin.
        "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "REBALANCE_IN_PROGRESS",
        "UNSTABLE_OFFSET_COMMIT",
    }
    assert errors.BrokerUnavailableError.retriable and errors.RequestTimeoutError.retriable


def test_errors_can_be_built_directly_and_keep_instance_overrides() -> None:
    error = errors.ShuttingDownError("bye", retriable=False, metadata={"k": "v"})
    assert (error.retriable, error.metadata, error.code) == (False, {"k": "v"},
                                                             grpc.StatusCode.UNAVAILABLE)
    assert errors.ShuttingDownError.retriable  # the class default is untouched
    assert "ShuttingDownError('bye'" in repr(error)
    assert str(errors.StratalogError("", code=grpc.StatusCode.INTERNAL)) == "INTERNAL"


def test_a_bare_rpc_error_without_call_methods_maps_to_unknown() -> None:
    error = errors.from_rpc_error(grpc.RpcError())
    assert type(error) is errors.StratalogError
    assert (error.code, error.reason, error.message) == (grpc.StatusCode.UNKNOWN, None, "")



async def test_grpcs_own_resource_exhausted_is_told_apart_by_its_details() -> None:
    # gRPC answers RESOURCE_EXHAUSTED itself, without ErrorInfo, for a message over a limit
    # (not retriable: the same request fails again) and for a server at its concurrent-RPC
    # limit (retriable: it frees as calls end). A real server and channel produce each.
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", 1000)], maximum_concurrent_rpcs=2
    )
    broker_pb2_grpc.add_BrokerServicer_to_server(FailingBroker(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            request = broker_pb2.ProduceRequest(topic="x", record_batches=bytes(5000))
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Produce(request, timeout=30)
            too_large = errors.from_rpc_error(raised.value)
            assert type(too_large) is errors.MessageTooLargeError
            assert "larger than max" in too_large.message
            assert (too_large.code, too_large.reason, too_large.retriable) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED, None, False)
            # Three slow calls for two slots: gRPC refuses one at once (whichever reaches the
            # server last); the two others hold their slots.
            slow = [asyncio.ensure_future(_produce_error(stub, "slow", timeout=30))
                    for _ in range(3)]
            done, _ = await asyncio.wait(slow, return_when=asyncio.FIRST_COMPLETED, timeout=30)
            assert len(done) == 1
            error = done.pop().result()
            assert type(error) is errors.ConcurrentRpcLimitError, error
            assert isinstance(error, errors.ResourceLimitExceededError)
            assert (error.code, error.reason, error.retriable) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED, None, True)
            assert error.limit == "max_concurrent_rpcs"
            for call in slow:
                call.cancel()
    finally:
        await server.stop(None)


async def test_a_client_side_message_limit_is_not_retriable(target) -> None:
    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_send_message_length", 100)]
    ) as channel:
        request = broker_pb2.ProduceRequest(topic="x", record_batches=bytes(500))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await broker_pb2_grpc.BrokerStub(channel).Produce(request, timeout=30)
    error = errors.from_rpc_error(raised.value)
    assert type(error) is errors.MessageTooLargeError and not error.retriable


async def test_another_resource_exhausted_without_error_info_is_not_retried(stub) -> None:
    error = await _produce_error(stub, "quota")
    assert type(error) is errors.StratalogError
    assert (error.code, error.reason, error.retriable) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED, None, False)


async def test_a_call_the_server_cancels_is_retriable(stub) -> None:
    # A stopping server cuts the calls still running short; the client may see CANCELLED. The
    # outcome is unknown, as after a lost connection, and a restarted server answers the retry.
    error = await _produce_error(stub, "cancelled", timeout=30)
    assert type(error) is errors.StratalogError
    assert (error.code, error.reason, error.retriable) == (grpc.StatusCode.CANCELLED, None, True)


def test_every_group_coordinator_error_has_its_client_class() -> None:
    """server/groups' errors (by Kafka's name) come back as the client class of that reason,
    retriable alike; REBALANCE_IN_PROGRESS is retriable for the client (join again), as
    broker.proto says, where the sans-IO coordinator marks the request itself not retriable."""
    seen = set()
    for _, cls in inspect.getmembers(group_errors, inspect.isclass):
        if not issubclass(cls, group_errors.GroupError) or cls.kafka_name == "UNKNOWN_SERVER_ERROR":
            continue
        client_cls = errors.ERRORS_BY_REASON[cls.kafka_name]
        if cls.kafka_name != "REBALANCE_IN_PROGRESS":
            assert client_cls.retriable is cls.retriable, cls.kafka_name
        seen.add(cls.kafka_name)
    assert "MEMBER_ID_REQUIRED" in seen and len(seen) >= 15
