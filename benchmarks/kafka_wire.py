"""A minimal Kafka client for measuring one request at a time: kafka-python's protocol classes
over one raw asyncio connection.

Intuition: a full client (kafka-python's ``KafkaConsumer``, librdkafka) adds its own batching,
prefetching and threads, so that its latency says more about the client than about the server.
This one does nothing but what a measurement needs: it encodes each request with
``kafka.protocol``'s classes (generated from Kafka's own message schemas), writes it on one
TCP connection, and decodes the answer with the response class; requests may be pipelined (each
answer is matched by its correlation id, and Kafka answers a connection's requests in order).

Helpers for the two hot-path workloads of docs/performance.md ("Issue 28"):

* :meth:`KafkaWire.produce_one`: one record in one batch (``stratalog.records.build_batch``),
  ``acks`` 1 by default, its base offset back;
* :meth:`KafkaWire.fetch_at`: a Fetch of one partition at an offset (the point read: a
  ``partition_max_bytes`` small enough for one batch), the partition's answer back, and
  :func:`first_value_at` to take the value of the record at that offset out of its batches.

Per round trip it does what a real client's hot path does and no more, as nats-py does for a
JetStream publish (its PUB line written by hand, its JSON ack parsed with ``json``): the two
measured requests, Produce v9 and Fetch v12, are written by hand (:func:`produce_frame`,
:func:`fetch_frame`: byte for byte what kafka-python's classes encode, a test checks), one batch
is built with its CRC (``build_batch``), and every answer is decoded in full by kafka-python's
generated decoders, error codes checked. Other requests and versions go through kafka-python's
classes both ways.

Not a general client: no metadata refresh, no retries, no SASL or TLS; the caller names a
partition's leader (a single server here). Concurrency: one event loop; a KafkaWire is not
shared between loops.

Run ``python -m benchmarks.kafka_wire --bootstrap HOST:PORT [--bootstrap HOST:PORT ...]
[--rounds N] [--count N] [--server-pid PID ...]`` for point-read and round-trip figures against
running servers (:func:`measure`; the topics are created through Metadata's auto-creation); with
several servers the rounds alternate between them and the medians are compared with the
first's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import os
import random
import statistics
import struct
import time
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_records

__all__ = ["FETCH_VERSION", "PRODUCE_VERSION", "KafkaWire", "fetch_frame", "first_value_at",
           "produce_frame"]

#: The versions used unless told otherwise: the newest the server serves (both flexible).
PRODUCE_VERSION = 9
FETCH_VERSION = 12

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # size, correlation id
# A request's frame up to its client id: size, api key, version, correlation id, client id length.
_REQUEST_HEAD = struct.Struct(">ihhih")
_PRODUCE_KEY = 0
_FETCH_KEY = 1
# Produce v9's fields after transactional_id: acks, timeout_ms.
_PRODUCE_FIXED = struct.Struct(">hi")
# Fetch v12's fields before its topics: replica_id, max_wait_ms, min_bytes, max_bytes,
# isolation_level, session_id, session_epoch.
_FETCH_FIXED = struct.Struct(">iiiibii")
# A Fetch v12 partition: partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
# log_start_offset, partition_max_bytes.
_FETCH_PARTITION = struct.Struct(">iiqiqi")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str) -> bytes:
    data = value.encode()
    return _uvarint(len(data) + 1) + data


def _request_head(api_key: int, version: int, correlation_id: int, client_id: bytes,
                  body_bytes: int) -> bytes:
    """The size prefix and a flexible (v2) request header: key, version, correlation id, the
    client id (a nullable string with an int16 length in every header version), no tags."""
    size = _REQUEST_HEAD.size - 4 + len(client_id) + 1 + body_bytes
    return (_REQUEST_HEAD.pack(size, api_key, version, correlation_id, len(client_id))
            + client_id + b"\x00")


def produce_frame(correlation_id: int, client_id: str, topic: str, partition: int,
                  records: bytes, acks: int = 1, timeout_ms: int = 30_000) -> list[bytes]:
    """A Produce v9 request of ``records`` to one partition, framed, as pieces to write in
    order (the records are not copied): what kafka-python's ``ProduceRequest`` encodes at
    version 9 with no transactional id.

    Layout (flexible: compact strings, arrays and bytes are uvarint length + 1): header v2;
    transactional_id null (0); acks int16; timeout_ms int32; topic_data [1]: name,
    partition_data [1]: index int32, records; a tag list (0) closing each struct."""
    middle = (b"\x00" + _PRODUCE_FIXED.pack(acks, timeout_ms) + b"\x02"
              + _compact_string(topic) + b"\x02" + _SIZE.pack(partition)
              + _uvarint(len(records) + 1))
    tail = b"\x00\x00\x00"  # the partition's, the topic's and the request's tag lists
    head = _request_head(_PRODUCE_KEY, 9, correlation_id, client_id.encode(),
                         len(middle) + len(records) + len(tail))
    return [head + middle, records, tail]


def fetch_frame(correlation_id: int, client_id: str, topic: str, partition: int, offset: int,
                max_bytes: int, max_wait_ms: int = 0, min_bytes: int = 1,
                isolation_level: int = 0) -> bytes:
    """A Fetch v12 request of one partition at ``offset``, framed: what kafka-python's
    ``FetchRequest`` encodes at version 12 for :meth:`KafkaWire.fetch_request`'s fields.

    Layout: header v2; replica_id -1, max_wait_ms, min_bytes, max_bytes, isolation_level int8,
    session_id 0, session_epoch -1; topics [1]: topic, partitions [1]: partition,
    current_leader_epoch -1, fetch_offset, last_fetched_epoch -1, log_start_offset -1,
    partition_max_bytes (then its tags); the topic's tags; forgotten_topics_data []; rack_id
    ""; the request's tags (no cluster_id)."""
    body = (_FETCH_FIXED.pack(-1, max_wait_ms, min_bytes, max_bytes, isolation_level, 0, -1)
            + b"\x02" + _compact_string(topic) + b"\x02"
            + _FETCH_PARTITION.pack(partition, -1, offset, -1, -1, max_bytes)
            + b"\x00\x00\x01\x01\x00")
    return _request_head(_FETCH_KEY, 12, correlation_id, client_id.encode(), len(body)) + body


