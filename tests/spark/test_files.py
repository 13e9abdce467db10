"""File mode: reading log directories from disk, one task per segment, without a server."""

from __future__ import annotations

import shutil
import signal
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stratalog.client import ProducerRecord, SyncClient, TopicPartition
from stratalog.records import BatchBuilder, CorruptRecordError, iter_batches
from stratalog.spark import DataLossError, OptionError, read_schema
from stratalog.spark.options import parse_read_options
from stratalog.spark.ranges import OffsetRange
from stratalog.spark.segment_files import (
    SegmentPartition,
    find_partitions,
    plan_segments,
    read_segment,
)

from .conftest import STARTUP_TIMEOUT_S, _launch

BASE_TS = 1_700_000_000_000


def load(spark, **options: str):
    builder = spark.read.format("stratalog")
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder.load()


def rows_of(df) -> list[tuple]:
    """Every row as a tuple, in (topic, partition, offset) order (sorted here: an orderBy
    would cost Spark a shuffle)."""
    return sorted(
        (r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["timestamp"],
         r["timestampType"], [(h["key"], h["value"]) for h in r["headers"]])
        for r in df.collect()
    )


def test_file_mode_equals_server_mode(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=2, configs={"segment.bytes": "2048"})
    for partition in range(2):
        for start in range(0, 120, 10):
            client.produce(topic, partition, [
                ProducerRecord(f"value-{partition}-{i}".encode() * 5,
                               key=None if i % 4 == 0 else f"k{i % 3}".encode(),
                               timestamp_ms=BASE_TS + i,
                               headers=[("i", str(i).encode())] if i % 2 else [])
                for i in range(start, start + 10)
            ], compression="lz4" if start % 20 else "none")
    segments = sorted(server.data_dir.glob(f"{topic}-*/*.log"))
    assert len(segments) > 4  # several segments per partition
    from_server = load(spark, target=server.target, subscribe=topic, includeHeaders="true")
    from_files = load(spark, path=str(server.data_dir), subscribe=topic, includeHeaders="true")
    assert from_files.schema == read_schema(True)
    assert from_files.rdd.getNumPartitions() == len(segments)  # one task per segment
    expected = rows_of(from_server)
    assert len(expected) == 240
    assert rows_of(from_files) == expected
    # Offsets select the same rows in both modes.
    bounds = {
        "startingOffsets": f'{{"{topic}":{{"0":15,"1":-2}}}}',
        "endingOffsets": f'{{"{topic}":{{"0":101,"1":-1}}}}',
    }
    ranged_server = load(spark, target=server.target, subscribe=topic, includeHeaders="true",
                         **bounds)
    ranged_files = load(spark, path=str(server.data_dir), subscribe=topic,
                        includeHeaders="true", **bounds)
    assert rows_of(ranged_files) == rows_of(ranged_server)
    assert len(rows_of(ranged_files)) == 86 + 120
    # One partition directory as the path.
    single = load(spark, path=str(server.data_dir / f"{topic}-1"))
    assert sorted(r["offset"] for r in single.select("offset").collect()) == list(range(120))


def test_kafka_written_log_directory(spark, kafka_written_dir, tmp_path):
    log_dir = tmp_path / "kafka-logs"
    for partition, (name, base) in enumerate(
        [("metadata-a-00000000000000000000.log", 0), ("metadata-b-00000000000000000001.log", 1)]
    ):
        directory = log_dir / f"__cluster_metadata-{partition}"
        directory.mkdir(parents=True)
        shutil.copy(kafka_written_dir / name, directory / f"{base:020d}.log")
    expected = []
    for partition in range(2):
        segment = next((log_dir / f"__cluster_metadata-{partition}").glob("*.log"))
        for header, records in iter_batches(segment.read_bytes()):
            if not header.is_control:
                expected += [(partition, r.offset, r.key, r.value, r.timestamp) for r in records]
    df = load(spark, path=str(log_dir))
    rows = df.collect()
    got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows)
    assert got == [e[:4] for e in expected]
    assert [g[1] for g in got] == [0, 1, 2, 3, 1, 2, 3]
    assert {r["topic"] for r in rows} == {"__cluster_metadata"}


