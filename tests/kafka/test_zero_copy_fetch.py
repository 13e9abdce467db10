"""Zero-copy Fetch (storage/file_region.py, kafka/connection.py): a plaintext Kafka Fetch of 64 KiB
or more is sent from the segment files, and must carry exactly the bytes the gRPC fetch returns
for the same read — across a segment roll, and after retention deleted the first segment."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
import uuid
from pathlib import Path

from stratalog.client import FetchFormat, SyncClient
from stratalog.records.builder import build_batch

# The benchmarks' asyncio Kafka client (benchmarks/kafka_wire.py) is the one with a zero-copy
# reader's timing control; benchmarks/ is not a package on the test path (as in
# tests/unit/benchmarks/).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.kafka_wire import KafkaWire, first_value_at  # noqa: E402

RECORDS_PER_BATCH = 64
VALUE_BYTES = 1040  # ~66 KiB batches: every fetch below is a region (REGION_BYTES_MIN: 64 KiB)
BATCHES = 48  # ~3 MiB: three segments of 1 MiB
OFFSET_OUT_OF_RANGE = 1
WAIT_S = 30.0


def _value(offset: int) -> bytes:
    return offset.to_bytes(8, "big") * (VALUE_BYTES // 8)


def _fill(client: SyncClient, topic: str, segment_bytes: int = 1 << 20,
          batches: int = BATCHES) -> None:
    client.create_topic(topic, 1, {"segment.bytes": str(segment_bytes)})
    t0 = int(time.time() * 1000)  # now: retention.ms (7 days) must not take the records
    for b in range(batches):
        first = b * RECORDS_PER_BATCH
        batch = build_batch([(t0 + first + i, None, _value(first + i), ())
                             for i in range(RECORDS_PER_BATCH)])
        client.produce(topic, 0, record_batches=batch, acks=1)


async def _kafka_fetches(bootstrap: str, topic: str, reads: list[tuple[int, int]]
                         ) -> list[object]:
    wire = await KafkaWire.connect(bootstrap)
    try:
        return [await wire.fetch_at(topic, 0, offset, max_bytes) for offset, max_bytes in reads]
    finally:
        await wire.close()


def _segment_bases(server: object, topic: str) -> list[int]:
    directory = server.data_dir / f"{topic}-0"  # type: ignore[attr-defined]
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def _compare(server: object, client: SyncClient, topic: str, reads: list[tuple[int, int]]
             ) -> None:
    answers = asyncio.run(_kafka_fetches(server.kafka_bootstrap, topic, reads))  # type: ignore[attr-defined]
    for (offset, max_bytes), answer in zip(reads, answers, strict=True):
        grpc = client.fetch_by_offset(topic, 0, offset, max_bytes=max_bytes,
                                      fetch_format=FetchFormat.RECORD_BATCHES)
        assert answer.records == grpc.record_batches, (offset, max_bytes)
        assert len(answer.records) >= 64 * 1024
        assert first_value_at(answer.records, offset) == _value(offset)
        assert answer.high_watermark == BATCHES * RECORDS_PER_BATCH


def test_a_zero_copy_fetch_returns_the_grpc_fetch_s_bytes_across_rolls_and_deletion(
        start_server):
    # Retention checked every 100 ms (Kafka's log.retention.check.interval.ms; 5 min default).
    server = start_server(None, "--set", "log.retention.check.interval.ms=100")
    topic = f"zc-{uuid.uuid4().hex[:10]}"
    end = BATCHES * RECORDS_PER_BATCH
    with SyncClient(server.target) as client:
        _fill(client, topic)
        bases = _segment_bases(server, topic)
        assert len(bases) >= 3, bases  # rolled
        # Each read stops at its segment's end: at, before and just past each roll.
        reads = [(0, 1 << 20), (5, 200_000), (end - 1, 1 << 20), (end // 2, 3 << 20)]
        for base in bases[1:]:
            reads += [(base - 1, 1 << 20), (base, 1 << 20), (base + 1, 100_000),
                      (base - RECORDS_PER_BATCH, 300_000)]
        _compare(server, client, topic, reads)

        # Retention deletes the first segment once the log start passed it.
        assert client.delete_records(topic, 0, bases[1]) == bases[1]
        deadline = time.monotonic() + WAIT_S
        while bases[0] in _segment_bases(server, topic):
            assert time.monotonic() < deadline, "the first segment was not deleted"
            time.sleep(0.05)
        _compare(server, client, topic, [(bases[1], 1 << 20), (bases[1] + 3, 500_000),
                                         (bases[2] - 1, 1 << 20), (end - 1, 1 << 20)])

        async def below_the_start() -> int:
            wire = await KafkaWire.connect(server.kafka_bootstrap)
            try:
                answer = await wire.request(wire.fetch_request(topic, 0, 0, 1 << 20), 12)
                return answer.responses[0].partitions[0].error_code
            finally:
                await wire.close()

        assert asyncio.run(below_the_start()) == OFFSET_OUT_OF_RANGE


def test_a_zero_copy_fetch_to_a_slow_reader_waits_for_room_and_sends_it_all(server):
    """A reader with a 4 KiB receive buffer that reads 4 KiB at a time, of an answer twice the
    largest socket send buffer (net.ipv4.tcp_wmem: 4 MiB): the server's sendfile fills the
    socket, waits for it to be writable, and goes on (connection.py)."""
    from kafka.protocol.consumer import FetchResponse

    topic = f"zc-slow-{uuid.uuid4().hex[:8]}"
    fetch_bytes = 8 << 20
    with SyncClient(server.target) as client:
        _fill(client, topic, segment_bytes=1 << 30, batches=130)
        expected = client.fetch_by_offset(topic, 0, 0, max_bytes=fetch_bytes,
                                          fetch_format=FetchFormat.RECORD_BATCHES).record_batches
    request = KafkaWire().fetch_request(topic, 0, 0, fetch_bytes)
    request.with_header(correlation_id=1, client_id="slow")
    host, port = server.kafka_bootstrap.rsplit(":", 1)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(WAIT_S)
        sock.connect((host, int(port)))
        sock.sendall(request.encode(version=12, header=True, framed=True))
        frame = bytearray()
        while len(frame) < 4 or len(frame) < 4 + int.from_bytes(frame[:4], "big"):
            chunk = sock.recv(4096)
            assert chunk, f"the connection closed after {len(frame)} bytes"
            frame += chunk
    # size, correlation id, the flexible header's empty tagged fields, then the body.
    assert int.from_bytes(frame[4:8], "big") == 1
    answer = FetchResponse.decode(bytes(frame[9:]), version=12)
    records = answer.responses[0].partitions[0].records
    assert len(records) > 8_000_000
    assert records == expected


def test_zero_copy_fetches_give_every_descriptor_back(server):
    """Each region holds a duplicate descriptor until its send ends: after 200 fetches, and a
    connection closed in the middle of an answer, the server holds as many as before."""
    topic = f"zc-fds-{uuid.uuid4().hex[:8]}"
    large = f"zc-fds-large-{uuid.uuid4().hex[:8]}"
    fds = Path(f"/proc/{server.process.pid}/fd")
    with SyncClient(server.target) as client:
        _fill(client, topic)
        _fill(client, large, segment_bytes=1 << 30, batches=130)  # answers above 4 MiB
    asyncio.run(_kafka_fetches(server.kafka_bootstrap, topic, [(0, 1 << 20)]))  # warm
    before = len(list(fds.iterdir()))
    reads = [(offset, 1 << 20) for offset in range(0, BATCHES * RECORDS_PER_BATCH, 16)][:200]
    answers = asyncio.run(_kafka_fetches(server.kafka_bootstrap, topic, reads))
    assert all(len(a.records) >= 64 * 1024 for a in answers)

    async def long_poll() -> object:
        # min_bytes above what the partition holds: each read's region is given back before
        # the wait, and the answer after max_wait_ms is the last read's.
        wire = await KafkaWire.connect(server.kafka_bootstrap)
        try:
            return await wire.request(wire.fetch_request(
                topic, 0, 0, 1 << 20, max_wait_ms=200, min_bytes=64 << 20), 12)
        finally:
            await wire.close()

    polled = asyncio.run(long_poll()).responses[0].partitions[0]  # type: ignore[attr-defined]
    assert polled.error_code == 0 and len(polled.records) >= 64 * 1024
    # A reader that goes away mid-answer: a 4 KiB receive buffer, an 8 MiB answer (twice the
    # largest socket send buffer: the server waits for room), then close.
    request = KafkaWire().fetch_request(large, 0, 0, 8 << 20)
    request.with_header(correlation_id=1, client_id="gone")
    host, port = server.kafka_bootstrap.rsplit(":", 1)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(request.encode(version=12, header=True, framed=True))
        assert sock.recv(4)  # the answer began
    # The server notices the closed connection when it next writes (or reads): wait for it.
    deadline = time.monotonic() + WAIT_S
    while len(list(fds.iterdir())) > before:
        assert time.monotonic() < deadline, (
            f"{len(list(fds.iterdir())) - before} descriptors more than before the fetches")
        time.sleep(0.05)
