"""The record RPCs of the Broker service: Produce, FetchByOffset, FetchByTimestamp, ListOffsets,
Subscribe, DeleteRecords and CleanPartition.

Each checks the request's shape, makes one call to the partition-serving layer
(:class:`~stratalog.server.broker.ReplicaManager`: leader checks, the append lock, where an
append or a read runs, the acks=all wait, the long poll's wait) and builds the answer. What stays
here is what only the gRPC front end has: the fetch answer as a protobuf message (raw batches,
or decoded records within ``max_bytes``), and Subscribe's flow control: a stream reads its next
message only after ``await context.write`` returned, i.e. after gRPC's flow control took the
previous one, within a lease of the server-wide
:class:`~stratalog.server.subscribe_budget.SubscribeBudget`, and holds only the serialized
message meanwhile: a reader that stops reading costs the server one message (twice: gRPC copies
it), all of them together at most the budget plus one batch each, and the streams of one
connection at most its share (``subscribe_buffer_bytes_per_connection``): past it they read
nothing, and one that waits longer than ``subscribe_stall_ms_max`` ends RESOURCE_EXHAUSTED.
Subscribe streams and long polls that wait are admitted by
:class:`~stratalog.server.client_limits.ClientLimits` (per connection, per client, in all; a
refusal names the setting).

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from stratalog.server.append_placement import holds_compressed_batches
from stratalog.server.client_limits import (
    ClientLimitExceededError,
    Origin,
    WaitingRpc,
    WaitingRpcKind,
    call_origin,
)
from stratalog.server.rpc.decoding import ProduceRequestView
from stratalog.server.rpc.fetch_answer import FetchAnswer
from stratalog.server.rpc.requests import (
    ACKS,
    FETCH_FORMATS,
    MAX_TIMESTAMP,
    NO_MATCH,
    RECORD_BATCHES,
    RpcBase,
    enum_value,
    isolation_level_of,
    non_negative,
    partition_number,
    rpc_method,
)
from stratalog.server.rpc.subscribe_messages import Built
from stratalog.server.rpc.translation import (
    BadRequestError,
    ProducerFields,
    decode_records_into,
    encode_records,
)
from stratalog.server.storage.partition_log import IsolationLevel
from stratalog.server.subscribe_budget import Lease, SubscribeBudget
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.broker import Partition
    from stratalog.server.storage.fetch_isolation import SlicedWalk
    from stratalog.server.storage.partition_log import FetchedBatches, PartitionLog

__all__ = ["RecordRpcs"]


def _stalled_too_long(
    budget: SubscribeBudget, connection: str, offset: int
) -> ClientLimitExceededError:
    """The error of a Subscribe stream ended because its connection took none of its streams'
    messages (retriable: subscribe again, and read)."""
    return ClientLimitExceededError(
        f"Subscribe stream ended: the streams of this connection ({connection}) hold "
        f"{budget.connection_bytes_max} bytes of messages its client has not read "
        f"(subscribe_buffer_bytes_per_connection), and none was taken for "
        f"{budget.stall_ms_max} ms (subscribe_stall_ms_max); read the streams you open, "
        f"and subscribe again from offset {offset}",
        limit="subscribe_buffer_bytes_per_connection",
    )


class RecordRpcs(RpcBase):
    """The record RPCs (module docstring)."""

    def _fetch_max_bytes(self, requested: int, cap: int | None = None) -> int:
        non_negative("max_bytes", requested)
        max_bytes = requested or self._settings.fetch_max_bytes_default
        return min(max_bytes, cap if cap is not None else self._settings.fetch_max_bytes_max)

    def _records_read_bytes(self, max_bytes: int) -> int:
        """The bytes a ``max_records`` read may take: the batch holding its offset whole (the
        storage reads only that batch when it holds the records asked for, as a point read's
        does), and beyond it at most ``read_in_executor_min_bytes``, so that such a read is
        small enough to run on the loop, without a thread hop. An answer cut short by it says
        where to go on (``next_offset``), as any fetch."""
        return min(max_bytes, self._settings.read_in_executor_min_bytes)

    def _fetch_response(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        fetched: FetchedBatches | SlicedWalk,
        fetch_format: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        matched: tuple[int, int] = (NO_MATCH, NO_MATCH),
        max_records: int = 0,
        counts: list[int] | None = None,
    ) -> broker_pb2.FetchResponse:
        """A FetchResponse for ``fetched`` (whole batches read at ``offset`` with ``max_bytes``).
        ``counts`` (if given) receives the records and bytes the answer carries, as the metrics
        counted them.

        With ``max_records`` > 0 the answer holds at most that many records from ``offset``,
        in either format: the serving layer took them in the walk that bounds the read
        (``fetched`` is a :class:`SlicedWalk`:
        :func:`~stratalog.server.storage.fetch_isolation.take_records`: record batches
        re-framed to hold just those records, control batches and for READ_COMMITTED aborted
        ones left out, so no aborted transactions come with them), and RECORDS decodes only
        what was taken, from the positions that walk found.

        Raw batches come with the next offset and record count the read took from their
        headers, and for READ_COMMITTED with the aborted transactions overlapping them (the
        client drops their records, as Kafka's consumer does). Decoded records
        (FETCH_FORMAT_RECORDS) never include control records, and for READ_COMMITTED not the
        records of aborted transactions; they are bounded by ``max_bytes`` too, counting keys
        and values: compressed batches can decode to far more than they store, and a response
        must stay under the gRPC message limit. The batches left out are fetched next time.
        Every response carries the high watermark and the last stable offset, read after the
        data: the high watermark is never below ``next_offset``, nor is the LSO for
        READ_COMMITTED.
        """
        data = fetched.data
        committed = isolation_level == IsolationLevel.READ_COMMITTED
        if max_records:
            return self._partial_fetch_response(
                topic, partition, partition_log, offset, fetched, fetch_format, max_bytes,
                matched,
            )
        if fetch_format == RECORD_BATCHES:
            records_out = fetched.records_count
            # The batches go to gRPC as the storage read them, not copied into the message
            # (fetch_answer.py).
            response = broker_pb2.FetchResponse(
                topic=topic,
                partition=partition,
                high_watermark=partition_log.high_watermark,
                log_start_offset=partition_log.log_start_offset,
                next_offset=fetched.next_offset,
                matched_offset=matched[0],
                matched_timestamp=matched[1],
                last_stable_offset=partition_log.last_stable_offset,
            )
            if committed and fetched.aborted_transactions:
                add = response.aborted_transactions.add
                for txn in fetched.aborted_transactions:
                    add(producer_id=txn.producer_id, first_offset=txn.first_offset)
            self._observe_fetch(topic, records_out, len(data), counts)
            return FetchAnswer(response, data)
        response = broker_pb2.FetchResponse(
            topic=topic,
            partition=partition,
            matched_offset=matched[0],
            matched_timestamp=matched[1],
        )
        next_offset, records_out, bytes_out = decode_records_into(
            response.records, data, offset, max_bytes,
            fetched.aborted_transactions if committed else None,
        )
        response.high_watermark = partition_log.high_watermark
        response.log_start_offset = partition_log.log_start_offset
        response.last_stable_offset = partition_log.last_stable_offset
        response.next_offset = next_offset
        self._observe_fetch(topic, records_out, bytes_out, counts)
        return response

    def _observe_fetch(
        self, topic: str, records_out: int, bytes_out: int, counts: list[int] | None
    ) -> None:
        self._metrics.observe_fetch(topic, records_out, bytes_out)
        if counts is not None:
            counts[:] = (records_out, bytes_out)

    def _partial_fetch_response(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        sliced: SlicedWalk,
        fetch_format: int,
        max_bytes: int,
        matched: tuple[int, int],
    ) -> broker_pb2.FetchResponse:
        """:meth:`_fetch_response` for a ``max_records`` read: ``sliced`` holds the records the
        serving layer took (:func:`~stratalog.server.storage.fetch_isolation.take_records`)."""
        response = broker_pb2.FetchResponse(
            topic=topic,
            partition=partition,
            matched_offset=matched[0],
            matched_timestamp=matched[1],
        )
        next_offset = sliced.next_offset
        if fetch_format == RECORD_BATCHES:
            bytes_out = len(sliced.data)
            records_out = sliced.records_count
        else:
            # Decoded batch by batch from where the walk put them: no second walk.
            decoded_next, records_out, bytes_out = decode_records_into(
                response.records, sliced.data, offset, max_bytes, positions=sliced.positions
            )
            if bytes_out < len(sliced.data):
                # A whole compressed batch decoded past max_bytes: the rest comes next time.
                next_offset = decoded_next
        response.high_watermark = partition_log.high_watermark
        response.log_start_offset = partition_log.log_start_offset
        response.last_stable_offset = partition_log.last_stable_offset
        response.next_offset = next_offset
        self._metrics.observe_fetch(topic, records_out, bytes_out)
        if fetch_format == RECORD_BATCHES:
            return FetchAnswer(response, sliced.data)
        return response

    def _encoder(self, request: ProduceRequestView) -> Callable[[], Awaitable[bytes]]:
        """The records of a records-form Produce as one batch, encoded when called: on the
        loop when small, else in the executor. The server's own batch decompresses to about
        the request: it is sized by it."""

        async def encode() -> bytes:
            records = request.records
            producer = ProducerFields.of_request(
                request.producer_id, request.producer_epoch, request.base_sequence,
                request.transactional,
            )
            if self._placement.encodes_inline(len(records), request.request_bytes):
                return encode_records(records, request.compression, self._time_ms(), producer)
            return await self._blocking(
                encode_records, records, request.compression, self._time_ms(), producer
            )

        return encode

    @rpc_method()
    async def Produce(
        self, request: ProduceRequestView, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ProduceResponse:
        return await self.produce(request)

    async def produce(
        self, request: ProduceRequestView, appended: Callable[[], None] | None = None
    ) -> broker_pb2.ProduceResponse:
        """Produce's behaviour, for a unary call and a Session request alike. ``appended`` is
        called once the records are in the log (a Session lets the next Produce of the
        partition go then, even while an acks=all one waits for its replicas)."""
        # ``request`` comes from decoding.parse_produce_request: its record_batches is a
        # view of the received message, appended without a copy.
        topic = self._topic(request.topic)
        partition = partition_number(request.partition)
        has_records = len(request.records) > 0
        record_batches = request.record_batches
        has_batches = len(record_batches) > 0
        if has_records == has_batches:
            raise BadRequestError(
                "records",
                "set exactly one of records and record_batches "
                + ("(both are set)" if has_records else "(neither is set)"),
            )
        if has_batches and request.producer_id is not None:
            raise BadRequestError(
                "producer_id",
                "set only with records: record_batches carry their producer id, epoch and "
                "sequence in their own headers",
            )
        acks = request.acks
        if acks not in ACKS:
            raise BadRequestError("acks", f"must be 0, 1 or -1 (all), got {acks}")
        records: bytes | memoryview | Callable[[], Awaitable[bytes]]
        if has_records:
            # Encoded once the serving layer found the partition served here.
            records, size_bytes, compressed = self._encoder(request), request.request_bytes, False
        else:
            records = record_batches
            size_bytes, compressed = len(record_batches), holds_compressed_batches(record_batches)
        info = await self._replicas.append_records(
            topic, partition, acks, records, size_bytes=size_bytes, compressed=compressed,
            flush=request.flush, appended=appended, transactional_id=request.transactional_id,
        )
        self._metrics.observe_produce(topic, info.record_count, info.size_bytes)
        return broker_pb2.ProduceResponse(
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time=info.log_append_time,
            log_start_offset=info.log_start_offset,
            record_count=info.record_count,
            duplicate=info.duplicate,
        )

    @rpc_method()
    async def FetchByOffset(
        self, request: broker_pb2.FetchByOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.FetchResponse:
        return await self.fetch_by_offset(request, functools.partial(call_origin, context))

    async def fetch_by_offset(
        self,
        request: broker_pb2.FetchByOffsetRequest,
        origin: Callable[[], Origin],
        pause: Callable[[], None] | None = None,
        resume: Callable[[], Awaitable[None]] | None = None,
    ) -> broker_pb2.FetchResponse:
        """FetchByOffset's behaviour, for a unary call and a Session request alike: ``origin``
        says whose waiting RPCs a long poll counts in; ``pause`` and ``resume`` are called
        around its waits (a Session request gives its charge of the session's byte budgets
        back meanwhile: server/rpc/session.py, "Limits")."""
        self._placement.read_served()
        topic = self._topic(request.topic)
        partition = partition_number(request.partition)
        max_bytes = self._fetch_max_bytes(request.max_bytes)
        max_wait_ms = min(
            non_negative("max_wait_ms", request.max_wait_ms), self._settings.fetch_max_wait_ms_max
        )
        min_bytes = non_negative("min_bytes", request.min_bytes)
        fetch_format = enum_value("format", request.format, FETCH_FORMATS)
        isolation_level = isolation_level_of(request.isolation_level)
        max_records = non_negative("max_records", request.max_records)
        if max_records:
            max_bytes = self._records_read_bytes(max_bytes)
        offset = request.offset
        admit_wait = None
        if max_wait_ms:
            # A long poll takes a slot of its client's waiting RPCs when it first waits (one
            # that finds its data at once never does), and gives it back when it answers.
            def admit_wait() -> WaitingRpc:
                return self._limits.admit(origin(), WaitingRpcKind.LONG_POLL)

        partition_log, fetched = await self._replicas.fetch_records(
            topic, partition, offset, max_bytes, isolation_level, max_records=max_records,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, admit_wait=admit_wait,
            pause=pause, resume=resume,
        )
        return self._fetch_response(
            topic, partition, partition_log, offset, fetched, fetch_format, max_bytes,
            isolation_level, max_records=max_records,
        )

    @rpc_method()
    async def FetchByTimestamp(
        self, request: broker_pb2.FetchByTimestampRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.FetchResponse:
        return await self.fetch_by_timestamp(request)

    async def fetch_by_timestamp(
        self, request: broker_pb2.FetchByTimestampRequest
    ) -> broker_pb2.FetchResponse:
        """FetchByTimestamp's behaviour, for a unary call and a Session request alike."""
        self._placement.read_served()
        topic = self._topic(request.topic)
        partition = partition_number(request.partition)
        timestamp = non_negative("timestamp", request.timestamp)
        max_bytes = self._fetch_max_bytes(request.max_bytes)
        fetch_format = enum_value("format", request.format, FETCH_FORMATS)
        isolation_level = isolation_level_of(request.isolation_level)
        max_records = non_negative("max_records", request.max_records)
        if max_records:
            max_bytes = self._records_read_bytes(max_bytes)
        partition_log, found, fetched = await self._replicas.fetch_by_timestamp(
            topic, partition, timestamp, max_bytes, isolation_level, max_records
        )
        if found is None:
            return self._fetch_response(
                topic, partition, partition_log, fetched.next_offset, fetched, fetch_format,
                max_bytes, isolation_level, max_records=max_records,
            )
        return self._fetch_response(
            topic, partition, partition_log, found.offset, fetched, fetch_format, max_bytes,
            isolation_level, (found.offset, found.timestamp), max_records,
        )

    @rpc_method()
    async def ListOffsets(
        self, request: broker_pb2.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListOffsetsResponse:
        return await self.list_offsets(request)

    async def list_offsets(
        self, request: broker_pb2.ListOffsetsRequest
    ) -> broker_pb2.ListOffsetsResponse:
        """ListOffsets' behaviour, for a unary call and a Session request alike."""
        self._placement.read_served()
        topic = self._topic(request.topic)
        partition = partition_number(request.partition)
        target = request.timestamp
        if target < MAX_TIMESTAMP:
            raise BadRequestError(
                "timestamp", f"must be -2 (earliest), -1 (latest), -3 (max timestamp) or a "
                f"timestamp >= 0, got {target}"
            )
        isolation_level = isolation_level_of(request.isolation_level)
        found = self._replicas.offset_for_timestamp(topic, partition, target, isolation_level)
        if found is None:
            return broker_pb2.ListOffsetsResponse(offset=NO_MATCH, timestamp=NO_MATCH)
        return broker_pb2.ListOffsetsResponse(offset=found.offset, timestamp=found.timestamp)

    @rpc_method(stream=True)
    async def Subscribe(
        self, request: broker_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> None:
        topic = self._topic(request.topic)
        partition = partition_number(request.partition)
        max_bytes = self._fetch_max_bytes(request.max_bytes, self._settings.subscribe_buffer_bytes)
        fetch_format = enum_value("format", request.format, FETCH_FORMATS)
        isolation_level = isolation_level_of(request.isolation_level)
        start = request.WhichOneof("start")
        if start is None:
            raise BadRequestError("start", "set offset or timestamp")
        timestamp = (non_negative("timestamp", request.timestamp) if start == "timestamp"
                     else None)
        partition_log, gate, found, offset = self._replicas.subscription_start(
            topic, partition, isolation_level, request.offset, timestamp
        )
        matched: tuple[int, int] | None = None
        if timestamp is not None:
            matched = (found.offset, found.timestamp) if found is not None else (
                NO_MATCH, NO_MATCH)
        # Admitted once the request is known good: a bad one is INVALID_ARGUMENT, not a limit.
        with self._limits.admit(call_origin(context), WaitingRpcKind.SUBSCRIBE):
            self._metrics.subscribers.inc()
            try:
                await self._follow(
                    context, topic, partition, partition_log, gate, offset, max_bytes,
                    fetch_format, isolation_level, matched,
                )
            finally:
                self._metrics.subscribers.dec()

    async def _follow(
        self,
        context: grpc.aio.ServicerContext,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        gate: Partition,
        offset: int,
        max_bytes: int,
        fetch_format: int,
        isolation_level: IsolationLevel,
        matched: tuple[int, int] | None,
    ) -> None:
        """Subscribe's loop: read a message within a lease of the budget, write it, read on;
        wait for an append at the end. Returns only by an exception (the stream ends)."""
        budget = self._subscribe_budget
        connection = context.peer() or "unknown"
        while True:
            partition_log, gate = self._replicas.ensure_following(
                topic, partition, partition_log, gate)
            signal = gate.signal()
            lease = budget.lease(max_bytes, connection)
            if lease is None:
                # The connection's streams hold its share: read nothing until one of its
                # messages is taken; a connection that takes none is cut off (its waiting
                # streams hold nothing gRPC would keep: subscribe_budget.py).
                try:
                    await asyncio.wait_for(asyncio.shield(budget.room(connection)),
                                           budget.stall_ms_max / 1000)
                except TimeoutError:
                    raise _stalled_too_long(budget, connection, offset) from None
                continue
            # Streams making the same reading send one message (subscribe_messages.py); the
            # first one's timestamp match is its own.
            share = None if matched is not None else self._shared_messages.join(
                (topic, partition, offset, lease.max_bytes, fetch_format, isolation_level,
                 signal))
            try:
                built = None if share is None or share.builder else await share.wait()
                if built is None:
                    built = await self._subscribe_message(
                        topic, partition, partition_log, offset, lease, fetch_format,
                        isolation_level, matched or (NO_MATCH, NO_MATCH),
                    )
                    if share is not None and share.builder:
                        share.publish(built)
                elif built.message is not None:
                    self._metrics.observe_fetch(topic, built.records_out, built.bytes_out)
                message, offset, read_any = built.message, built.next_offset, built.read_any
                del built
                if message is not None:
                    lease.hold(len(message))
                    self._placement.read_served()
                    # Flow control: returns once gRPC took the message; only then read on.
                    # The serialized bytes (shared by the streams of this reading) and gRPC's
                    # copy are all the stream holds meanwhile.
                    await context.write(message)
                    matched = None  # the match is reported in the first message only
                    del message
            finally:
                if share is not None:
                    share.release()
                lease.release()
            if not read_any:
                await gate.wait(signal, None)  # idle: no lease, no message, only this task

    async def _subscribe_message(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        lease: Lease,
        fetch_format: int,
        isolation_level: IsolationLevel,
        matched: tuple[int, int],
    ) -> Built:
        """The next Subscribe message from ``offset``, serialized, within ``lease``: the
        message, or None when there is nothing to send; the offset to read next; whether
        anything was read at all, so that the stream waits only at the end of what it may
        read; and the records and bytes it carries.

        Serialized here, so that the batches read and the protobuf message are garbage when
        this returns, before the stream waits for gRPC to take the message (Subscribe's
        serializer passes bytes through: :func:`stratalog.server.rpc.decoding.add_broker_service`).
        """
        fetched = await self._replicas.read(
            topic, partition, partition_log, offset, lease.max_bytes, isolation_level
        )
        if not fetched.data:
            return Built(None, offset, False, 0, 0)
        counts: list[int] = []
        response = self._fetch_response(
            topic, partition, partition_log, offset, fetched, fetch_format, lease.max_bytes,
            isolation_level, matched, counts=counts,
        )
        if not (response.records or response.record_batches):
            # Left empty by the filters (aborted records, markers): move past, send nothing.
            return Built(None, response.next_offset, True, 0, 0)
        records_out, bytes_out = counts
        return Built(response.SerializeToString(), response.next_offset, True, records_out,
                     bytes_out)

    @rpc_method()
    async def DeleteRecords(
        self, request: broker_pb2.DeleteRecordsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteRecordsResponse:
        topic = self._topic(request.topic)
        partition = partition_number(request.partition)
        before_offset = request.before_offset
        if before_offset < -1:
            raise BadRequestError(
                "before_offset", f"must be >= 0, or -1 for the high watermark, got {before_offset}"
            )
        log_start_offset = await self._replicas.delete_records(topic, partition, before_offset)
        return broker_pb2.DeleteRecordsResponse(log_start_offset=log_start_offset)

    @rpc_method()
    async def CleanPartition(
        self, request: broker_pb2.CleanPartitionRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CleanPartitionResponse:
        topic = self._topic(request.topic)
        partition = partition_number(request.partition)
        result = await self._replicas.clean_partition(topic, partition)
        return broker_pb2.CleanPartitionResponse(
            first_dirty_offset_before=result.first_dirty_offset_before,
            end_offset=result.end_offset,
            bytes_read=result.bytes_read,
            bytes_written=result.bytes_written,
            records_read=result.records_read,
            records_kept=result.records_kept,
            segments_before=result.segments_before,
            segments_after=result.segments_after,
            duration_ms=result.duration_ms,
        )