def _segment(directory: Path, base_offset: int, count: int, *, batches: int = 1) -> Path:
    """A segment of ``batches`` batches of ``count`` records each, starting at base_offset."""
    data = b""
    offset = base_offset
    for _ in range(batches):
        builder = BatchBuilder(base_offset=offset)
        for i in range(count):
            builder.append(BASE_TS + offset + i, None, f"r{offset + i}".encode())
        data += builder.build()
        offset += count
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(data)
    return path


def test_segment_reads_without_spark(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    first = _segment(directory, 0, 5, batches=2)
    last = _segment(directory, 10, 5)
    # The log directory's checkpoint raises the log start offset above the first segment.
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n1\nt 0 3\n")
    # read_uncommitted reads the newest segment to its end when the task runs (None) ...
    options = parse_read_options({"path": str(tmp_path), "isolationLevel": "read_uncommitted"},
                                 streaming=False)
    tasks = plan_segments(options)
    assert [(t.path, t.offset_range.from_offset, t.offset_range.until_offset, t.is_last)
            for t in tasks] == [(str(first), 3, 10, False), (str(last), 10, None, True)]
    # ... read_committed to the last stable offset found at planning (here the end: no
    # transaction), with no aborted transaction to drop.
    committed = plan_segments(parse_read_options({"path": str(tmp_path)}, streaming=False))
    assert [(t.offset_range.from_offset, t.offset_range.until_offset, t.aborted)
            for t in committed] == [(3, 10, ()), (10, 15, ())]
    offsets = [o for t in tasks for b in read_segment(t) for o in b.column("offset").to_pylist()]
    assert offsets == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    # A torn tail ends the active segment's read; elsewhere it is corruption, named.
    with last.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0f\x00\x00\x01\x00\x01")
    assert sum(b.num_rows for b in read_segment(tasks[1])) == 5
    torn = SegmentPartition(OffsetRange("t", 0, 10, None), str(last), is_last=False,
                            include_headers=False)
    with pytest.raises(CorruptRecordError, match=f"{last}: partial record batch"):
        list(read_segment(torn))
    # Zeros where the next batch would be (a preallocated tail) end the read too.
    zeros = _segment(tmp_path, 20, 3)
    with zeros.open("ab") as f:
        f.write(bytes(4096))
    zero_task = SegmentPartition(OffsetRange("t", 0, 20, None), str(zeros), is_last=True,
                                 include_headers=False)
    assert sum(b.num_rows for b in read_segment(zero_task)) == 3
    # A flipped byte fails the CRC check, naming the file and position.
    data = bytearray(first.read_bytes())
    data[70] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match=f"{first}: record batch at position 0 .*CRC"):
        list(read_segment(tasks[0]))
    # Starting below the log start offset is data loss.
    below = parse_read_options(
        {"path": str(tmp_path), "startingOffsets": '{"t":{"0":1}}'}, streaming=False
    )
    with pytest.raises(DataLossError, match="below its log start offset 3"):
        plan_segments(below)


def test_bad_paths_and_file_mode_options(tmp_path):
    with pytest.raises(OptionError, match="is not a directory"):
        plan_segments(parse_read_options({"path": str(tmp_path / "nope")}, streaming=False))
    with pytest.raises(OptionError, match="holds no partition directory"):
        plan_segments(parse_read_options({"path": str(tmp_path)}, streaming=False))
    (tmp_path / "t-0").mkdir()
    with pytest.raises(OptionError, match="option 'subscribe': topic 'u' has no partition"):
        plan_segments(parse_read_options({"path": str(tmp_path), "subscribe": "u"},
                                         streaming=False))
    with pytest.raises(OptionError, match="option 'startingTimestamp': is not supported in file"):
        parse_read_options({"path": str(tmp_path), "startingTimestamp": "5"}, streaming=False)
    with pytest.raises(OptionError, match="option 'path': and 'target' cannot both be set"):
        parse_read_options({"path": str(tmp_path), "target": "h:1"}, streaming=False)
    with pytest.raises(OptionError, match="option 'path': file mode reads only in batch"):
        parse_read_options({"path": str(tmp_path)}, streaming=True)


