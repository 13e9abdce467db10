"""The systems benchmarks/bench_peers.py compares, each through its Python client: stratalog
through its gRPC client, stratalog through its Kafka listener (librdkafka in bulk,
benchmarks/kafka_wire.py one request at a time), NATS JetStream and Redis Streams. Each workload
checks what it got (a wrong value fails the run). bench_peers' docstring says what each
workload does for each system."""

from __future__ import annotations

import abc
import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.bench_client import VALUE_SIZE_BYTES
from benchmarks.peer_harness import (
    FETCH_BYTES,
    NATS,
    REDIS,
    REDIS_PAGE_RECORDS,
    REDIS_PIPELINE_CHUNK,
    SEND_MANY_CHUNK,
    STRATALOG,
    STRATALOG_KAFKA,
    Measurement,
    Meter,
    Server,
    ServerCpu,
    format_rfc3339_ns,
    rfc3339_ns,
    timed_concurrently,
    timed_one_by_one,
)
from stratalog.client import Client, Consumer, FetchFormat, Producer, decode_fetched

# --- the systems ------------------------------------------------------------------------------


@dataclass
class RunInputs:
    """What every system gets in one run: the values (offset i holds ``values[i]``), the
    offsets of the point reads (single client, then the concurrent clients'), the lookups'
    times as fractions of each system's time span, and the round trips' values."""

    run_index: int
    values: list[bytes]
    read_offsets: list[int]
    concurrent_offsets: list[int]
    lookup_fractions: list[float]
    round_trip_values: list[bytes]


class System(abc.ABC):
    """One system under test, through its Python client: how each workload is done.

    Subclasses set ``name`` and implement the workloads; ``variants()`` lists extra rows
    (row key -> workload) for calls other than the default. Each workload checks what it got
    (values, counts, times), so a fast wrong answer fails the run. Event-loop only.
    """

    name: str

    def __init__(self, server: Server) -> None:
        self.server = server
        self.meter = Meter(ServerCpu(server.pid))

    async def open(self) -> None:  # noqa: B027 (optional hook)
        pass

    async def close(self) -> None:  # noqa: B027 (optional hook)
        pass

    @abc.abstractmethod
    async def create(self, run_index: int) -> None:
        """A new, empty partition / stream / key for the data set and one for round trips."""

    @abc.abstractmethod
    async def drop(self) -> None:
        """Delete what :meth:`create` made."""

    @abc.abstractmethod
    async def produce(self, values: list[bytes]) -> Measurement:
        """The data set through the fast API, timed from the first record to the last ack."""

    @abc.abstractmethod
    async def consume(self, values: list[bytes]) -> Measurement:
        """Every record read back, each value's length summed."""

    @abc.abstractmethod
    async def round_trips(self, values: list[bytes]) -> Measurement:
        """One record at a time, each acknowledged before the next."""

    @abc.abstractmethod
    async def read_at(self, offset: int) -> None:
        """One point read with the default call; checks the value."""

    @abc.abstractmethod
    async def lookup(self, fraction: float) -> None:
        """The first record at or after the time ``fraction`` of the way from the first
        record's time to the last's; checks that its time is not earlier."""

    @abc.abstractmethod
    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        """``count`` point-read callables, each on a connection of its own."""

    @abc.abstractmethod
    async def close_readers(self) -> None:
        pass

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        return {}

    async def run(self, inputs: RunInputs, clients: int) -> dict[str, Measurement]:
        """Every workload of one run, in the order of :data:`ROWS`."""
        self.expected = inputs.values
        self.clients = clients
        await self.create(inputs.run_index)
        try:
            out = {
                "produce": await self.produce(inputs.values),
                "consume": await self.consume(inputs.values),
                "round_trip": await self.round_trips(inputs.round_trip_values),
                "point_read": await timed_one_by_one(self.meter, self.read_at,
                                                     inputs.read_offsets),
                "lookup": await timed_one_by_one(self.meter, self.lookup,
                                                 inputs.lookup_fractions),
            }
            calls = await self.readers(clients)
            try:
                out["concurrent_reads"] = await timed_concurrently(
                    self.meter, calls, inputs.concurrent_offsets)
            finally:
                await self.close_readers()
            for key, workload in self.variants().items():
                out[key] = await workload(inputs)
            return out
        finally:
            await self.drop()