class KafkaWire(asyncio.Protocol):
    """One connection to a Kafka listener (module docstring)."""

    def __init__(self, client_id: str = "kafka-wire", library_encoding: bool = False) -> None:
        self.client_id = client_id
        #: Encode Produce v9 and Fetch v12 with kafka-python's classes too (as every other
        #: request is), not by hand: the benchmark's "through the libraries" rows.
        self.library_encoding = library_encoding
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._correlation = 0
        # correlation id -> (response class, version, flexible header, future)
        self._pending: dict[int, tuple[type[ApiMessage], int, bool, asyncio.Future[Any]]] = {}
        self._lost: asyncio.Future[None] | None = None

    @classmethod
    async def connect(cls, bootstrap: str, client_id: str = "kafka-wire",
                      library_encoding: bool = False) -> KafkaWire:
        host, _, port = bootstrap.rpartition(":")
        loop = asyncio.get_running_loop()
        _, wire = await loop.create_connection(lambda: cls(client_id, library_encoding), host,
                                               int(port))
        return wire

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._lost = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= 8:
            size, correlation_id = _HEAD.unpack_from(buffer, start)
            end = start + 4 + size
            if len(buffer) < end:
                break
            response_class, version, flexible, future = self._pending.pop(correlation_id)
            body = start + 8 + (1 if flexible else 0)  # flexible: an empty tagged-field list
            try:
                # A copy: the buffer is reused for the next answers.
                answer = response_class.decode(bytes(buffer[body:end]), version=version)
            except Exception as exc:  # an answer that does not decode fails its request
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(answer)
            start = end
        if start:
            del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        error = exc or ConnectionError("the server closed the connection")
        for *_, future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    # ---------------------------------------------------------------- requests

    def send(self, request: ApiMessage, version: int) -> asyncio.Future[Any]:
        """Write ``request`` at ``version``; a future of its decoded answer (None for an
        acks=0 Produce, which gets none)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionError("not connected")
        self._correlation = correlation_id = (self._correlation + 1) & 0x7FFFFFFF
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        frame = request.encode(version=version, header=True, framed=True)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if getattr(request, "acks", None) == 0:
            future.set_result(None)
        else:
            answer_class, flexible = _answer_of(type(request), version)
            self._pending[correlation_id] = (answer_class, version, flexible, future)
        transport.write(frame)
        return future

    async def request(self, request: ApiMessage, version: int) -> Any:
        return await self.send(request, version)

    def _next_correlation_id(self, response_class: type[ApiMessage], version: int
                             ) -> tuple[int, asyncio.Future[Any]]:
        """A correlation id for a request written by hand, and the future of its answer."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionError("not connected")
        self._correlation = correlation_id = (self._correlation + 1) & 0x7FFFFFFF
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (response_class, version, True, future)
        return correlation_id, future

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            if self._lost is not None:
                await self._lost

    # ---------------------------------------------------------------- helpers

    async def create_topic(self, topic: str) -> int:
        """Make sure ``topic`` exists (a Metadata request that may create it, with the server's
        ``auto_create_topics_enable`` defaults); its error code in the answer."""
        answer = await self.metadata([topic], allow_create=True)
        return answer.topics[0].error_code

    async def metadata(self, topics: list[str] | None = None, allow_create: bool = False
                       ) -> Any:
        wanted = None if topics is None else [
            MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        return await self.request(MetadataRequest(
            topics=wanted, allow_auto_topic_creation=allow_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False), 8)

    def produce_request(self, topic: str, partition: int, records: bytes, acks: int = 1,
                        timeout_ms: int = 30_000) -> ProduceRequest:
        partition_data = ProduceRequest.TopicProduceData.PartitionProduceData(
            index=partition, records=records)
        topic_data = ProduceRequest.TopicProduceData(name=topic, partition_data=[partition_data])
        return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms,
                              topic_data=[topic_data])

    async def produce_one(self, topic: str, partition: int, value: bytes, key: bytes | None = None,
                          acks: int = 1, version: int = PRODUCE_VERSION) -> int:
        """One record in its own batch; its offset (-1 for acks=0).

        Raises:
            RuntimeError: the partition's answer carries an error code.
        """
        batch = build_batch([(int(time.time() * 1000), key, value, ())])
        if version == PRODUCE_VERSION and acks != 0 and not self.library_encoding:
            correlation_id, future = self._next_correlation_id(ProduceResponse, version)
            self._transport.writelines(  # type: ignore[union-attr]
                produce_frame(correlation_id, self.client_id, topic, partition, batch, acks))
            answer = await future
        else:
            answer = await self.request(self.produce_request(topic, partition, batch, acks),
                                        version)
        if answer is None:
            return -1
        result = answer.responses[0].partition_responses[0]
        if result.error_code:
            raise RuntimeError(f"Produce to {topic}-{partition}: error {result.error_code}")
        return result.base_offset

    def fetch_request(self, topic: str, partition: int, offset: int, max_bytes: int,
                      max_wait_ms: int = 0, min_bytes: int = 1,
                      isolation_level: int = 0) -> FetchRequest:
        fetch_partition = FetchRequest.FetchTopic.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)
        fetch_topic = FetchRequest.FetchTopic(topic=topic, partitions=[fetch_partition])
        return FetchRequest(cluster_id=None, replica_id=-1, replica_state=None,
                            max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                            isolation_level=isolation_level, session_id=0, session_epoch=-1,
                            topics=[fetch_topic], forgotten_topics_data=[], rack_id="")

    async def fetch_at(self, topic: str, partition: int, offset: int, max_bytes: int = 1024,
                       version: int = FETCH_VERSION, max_wait_ms: int = 0) -> Any:
        """The partition's answer (``PartitionData``) of a Fetch at ``offset``.

        Raises:
            RuntimeError: the partition's answer carries an error code.
        """
        if version == FETCH_VERSION and not self.library_encoding:
            correlation_id, future = self._next_correlation_id(FetchResponse, version)
            self._transport.write(  # type: ignore[union-attr]
                fetch_frame(correlation_id, self.client_id, topic, partition, offset, max_bytes,
                            max_wait_ms))
            answer = await future
        else:
            answer = await self.request(
                self.fetch_request(topic, partition, offset, max_bytes, max_wait_ms), version)
        if answer.error_code:
            raise RuntimeError(f"Fetch: error {answer.error_code}")
        data = answer.responses[0].partitions[0]
        if data.error_code:
            raise RuntimeError(f"Fetch of {topic}-{partition} at {offset}: error "
                               f"{data.error_code}")
        return data