def test_file_mode_reads_names_and_checkpoints_with_the_servers_definitions():
    # One parser for the server's names and checkpoint text: the reader imports the very objects
    # the storage engine reads and writes them with.
    from stratalog.records import log_layout
    from stratalog.server.storage import checkpoints, topic_names
    from stratalog.spark import segment_files

    assert segment_files.parse_offset_checkpoint is log_layout.parse_offset_checkpoint
    assert checkpoints.parse_offset_checkpoint is log_layout.parse_offset_checkpoint
    assert segment_files.parse_partition_dir_name is log_layout.parse_partition_dir_name
    assert topic_names.log_layout is log_layout
    assert segment_files.offset_from_file_name is log_layout.offset_from_file_name


def test_partition_directories_are_those_the_server_loads(tmp_path):
    for name in ("t-0", "t-1", "t-007", "t-+2", "t-1.0123456789abcdef0123456789abcdef-delete",
                 "t-3.0123456789abcdef0123456789abcdef-future", "..-4", "t_x-2147483648"):
        (tmp_path / name).mkdir()
        _segment(tmp_path / name, 0, 1)
    (tmp_path / "t-1" / "5.log").write_bytes(b"")  # not a segment name: ignored, as before
    (tmp_path / "t-1" / "00000000000000000000.log.deleted").write_bytes(b"")
    found = find_partitions(str(tmp_path), None)
    # The server's parse_partition_dir_name refuses "007", "+2", "..", 2^31 and the special forms.
    assert list(found) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert [base for base, _ in found[TopicPartition("t", 1)].segments] == [0]


def test_a_checkpoint_kafka_would_refuse_is_ignored_with_a_warning(tmp_path, caplog):
    directory = tmp_path / "t-0"
    directory.mkdir()
    _segment(directory, 0, 5)
    # Two entries announced, one present: Kafka (and the server at startup) refuse the file.
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n2\nt 0 3\n")
    with caplog.at_level("WARNING", logger="stratalog.spark.segment_files"):
        found = find_partitions(str(tmp_path), None)
    assert found[TopicPartition("t", 0)].log_start_offset == 0
    assert "Expected [2] entries, but found [1]" in caplog.text
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n1\nt 0 3\n")
    assert find_partitions(str(tmp_path), None)[TopicPartition("t", 0)].log_start_offset == 3


def test_a_timestamp_past_int64_is_read_in_file_mode_and_through_the_server(
    spark, tmp_path, batch_with_timestamp_delta
):
    # A log written before stratalog refused such records (issue 13, defect 5): the probe's
    # two batches whose record timestamp (base + delta) leaves int64, put on disk behind the
    # server's back. Kafka's reader wraps the sum to 64 bits, far outside what Spark's
    # timestamps hold: the rows come with a null timestamp, in both modes, where the read used
    # to fail with CorruptRecordError.
    data_dir = tmp_path / "data"
    server = _launch(data_dir)
    with SyncClient(server.target) as client:
        client.wait_ready(STARTUP_TIMEOUT_S)
        client.create_topic("wrapped")
        client.produce("wrapped", 0, [ProducerRecord(b"good", timestamp_ms=BASE_TS)])
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(30) == 0, server.log_text()[-4000:]
    with (data_dir / "wrapped-0" / f"{0:020d}.log").open("ab") as segment:
        for offset, (base, delta) in enumerate([(-(2**63) + 1, -5), (2**63 - 2, 5)], start=1):
            bad = bytearray(batch_with_timestamp_delta(base, delta))
            struct.pack_into(">q", bad, 0, offset)  # its base offset (outside the CRC)
            segment.write(bad)
    expected = [(0, b"good", datetime.fromtimestamp(BASE_TS / 1000, UTC).replace(tzinfo=None)),
                (1, b"v", None), (2, b"v", None)]

    def rows(df) -> list[tuple]:
        return sorted((r["offset"], r["value"], r["timestamp"]) for r in df.collect())

    server = _launch(data_dir)
    try:
        assert rows(load(spark, target=server.target, subscribe="wrapped")) == expected
    finally:
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0, server.log_text()[-4000:]
    assert rows(load(spark, path=str(data_dir), subscribe="wrapped")) == expected