def _check_value(system: str, offset: int, got: bytes | None, expected: list[bytes]) -> None:
    if got != expected[offset]:
        raise AssertionError(f"{system}: offset {offset} read {got!r}, "
                             f"expected {expected[offset]!r}")


def _check_time(system: str, target: int, got: int) -> None:
    if got < target:
        raise AssertionError(f"{system}: a lookup of time {target} found time {got}")


class Stratalog(System):
    name = STRATALOG

    async def open(self) -> None:
        self.client = Client(self.server.address)
        # The same calls as unary RPCs (each on a new HTTP/2 stream), as before issue 14: the
        # "sessions=False" rows, measured in the same run as the default Client's.
        self.unary_client = Client(self.server.address, sessions=False)
        self._readers: list[Client] = []

    async def close(self) -> None:
        await self.client.close()
        await self.unary_client.close()

    async def create(self, run_index: int) -> None:
        self.topic = f"peers-{run_index}"
        self.round_trip_topic = f"peers-rt-{run_index}"
        await self.client.create_topic(self.topic, 1)
        await self.client.create_topic(self.round_trip_topic, 1)

    async def drop(self) -> None:
        await self.client.delete_topic(self.topic)
        await self.client.delete_topic(self.round_trip_topic)

    async def produce(self, values: list[bytes]) -> Measurement:
        async with Producer(self.client) as producer:
            with self.meter:
                for i in range(0, len(values), SEND_MANY_CHUNK):
                    await producer.send_many(self.topic, values[i:i + SEND_MANY_CHUNK],
                                             partition=0)
                await producer.flush()
        end = await self.client.list_offsets(self.topic, 0, -1)
        assert end.offset == len(values), (end, len(values))
        first = await self.client.fetch_by_offset(self.topic, 0, 0, max_records=1)
        last = await self.client.fetch_by_offset(self.topic, 0, len(values) - 1, max_records=1)
        self.first_ms, self.last_ms = first.records[0].timestamp, last.records[0].timestamp
        return self.meter.measurement(len(values))

    async def consume(self, values: list[bytes]) -> Measurement:
        count = size = 0
        with self.meter:
            async with Consumer(self.client, self.topic) as consumer:
                async for batch in consumer.batches():
                    batch_values = batch.values
                    count += len(batch_values)
                    size += sum(map(len, batch_values))
        assert count == len(values) and size == len(values) * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count)

    async def round_trips(self, values: list[bytes], client: Client | None = None,
                          **producer_options: Any) -> Measurement:
        async with Producer(client or self.client, **producer_options) as producer:
            with self.meter:
                for value in values:
                    await (await producer.send(self.round_trip_topic, value, partition=0))
        return self.meter.measurement(len(values))

    async def round_trips_client(self, values: list[bytes], client: Client) -> Measurement:
        with self.meter:
            for value in values:
                await client.produce(self.round_trip_topic, 0, [value])
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, client: Client | None = None,
                      max_records: int = 1) -> None:
        result = await (client or self.client).fetch_by_offset(
            self.topic, 0, offset, max_records=max_records)
        record = result.records[0]
        assert record.offset == offset, (record.offset, offset)
        _check_value(self.name, offset, record.value, self.expected)

    async def fetch_all(self, values: list[bytes]) -> Measurement:
        """The data set in reads of FETCH_BYTES of whole batches (RECORD_BATCHES: the bytes as
        stored, as a Kafka Fetch carries them), one after the other."""
        offset = size = reads = 0
        with self.meter:
            while offset < len(values):
                result = await self.client.fetch_by_offset(
                    self.topic, 0, offset, max_bytes=FETCH_BYTES,
                    fetch_format=FetchFormat.RECORD_BATCHES)
                size += len(result.record_batches)
                offset = result.next_offset
                reads += 1
        assert offset == len(values), offset
        return self.meter.measurement(len(values), size_bytes=size)

    async def read_batches_at(self, offset: int) -> None:
        result = await self.client.fetch_by_offset(
            self.topic, 0, offset, max_records=1, fetch_format=FetchFormat.RECORD_BATCHES)
        batch = decode_fetched(self.topic, 0, result.record_batches, offset,
                               result.high_watermark)[0]
        assert batch.offsets[0] == offset, (batch.offsets[0], offset)
        _check_value(self.name, offset, batch.values[0], self.expected)

    def _time_of(self, fraction: float) -> int:
        return self.first_ms + int(fraction * (self.last_ms - self.first_ms))

    async def lookup(self, fraction: float, client: Client | None = None,
                     max_records: int = 1) -> None:
        target = self._time_of(fraction)
        result = await (client or self.client).fetch_by_timestamp(
            self.topic, 0, target, max_records=max_records)
        record = result.records[0]
        assert record.offset == result.matched_offset, (record.offset, result.matched_offset)
        _check_time(self.name, target, record.timestamp)

    async def lookup_batches(self, fraction: float) -> None:
        target = self._time_of(fraction)
        result = await self.client.fetch_by_timestamp(
            self.topic, 0, target, max_records=1, fetch_format=FetchFormat.RECORD_BATCHES)
        batch = decode_fetched(self.topic, 0, result.record_batches, result.matched_offset,
                               result.high_watermark)[0]
        assert batch.offsets[0] == result.matched_offset, (batch.offsets[0], result)
        _check_time(self.name, target, batch.timestamps[0])

    async def readers(self, count: int, **client_options: Any
                      ) -> list[Callable[[int], Awaitable[None]]]:
        # gRPC shares one TCP connection between channels to the same target with the same
        # arguments (its global subchannel pool); a local pool gives each client its own.
        self._readers = [Client(self.server.address,
                                options=[("grpc.use_local_subchannel_pool", 1)],
                                **client_options)
                         for _ in range(count)]
        return [functools.partial(self.read_at, client=c) for c in self._readers]

    async def close_readers(self) -> None:
        for client in self._readers:
            await client.close()
        self._readers = []

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        meter = self.meter

        async def one_by_one(call: Callable[[Any], Awaitable[None]], arguments: list[Any]
                             ) -> Measurement:
            return await timed_one_by_one(meter, call, arguments)

        async def concurrently_unary(inputs: RunInputs) -> Measurement:
            calls = await self.readers(self.clients, sessions=False)
            try:
                return await timed_concurrently(meter, calls, inputs.concurrent_offsets)
            finally:
                await self.close_readers()

        unary = self.unary_client
        return {
            "fetch_mb": lambda i: self.fetch_all(i.values),
            "round_trip.unary_rpc": lambda i: self.round_trips(i.round_trip_values, unary),
            "round_trip.linger0": lambda i: self.round_trips(i.round_trip_values, linger_ms=0),
            "round_trip.client": lambda i: self.round_trips_client(i.round_trip_values,
                                                                   self.client),
            "round_trip.client_unary": lambda i: self.round_trips_client(i.round_trip_values,
                                                                         unary),
            "point_read.unary_rpc": lambda i: one_by_one(
                functools.partial(self.read_at, client=unary), i.read_offsets),
            "lookup.unary_rpc": lambda i: one_by_one(
                functools.partial(self.lookup, client=unary), i.lookup_fractions),
            "concurrent_reads.unary_rpc": concurrently_unary,
            "point_read.batches": lambda i: one_by_one(self.read_batches_at, i.read_offsets),
            "point_read.whole": lambda i: one_by_one(
                lambda o: self.read_at(o, max_records=0), i.read_offsets),
            "lookup.batches": lambda i: one_by_one(self.lookup_batches, i.lookup_fractions),
            "lookup.whole": lambda i: one_by_one(
                lambda f: self.lookup(f, max_records=0), i.lookup_fractions),
        }