@functools.cache
def _answer_of(request_class: type[ApiMessage], version: int) -> tuple[type[ApiMessage], bool]:
    """The response class of ``request_class`` and whether its header is flexible at
    ``version`` (ApiVersions' never is, KIP-511)."""
    name = request_class.__name__.replace("Request", "Response")
    answer_class = getattr(importlib.import_module(request_class.__module__), name)
    flexible = bool(answer_class.flexible_version_q(version)) and request_class.API_KEY != 18
    return answer_class, flexible


def first_value_at(records: bytes | memoryview, offset: int) -> bytes | None:
    """The value of the record at ``offset`` in whole batches ``records`` (the first batch may
    start before it). Raises LookupError when no record there."""
    position = 0
    view = memoryview(records)
    while position + 12 <= len(view):
        size = _SIZE.unpack_from(view, position + 8)[0]
        for record in iter_records(view, position, verify_crc=False):
            if record.offset == offset:
                return record.value
        position += 12 + size
    raise LookupError(f"no record at offset {offset} in {len(view)} bytes of batches")


def _process_cpu_s(pid: int | None) -> float:
    """User and system CPU seconds of process ``pid`` (/proc/PID/stat fields 14 and 15);
    0 without one."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(bootstrap: str, topic: str, count: int, rng: random.Random,
                  server_pid: int | None = None) -> dict[str, float]:
    """``count`` produce round trips (acks=1, one record of 100 bytes each, waited for) into
    ``topic``, then ``count`` point reads of those records at random offsets (each the batch
    holding the offset alone: partition_max_bytes 1), each value checked: the rate of the
    first, p50 and p99 µs of both, and this client's CPU µs per request; with ``server_pid``
    (a server on this machine) the server process's too."""
    wire = await KafkaWire.connect(bootstrap)
    try:
        await wire.create_topic(topic)
        values = [rng.randbytes(100) for _ in range(count)]
        produce_s = []
        offsets = []
        server_before, client_before = _process_cpu_s(server_pid), time.process_time()
        for value in values:
            started = time.perf_counter()
            offsets.append(await wire.produce_one(topic, 0, value))
            produce_s.append(time.perf_counter() - started)
        produce_cpu = (_process_cpu_s(server_pid) - server_before,
                       time.process_time() - client_before)
        read_s = []
        server_before, client_before = _process_cpu_s(server_pid), time.process_time()
        for _ in range(count):
            i = rng.randrange(count)
            started = time.perf_counter()
            data = await wire.fetch_at(topic, 0, offsets[i], 1)
            read_s.append(time.perf_counter() - started)
            if first_value_at(data.records, offsets[i]) != values[i]:
                raise AssertionError(f"{bootstrap}: offset {offsets[i]} read a wrong value")
        read_cpu = (_process_cpu_s(server_pid) - server_before,
                    time.process_time() - client_before)
    finally:
        await wire.close()
    produce_s.sort()
    read_s.sort()
    figures = {
        "round_trips_per_s": count / sum(produce_s),
        "round_trip_p50_us": produce_s[count // 2] * 1e6,
        "round_trip_p99_us": produce_s[int(count * 0.99)] * 1e6,
        "point_read_p50_us": read_s[count // 2] * 1e6,
        "point_read_p99_us": read_s[int(count * 0.99)] * 1e6,
        "round_trip_client_cpu_us": produce_cpu[1] / count * 1e6,
        "point_read_client_cpu_us": read_cpu[1] / count * 1e6,
    }
    if server_pid is not None:
        figures["round_trip_server_cpu_us"] = produce_cpu[0] / count * 1e6
        figures["point_read_server_cpu_us"] = read_cpu[0] / count * 1e6
    return figures


async def _main(args: argparse.Namespace) -> None:
    rng = random.Random(28)
    runs: dict[str, list[dict[str, float]]] = {b: [] for b in args.bootstrap}
    pids = dict(zip(args.bootstrap, args.server_pid or (), strict=False))
    for round_index in range(args.rounds):
        # Alternating order: neither server always goes first.
        order = args.bootstrap if round_index % 2 == 0 else args.bootstrap[::-1]
        for bootstrap in order:
            topic = f"{args.topic}-{round_index}"
            runs[bootstrap].append(await measure(bootstrap, topic, args.count, rng,
                                                 pids.get(bootstrap)))
    first = args.bootstrap[0]
    medians = {b: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
               for b, rs in runs.items()}
    print(f"medians of {args.rounds} rounds of {args.count} (ratios: against {first})")
    for bootstrap, figures in medians.items():
        cells = []
        for key, value in figures.items():
            base = medians[first].get(key)
            cells.append(f"{key} {value:,.0f}" + (f" (x{value / base:.2f})"
                                                   if bootstrap != first and base else ""))
        print(f"{bootstrap}: " + ", ".join(cells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, action="append",
                        help="HOST:PORT of a Kafka listener; repeat to compare servers in one"
                             " run (rounds alternate between them)")
    parser.add_argument("--server-pid", type=int, action="append",
                        help="the process id of each --bootstrap's server, in the same order"
                             " (a server on this machine): its CPU per request too")
    parser.add_argument("--topic", default="kafka-wire")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_main(args))
    else:
        uvloop.run(_main(args))


if __name__ == "__main__":
    main()
