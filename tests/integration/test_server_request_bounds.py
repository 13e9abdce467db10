"""Request bounds against a real server process (issue 13, part 2): the probe's attacks of
defects 2, 5 and 7, each reproduced as the probe sent it.

* Defect 2: a 1 MiB Produce of 498 zstd batches, each one record of 63 MiB of zeros, froze
  every RPC for 25 s. It is refused with RECORD_TOO_LARGE naming
  ``produce_decompressed_bytes_max``, and while one such request is being decompressed other
  clients are answered.
* Defect 5: CRC-valid batches whose record timestamp (base + delta) leaves int64 were accepted
  or answered INTERNAL; they are refused with INVALID_TIMESTAMP, and a log that holds one
  already (written before, here crafted on disk) reads back in every format.
* Defect 7: DescribeTopic named the server's log directory paths; gRPC's own
  RESOURCE_EXHAUSTED answers (no ErrorInfo) reach the client as errors that say whether to
  retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from stratalog.client import Client
from stratalog.client.errors import (
    ConcurrentRpcLimitError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordTooLargeError,
    ResourceLimitExceededError,
    from_rpc_error,
)
from stratalog.records import iter_batches
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, ServerProcess

T0 = 1_700_000_000_000
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def _create(stub: broker_pb2_grpc.BrokerStub, topic: str, partitions: int = 1) -> pb.TopicDescription:
    return stub.CreateTopic(
        pb.CreateTopicRequest(name=topic, partitions=partitions), timeout=CALL_TIMEOUT_S
    ).topic


def _log_end(stub: broker_pb2_grpc.BrokerStub, topic: str) -> int:
    return stub.ListOffsets(
        pb.ListOffsetsRequest(topic=topic, timestamp=-1), timeout=CALL_TIMEOUT_S
    ).offset


# ---------------------------------------------------------------- defect 2: the zstd bomb


def test_the_probes_bomb_is_refused_naming_the_bound(stub, rpc_error, bomb_request) -> None:
    _create(stub, "bomb")
    error = rpc_error(stub.Produce, bomb_request)
    assert type(error) is RecordTooLargeError, error
    assert error.reason == "RECORD_TOO_LARGE"
    assert "produce_decompressed_bytes_max" in error.message
    assert str(64 << 20) in error.message  # the bound, in bytes
    assert "batch 1 at position" in error.message  # the first batch fit; the second did not
    assert _log_end(stub, "bomb") == 0  # nothing was appended
    # ... and the server goes on serving.
    ok = stub.Produce(pb.ProduceRequest(topic="bomb", records=[pb.Record(value=b"v")]),
                      timeout=CALL_TIMEOUT_S)
    assert (ok.base_offset, _log_end(stub, "bomb")) == (0, 1)


def test_other_clients_are_answered_while_a_bomb_is_decompressed(
    start_server: Callable[..., ServerProcess], tmp_path: Path, bomb_request
) -> None:
    # A bound high enough that the bomb takes a while (64 batches, 4 GiB of zeros) before it is
    # refused: what matters is that the event loop answers others meanwhile. Before issue 13 it
    # decompressed the request on the loop, and no RPC was answered until it was done.
    server = start_server(tmp_path / "data", "--produce-decompressed-bytes-max", str(4 << 30))
    with grpc.insecure_channel(server.target) as bomber_channel, \
            grpc.insecure_channel(server.target) as reader_channel:
        bomber = broker_pb2_grpc.BrokerStub(bomber_channel)
        reader = broker_pb2_grpc.BrokerStub(reader_channel)
        _create(reader, "bomb")
        reader.Produce(pb.ProduceRequest(topic="bomb", records=[pb.Record(value=b"v")]),
                       timeout=CALL_TIMEOUT_S)
        bomb = bomber.Produce.future(bomb_request, timeout=120)
        # Let the bomb reach the servicer with no read served in the last 100 ms, the case in
        # which the old placement validated a 1 MiB request on the loop. Nothing is timed.
        with contextlib.suppress(grpc.FutureTimeoutError):
            bomb.exception(timeout=0.3)
        answered_in_flight = 0
        while not bomb.done():
            offsets = reader.ListOffsets(pb.ListOffsetsRequest(topic="bomb", timestamp=-1),
                                         timeout=CALL_TIMEOUT_S)
            fetched = reader.FetchByOffset(pb.FetchByOffsetRequest(topic="bomb", offset=0),
                                           timeout=CALL_TIMEOUT_S)
            assert (offsets.offset, [r.value for r in fetched.records]) == (1, [b"v"])
            if not bomb.done():
                answered_in_flight += 1
        with pytest.raises(grpc.RpcError) as raised:
            bomb.result()
        error = from_rpc_error(raised.value)
    assert type(error) is RecordTooLargeError, error
    assert "produce_decompressed_bytes_max" in error.message and str(4 << 30) in error.message
    # Both reads completed, again and again, while the bomb was still being processed.
    assert answered_in_flight >= 3, answered_in_flight


# ---------------------------------------------------------------- defect 5: timestamps


@pytest.mark.parametrize(
    ("base", "delta", "timestamp"),
    [(INT64_MIN + 1, -5, INT64_MIN - 4), (INT64_MAX - 1, 5, INT64_MAX + 4)],
)
def test_the_probes_timestamp_overflows_are_invalid_timestamps(
    stub, rpc_error, batch_with_timestamp_delta, base: int, delta: int, timestamp: int
) -> None:
    topic = f"ts-overflow-{'low' if delta < 0 else 'high'}"
    _create(stub, topic)
    error = rpc_error(stub.Produce, pb.ProduceRequest(
        topic=topic, record_batches=batch_with_timestamp_delta(base, delta)))
    assert type(error) is InvalidTimestampError, error
    assert "offset delta 0" in error.message and f"has timestamp {timestamp}" in error.message
    assert _log_end(stub, topic) == 0
    # Nothing poisons the partition: reads in the records format still answer.
    stub.Produce(pb.ProduceRequest(topic=topic, records=[pb.Record(value=b"ok")]),
                 timeout=CALL_TIMEOUT_S)
    fetched = stub.FetchByOffset(pb.FetchByOffsetRequest(topic=topic, offset=0),
                                 timeout=CALL_TIMEOUT_S)
    assert [r.value for r in fetched.records] == [b"ok"]


def test_a_log_holding_an_overflowing_timestamp_reads_back_in_every_format(
    start_server: Callable[..., ServerProcess], tmp_path: Path, batch_with_timestamp_delta
) -> None:
    # A log written before validation refused such records: the batch is put on disk behind
    # the server's back, and the server restarted on it (after a crash: its recovery reads it).
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        _create(stub, "poisoned")
        stub.Produce(pb.ProduceRequest(topic="poisoned", records=[
            pb.Record(value=b"good", timestamp=T0)]), timeout=CALL_TIMEOUT_S)
    server.kill()
    bad = bytearray(batch_with_timestamp_delta(INT64_MIN + 1, -5))
    struct.pack_into(">q", bad, 0, 1)  # base offset 1, after the good record
    with (data_dir / "poisoned-0" / f"{0:020d}.log").open("ab") as segment:
        segment.write(bad)
    wrapped = INT64_MAX - 3  # -2^63 - 4 in Java's long arithmetic, as a Kafka consumer reads it

    server = start_server(data_dir)
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        assert _log_end(stub, "poisoned") == 2
        for fetch in (
            lambda fmt: stub.FetchByOffset(pb.FetchByOffsetRequest(
                topic="poisoned", offset=0, format=fmt), timeout=CALL_TIMEOUT_S),
            lambda fmt: stub.FetchByTimestamp(pb.FetchByTimestampRequest(
                topic="poisoned", timestamp=0, format=fmt), timeout=CALL_TIMEOUT_S),
            lambda fmt: next(stub.Subscribe(pb.SubscribeRequest(
                topic="poisoned", offset=0, format=fmt), timeout=CALL_TIMEOUT_S)),
        ):
            decoded = fetch(pb.FETCH_FORMAT_RECORDS)
            assert [(r.offset, r.timestamp, r.value) for r in decoded.records] == [
                (0, T0, b"good"), (1, wrapped, b"v")]
            raw = fetch(pb.FETCH_FORMAT_RECORD_BATCHES)
            records = [r for _, batch in iter_batches(raw.record_batches) for r in batch]
            # The raw batches are the stored bytes: the client's reader computes the sum.
            assert [(r.offset, r.timestamp) for r in records] == [(0, T0), (1, INT64_MIN - 4)]
        stub.ListOffsets(pb.ListOffsetsRequest(topic="poisoned", timestamp=-3),
                         timeout=CALL_TIMEOUT_S)
        # New records still go in; the same batch sent again is refused.
        with pytest.raises(grpc.RpcError) as raised:
            stub.Produce(pb.ProduceRequest(topic="poisoned", record_batches=bytes(
                batch_with_timestamp_delta(INT64_MIN + 1, -5))), timeout=CALL_TIMEOUT_S)
        assert type(from_rpc_error(raised.value)) is InvalidTimestampError


# ---------------------------------------------------------------- defect 7


def test_describe_topic_names_log_dirs_by_index_never_by_path(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    server = start_server(tmp_path / "data", "--log-dirs", ",".join(str(d) for d in dirs))
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        created = _create(stub, "spread", partitions=4)
        described = stub.DescribeTopic(pb.DescribeTopicRequest(name="spread"),
                                       timeout=CALL_TIMEOUT_S).topic
        listed = stub.ListTopics(pb.ListTopicsRequest(), timeout=CALL_TIMEOUT_S).topics
    for topic in (created, described, *listed):
        by_partition = {p.partition: p.log_dir for p in topic.partitions}
        # New partitions go to the directory with the fewest: both are used.
        assert set(by_partition.values()) == {"0", "1"}
        for partition, index in by_partition.items():
            assert (dirs[int(index)] / f"spread-{partition}").is_dir()
        assert str(tmp_path) not in str(topic)


async def test_grpcs_own_resource_exhausted_reaches_the_client_as_what_it_is(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # waiting_rpcs_max must stay below max_concurrent_rpcs (the settings refuse otherwise).
    server = start_server(tmp_path / "data", "--max-request-bytes", "65536",
                          "--max-concurrent-rpcs", "2", "--waiting-rpcs-max", "1")
    # Unary calls: gRPC's own limits are on calls (a Session stream is one call, and its own
    # too-large request: tests/integration/test_session.py).
    async with Client(server.target, sessions=False) as client:
        await client.create_topic("limits", 1)
        # Over the server's max_request_bytes: gRPC refuses it; sending it again cannot help.
        with pytest.raises(MessageTooLargeError) as too_large:
            await client.produce("limits", 0, [bytes(100_000)])
        assert not too_large.value.retriable
        assert "larger than max" in too_large.value.message
        # Three long polls for two slots of max_concurrent_rpcs: of the two gRPC admits, one
        # waits for data and the other is refused by the server's own limit on waiting RPCs
        # (waiting_rpcs_max=1), with its ErrorInfo; the third is refused by gRPC itself, with no
        # ErrorInfo, if it arrives while the other two are in flight. Under load it may arrive
        # after the server's refusal ended its call, and then the server refuses it too: the
        # round is tried again (each refusal must still be one of the two, told apart), until
        # both kinds were seen.
        by_gRPC: list[BaseException] = []
        ours: list[BaseException] = []
        for _ in range(10):
            polls = [asyncio.ensure_future(client.fetch_by_offset(
                "limits", 0, 0, max_wait_ms=20_000, min_bytes=1)) for _ in range(3)]
            refusals = []
            pending = set(polls)
            while len(refusals) < 2:
                done, pending = await asyncio.wait(
                    pending, return_when=asyncio.FIRST_COMPLETED, timeout=60)
                assert done, "fewer than two of three long polls were refused"
                refusals.extend(future.exception() for future in done)
            # (A poll cancelled in the round before may still hold its slot for a moment:
            # then all three are refused.)
            assert len(pending) <= 1, refusals
            for refusal in refusals:
                if type(refusal) is ConcurrentRpcLimitError:
                    by_gRPC.append(refusal)
                else:
                    assert type(refusal) is ResourceLimitExceededError, refusal
                    ours.append(refusal)
            for poll in polls:
                poll.cancel()
            await asyncio.gather(*polls, return_exceptions=True)
            if by_gRPC and ours:
                break
        assert by_gRPC and ours, f"gRPC refused {len(by_gRPC)}, the server {len(ours)}"
        refused = by_gRPC[0]
        assert isinstance(refused, ResourceLimitExceededError) and refused.retriable
        assert refused.limit == "max_concurrent_rpcs"
        assert "Concurrent RPC limit exceeded" in refused.message
        assert all(r.retriable and r.limit == "waiting_rpcs_max" for r in ours), ours
        # Once the polls end (cancelled above), the same call goes through.
        for _ in range(200):
            try:
                await client.list_offsets("limits", 0, -1)
                break
            except ConcurrentRpcLimitError:
                await asyncio.sleep(0.05)
        else:
            pytest.fail("the concurrent-RPC limit never freed")