class StratalogKafka(System):
    """The stratalog server through its Kafka listener. Bulk through confluent-kafka
    (librdkafka) with its defaults; one request at a time through the minimal client of
    benchmarks/kafka_wire.py (Produce and Fetch written by hand, answers decoded by
    kafka-python's classes, on one asyncio connection; the "library" rows encode with
    kafka-python's classes too).

    A Kafka Fetch returns whole batches (the protocol has no record count): its point read
    reads the round-trip partition, whose records were each produced alone (one per batch),
    at the offset the run drew modulo its size; the "whole batch" row reads the bulk data set,
    whose batches librdkafka filled (up to 10,000 records)."""

    name = STRATALOG_KAFKA

    async def open(self) -> None:
        from benchmarks.kafka_wire import KafkaWire

        self.wire = await KafkaWire.connect(self.server.kafka_address)
        self.library_wire = await KafkaWire.connect(self.server.kafka_address,
                                                    library_encoding=True)
        self.admin = Client(self.server.address)
        self._readers: list[Any] = []

    async def close(self) -> None:
        await self.wire.close()
        await self.library_wire.close()
        await self.admin.close()

    async def create(self, run_index: int) -> None:
        self.topic = f"kafka-peers-{run_index}"
        self.round_trip_topic = f"kafka-peers-rt-{run_index}"
        await self.admin.create_topic(self.topic, 1)
        await self.admin.create_topic(self.round_trip_topic, 1)

    async def drop(self) -> None:
        await self.admin.delete_topic(self.topic)
        await self.admin.delete_topic(self.round_trip_topic)

    async def produce(self, values: list[bytes]) -> Measurement:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer({"bootstrap.servers": self.server.kafka_address})
        topic = self.topic
        with self.meter:
            for value in values:
                while True:
                    try:
                        producer.produce(topic, value, partition=0)
                        break
                    except BufferError:  # its queue is full: let it send
                        producer.poll(0.001)
            assert producer.flush(60) == 0
        end = await self.admin.list_offsets(topic, 0, -1)
        assert end.offset == len(values), (end, len(values))
        first = await self.admin.fetch_by_offset(topic, 0, 0, max_records=1)
        last = await self.admin.fetch_by_offset(topic, 0, len(values) - 1, max_records=1)
        self.first_ms, self.last_ms = first.records[0].timestamp, last.records[0].timestamp
        return self.meter.measurement(len(values), size_bytes=len(values) * VALUE_SIZE_BYTES)

    async def consume(self, values: list[bytes]) -> Measurement:
        from confluent_kafka import Consumer as KafkaConsumer
        from confluent_kafka import TopicPartition

        # fetch.queue.backoff.ms 0: librdkafka's default (1,000) stops fetching for a second
        # each time its local queue passes queued.min.messages (100,000), which this reader of
        # 100-byte records drains in ~0.1 s: a run would measure the back-off, not the server
        # (docs/performance.md, "Issue 28: the Kafka listener").
        consumer = KafkaConsumer({"bootstrap.servers": self.server.kafka_address,
                                  "group.id": "bench-peers", "enable.auto.commit": False,
                                  "fetch.queue.backoff.ms": 0})
        count = size = 0
        try:
            with self.meter:
                consumer.assign([TopicPartition(self.topic, 0, 0)])
                while count < len(values):
                    for message in consumer.consume(10_000, 5.0):
                        if message.error() is not None:
                            raise RuntimeError(f"{self.name}: {message.error()}")
                        count += 1
                        size += len(message.value())
        finally:
            consumer.close()
        assert count == len(values) and size == len(values) * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count, size_bytes=size)

    async def round_trips(self, values: list[bytes], wire: Any = None) -> Measurement:
        produce_one, topic = (wire or self.wire).produce_one, self.round_trip_topic
        with self.meter:
            for value in values:
                await produce_one(topic, 0, value)
        self.round_trip_values = values
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, wire: Any = None) -> None:
        from benchmarks.kafka_wire import first_value_at

        offset %= len(self.round_trip_values)
        # partition_max_bytes 1: the batch holding the offset alone (a first batch always
        # comes whole, KIP-74), as a consumer's Fetch of one record gets it.
        data = await (wire or self.wire).fetch_at(self.round_trip_topic, 0, offset, 1)
        value = first_value_at(data.records, offset)
        if value != self.round_trip_values[offset]:
            raise AssertionError(f"{self.name}: offset {offset} read {value!r}")

    async def read_whole_batch_at(self, offset: int) -> None:
        from benchmarks.kafka_wire import first_value_at

        data = await self.wire.fetch_at(self.topic, 0, offset, 1)
        _check_value(self.name, offset, first_value_at(data.records, offset), self.expected)

    def _time_of(self, fraction: float) -> int:
        return self.first_ms + int(fraction * (self.last_ms - self.first_ms))

    async def lookup(self, fraction: float) -> None:
        from kafka.protocol.consumer import ListOffsetsRequest

        from benchmarks.kafka_wire import first_value_at

        target = self._time_of(fraction)
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[Topic(
            name=self.topic, partitions=[Topic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=target)])])
        answer = await self.wire.request(request, 7)
        found = answer.topics[0].partitions[0]
        assert found.error_code == 0 and found.timestamp >= target, found
        data = await self.wire.fetch_at(self.topic, 0, found.offset, 1)
        _check_value(self.name, found.offset, first_value_at(data.records, found.offset),
                     self.expected)

    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        from benchmarks.kafka_wire import KafkaWire

        self._readers = [await KafkaWire.connect(self.server.kafka_address)
                         for _ in range(count)]
        return [functools.partial(self.read_at, wire=w) for w in self._readers]

    async def close_readers(self) -> None:
        for wire in self._readers:
            await wire.close()
        self._readers = []

    async def fetch_all(self, values: list[bytes]) -> Measurement:
        """The data set in Fetches of FETCH_BYTES (zero copy: sent from the segment files),
        the records' bytes only counted."""
        offset = size = 0
        fetch_at, topic = self.wire.fetch_at, self.topic
        with self.meter:
            while offset < len(values):
                data = await fetch_at(topic, 0, offset, FETCH_BYTES)
                records = data.records
                size += len(records)
                # The next offset: the last batch's base offset + last offset delta + 1.
                last = _last_batch_start(records)
                offset = (int.from_bytes(records[last:last + 8], "big")
                          + int.from_bytes(records[last + 23:last + 27], "big") + 1)
        assert offset == len(values), offset
        return self.meter.measurement(len(values), size_bytes=size)

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        return {
            "fetch_mb": lambda i: self.fetch_all(i.values),
            "point_read.kafka_whole": lambda i: timed_one_by_one(
                self.meter, self.read_whole_batch_at, i.read_offsets[:200]),
            "round_trip.library": lambda i: self.round_trips(i.round_trip_values,
                                                             self.library_wire),
            "point_read.library": lambda i: timed_one_by_one(
                self.meter, functools.partial(self.read_at, wire=self.library_wire),
                i.read_offsets),
        }


