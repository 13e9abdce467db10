"""A follower's fetch as a test sends it: one request on a ReplicaFetchSession stream
(replication.proto), its one answer's partition back, a partition's error raised."""

from __future__ import annotations

import grpc

from stratalog.v1 import broker_pb2, replication_pb2

CALL_TIMEOUT_S = 30.0
METHOD = "/stratalog.v1.Replication/ReplicaFetchSession"


class PartitionFetchError(Exception):
    """The answer's error for the partition: ``reason`` (an ErrorReason name), ``metadata``."""

    def __init__(self, error: broker_pb2.SessionError) -> None:
        super().__init__(error.message)
        self.reason = broker_pb2.ErrorReason.Name(error.reason)
        self.metadata = dict(error.metadata)


def replica_fetch(channel: grpc.Channel, topic: str, replica_id: int, epoch: int, *,
                  partition: int = 0, metadata: tuple[tuple[str, str], ...] | None = None,
                  max_wait_ms: int = 0, **fields: int) -> replication_pb2.PartitionData:
    """One request naming ``topic``-``partition`` as node ``replica_id`` at ``epoch`` (with
    ``fields``: fetch_offset, last_fetched_epoch, log_start_offset; log_end_offset is
    fetch_offset, as a follower's first request says); its PartitionData.

    Raises:
        PartitionFetchError: the partition's error.
        grpc.RpcError: the stream's (a caller refused, a replica not registered).
    """
    call = channel.stream_stream(
        METHOD, request_serializer=replication_pb2.ReplicaFetchRequest.SerializeToString,
        response_deserializer=replication_pb2.ReplicaFetchResponse.FromString)
    request = replication_pb2.ReplicaFetchRequest(
        replica_id=replica_id, max_wait_ms=max_wait_ms, max_bytes=1 << 20,
        response_max_bytes=1 << 20,
        partitions=[replication_pb2.FetchPartition(
            topic=topic, partition=partition, current_leader_epoch=epoch,
            log_end_offset=fields.get("fetch_offset", 0), **fields)])
    answers = call(iter([request]), timeout=CALL_TIMEOUT_S, metadata=metadata)
    try:
        answer = next(answers)
    finally:
        answers.cancel()
    (data,) = [p for p in answer.partitions if (p.topic, p.partition) == (topic, partition)]
    if data.HasField("error"):
        raise PartitionFetchError(data.error)
    return data