def _last_batch_start(records: bytes) -> int:
    """Where the last batch of whole batches ``records`` starts (batch_length at byte 8)."""
    position = last = 0
    while position + 12 <= len(records):
        last = position
        position += 12 + int.from_bytes(records[position + 8:position + 12], "big")
    return last


class NatsJetStream(System):
    name = NATS

    async def _connect(self) -> Any:
        import nats

        return await nats.connect(f"nats://{self.server.address}")

    async def open(self) -> None:
        from benchmarks.nats_wire import NatsWire

        self.connection = await self._connect()
        self.js = self.connection.jetstream()
        self.wire = await NatsWire.connect(self.server.address)
        self._reader_connections: list[Any] = []

    async def close(self) -> None:
        await self.wire.close()
        await self.connection.close()

    async def create(self, run_index: int) -> None:
        from nats.js.api import StreamConfig

        self.stream = f"peers-{run_index}"
        self.round_trip_stream = f"peers-rt-{run_index}"
        # allow_direct: point reads by sequence answered by $JS.API.DIRECT.GET (2.9+).
        await self.js.add_stream(StreamConfig(name=self.stream, subjects=[self.stream],
                                              allow_direct=True))
        await self.js.add_stream(StreamConfig(name=self.round_trip_stream,
                                              subjects=[self.round_trip_stream]))

    async def drop(self) -> None:
        await self.js.delete_stream(self.stream)
        await self.js.delete_stream(self.round_trip_stream)

    async def produce(self, values: list[bytes]) -> Measurement:
        js, subject = self.js, self.stream
        with self.meter:
            for value in values:
                await js.publish_async(subject, value)
            await js.publish_async_completed()
        info = await js.stream_info(self.stream)
        assert info.state.messages == len(values), (info.state, len(values))
        first, last = await self._time_at(1), await self._time_at(len(values))
        self.first_ns, self.last_ns = first, last
        return self.meter.measurement(len(values))

    async def _get(self, sequence: int, js: Any = None) -> Any:
        return await (js or self.js).get_msg(self.stream, seq=sequence, direct=True)

    async def _time_at(self, sequence: int) -> int:
        return rfc3339_ns((await self._get(sequence)).headers["Nats-Time-Stamp"])

    async def consume(self, values: list[bytes]) -> Measurement:
        count = size = 0
        expected = len(values)
        done = asyncio.get_running_loop().create_future()

        async def on_message(message: Any) -> None:
            nonlocal count, size
            count += 1
            size += len(message.data)
            if count == expected and not done.done():
                done.set_result(None)

        with self.meter:
            subscription = await self.js.subscribe(self.stream, cb=on_message,
                                                   ordered_consumer=True)
            await done
            await subscription.unsubscribe()
        assert size == expected * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count)

    async def round_trips(self, values: list[bytes]) -> Measurement:
        publish, subject = self.wire.publish, self.round_trip_stream
        with self.meter:
            for value in values:
                await publish(subject, value)
        return self.meter.measurement(len(values))

    async def round_trips_library(self, values: list[bytes]) -> Measurement:
        js, subject = self.js, self.round_trip_stream
        with self.meter:
            for value in values:
                await js.publish(subject, value)
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, wire: Any = None) -> None:
        _, data = await (wire or self.wire).direct_get(self.stream, offset + 1)
        _check_value(self.name, offset, data, self.expected)

    async def read_at_library(self, offset: int) -> None:
        message = await self._get(offset + 1)
        _check_value(self.name, offset, message.data, self.expected)

    def _time_of(self, fraction: float) -> int:
        return self.first_ns + int(fraction * (self.last_ns - self.first_ns))

    async def lookup(self, fraction: float) -> None:
        # A binary search for the first sequence whose time is >= the target, over direct
        # gets: 2.9 has no get-by-time, and stream times never decrease.
        target = self._time_of(fraction)
        low, high = 1, len(self.expected)
        while low < high:
            middle = (low + high) // 2
            if await self._time_at(middle) < target:
                low = middle + 1
            else:
                high = middle
        message = await self._get(low)
        _check_time(self.name, target, rfc3339_ns(message.headers["Nats-Time-Stamp"]))

    async def lookup_by_consumer(self, fraction: float) -> None:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        target = self._time_of(fraction)
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                                opt_start_time=format_rfc3339_ns(target),  # type: ignore[arg-type]
                                ack_policy=AckPolicy.NONE)
        subscription = await self.js.pull_subscribe(self.stream, stream=self.stream,
                                                    config=config)
        try:
            (message,) = await subscription.fetch(1)
        finally:
            await self.js.delete_consumer(self.stream, subscription._consumer)
            await subscription.unsubscribe()
        # nats-py gives the delivery's time as a datetime (microseconds, through a float): the
        # check allows for that rounding.
        found_ns = round(message.metadata.timestamp.timestamp() * 1e6) * 1000
        _check_time(self.name, target, found_ns + 2_000)

    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        from benchmarks.nats_wire import NatsWire

        self._reader_connections = [await NatsWire.connect(self.server.address)
                                    for _ in range(count)]
        return [functools.partial(self.read_at, wire=c) for c in self._reader_connections]

    async def close_readers(self) -> None:
        for connection in self._reader_connections:
            await connection.close()
        self._reader_connections = []

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        return {
            "lookup.consumer": lambda i: timed_one_by_one(
                self.meter, self.lookup_by_consumer, i.lookup_fractions),
            "round_trip.library": lambda i: self.round_trips_library(i.round_trip_values),
            "point_read.library": lambda i: timed_one_by_one(
                self.meter, self.read_at_library, i.read_offsets),
        }


class RedisStreams(System):
    name = REDIS
    FIELD = b"v"

    def _connect(self) -> Any:
        import redis.asyncio

        host, port = self.server.address.rsplit(":", 1)
        return redis.asyncio.Redis(host=host, port=int(port))

    async def open(self) -> None:
        self.redis = self._connect()
        await self.redis.ping()
        self._reader_connections: list[Any] = []

    async def close(self) -> None:
        await self.redis.aclose()

    async def create(self, run_index: int) -> None:
        self.key = f"peers-{run_index}"
        self.round_trip_key = f"peers-rt-{run_index}"
        await self.redis.delete(self.key, self.round_trip_key)

    async def drop(self) -> None:
        await self.redis.delete(self.key, self.round_trip_key)

    async def produce(self, values: list[bytes]) -> Measurement:
        ids: list[bytes] = []
        key, field_name = self.key, self.FIELD
        with self.meter:
            for i in range(0, len(values), REDIS_PIPELINE_CHUNK):
                pipeline = self.redis.pipeline(transaction=False)
                for value in values[i:i + REDIS_PIPELINE_CHUNK]:
                    pipeline.xadd(key, {field_name: value})
                ids.extend(await pipeline.execute())
        assert len(ids) == len(values) == await self.redis.xlen(key)
        self.ids = ids
        self.first_ms, self.last_ms = int(ids[0].split(b"-")[0]), int(ids[-1].split(b"-")[0])
        return self.meter.measurement(len(values))

    async def consume(self, values: list[bytes]) -> Measurement:
        count = size = 0
        start: bytes | str = "-"
        field_name = self.FIELD
        with self.meter:
            while True:
                entries = await self.redis.xrange(self.key, start, "+", count=REDIS_PAGE_RECORDS)
                if not entries:
                    break
                count += len(entries)
                size += sum(len(fields[field_name]) for _, fields in entries)
                start = b"(" + entries[-1][0]
        assert count == len(values) and size == len(values) * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count)

    async def round_trips(self, values: list[bytes]) -> Measurement:
        key, field_name = self.round_trip_key, self.FIELD
        with self.meter:
            for value in values:
                await self.redis.xadd(key, {field_name: value})
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, connection: Any = None) -> None:
        entry_id = self.ids[offset]
        ((_, fields),) = await (connection or self.redis).xrange(self.key, entry_id, entry_id)
        _check_value(self.name, offset, fields[self.FIELD], self.expected)

    async def lookup(self, fraction: float) -> None:
        target = self.first_ms + int(fraction * (self.last_ms - self.first_ms))
        ((entry_id, _),) = await self.redis.xrange(self.key, target, "+", count=1)
        _check_time(self.name, target, int(entry_id.split(b"-")[0]))

    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        self._reader_connections = [self._connect() for _ in range(count)]
        return [functools.partial(self.read_at, connection=c) for c in self._reader_connections]

    async def close_readers(self) -> None:
        for connection in self._reader_connections:
            await connection.aclose()
        self._reader_connections = []
