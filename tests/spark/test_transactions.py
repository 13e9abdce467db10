"""Exactly-once through the connector: read_committed reads (server, streaming, files) and
transactional writes, against the live server and, for file mode, hand-made directories.

Transactions are written with the Broker RPCs themselves (``RawTransactionalProducer``:
InitProducerId, AddPartitionsToTxn, Produce with producer fields, EndTxn), so that a test
decides exactly which transaction is still open while it reads.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructType

from stratalog.client import FetchFormat, IsolationLevel, SyncClient
from stratalog.records import (
    BatchBuilder,
    ControlRecordType,
    EndTransactionMarker,
    decode_control_key,
    iter_batches,
)
from stratalog.records.log_layout import (
    ProducerSnapshotEntry,
    pack_producer_snapshot,
    pack_txn_index_entry,
)
from stratalog.spark import OptionError, TransactionCommitError
from stratalog.spark.batch_reader import StratalogBatchReader, plan_server_ranges
from stratalog.spark.file_transactions import AbortedTxn, scan_transactions
from stratalog.spark.options import parse_read_options, parse_write_options
from stratalog.spark.segment_files import plan_segments, read_segment
from stratalog.spark.write_transactions import (
    WriteCommitMessage,
    abort_transactions,
    commit_transactions,
)
from stratalog.spark.writer import plan_write, write_batches
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

# Record timestamps a minute in the past: markers carry the server's clock, and records older
# than segment.ms (7 days) would roll a segment at every append (Kafka's rule).
T0 = int(time.time() * 1000) - 60_000
RPC_TIMEOUT_S = 30
QUERY_TIMEOUT_S = 240
#: Values are padded so that a few batches fill a 2048-byte segment: the topics below roll
#: often, so transactions span segments and the server writes snapshots and .txnindex files.
PADDING = 300


def padded(name: str) -> bytes:
    return name.encode().ljust(PADDING, b".")


def name_of(value: bytes) -> str:
    return value.rstrip(b".").decode()


class RawTransactionalProducer:
    """A transactional producer driven by the Broker RPCs, as a client library drives them.

    One sequence per partition from 0 (a new epoch); AddPartitionsToTxn before the first
    batch to a partition of each transaction. Not thread-safe.
    """

    def __init__(self, target: str, transactional_id: str) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = broker_pb2_grpc.BrokerStub(self._channel)
        self.transactional_id = transactional_id
        # The server's largest timeout (15 min): the open transactions of these tests must not
        # be aborted by the server while Spark queries run on a loaded machine.
        response = self._stub.InitProducerId(pb.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=900_000),
            timeout=RPC_TIMEOUT_S)
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        self._sequences: dict[tuple[str, int], int] = {}
        self._added: set[tuple[str, int]] = set()

    def _ids(self) -> dict[str, object]:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch}

    def send(self, topic: str, partition: int, names: list[str]) -> list[int]:
        """Send one batch of padded values; returns their offsets."""
        if (topic, partition) not in self._added:
            self._stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
                **self._ids(), partitions=[pb.TopicPartition(topic=topic, partition=partition)]),
                timeout=RPC_TIMEOUT_S)
            self._added.add((topic, partition))
        sequence = self._sequences.get((topic, partition), 0)
        self._sequences[(topic, partition)] = sequence + len(names)
        builder = BatchBuilder(producer_id=self.producer_id, producer_epoch=self.epoch,
                               base_sequence=sequence, is_transactional=True)
        for index, name in enumerate(names):
            builder.append(T0 + index, None, padded(name), ())
        response = self._stub.Produce(pb.ProduceRequest(
            topic=topic, partition=partition, record_batches=builder.build()),
            timeout=RPC_TIMEOUT_S)
        return list(range(response.base_offset, response.last_offset + 1))

    def end(self, *, commit: bool) -> None:
        self._stub.EndTxn(pb.EndTxnRequest(**self._ids(), commit=commit), timeout=RPC_TIMEOUT_S)
        self._added.clear()

    def close(self) -> None:
        self._channel.close()


def send_plain(client: SyncClient, topic: str, partition: int, names: list[str]) -> list[int]:
    """Non-transactional records (one batch); returns their offsets."""
    result = client.produce(topic, partition, [padded(n) for n in names])
    return list(range(result.base_offset, result.last_offset + 1))


@dataclass
class Scenario:
    """A two-partition topic holding committed, aborted and open transactions.

    ``committed``: (partition, offset, name) of what read_committed must show while ``open``
    (a producer with a transaction on partition 0) is open; ``everything``: every data record
    (read_uncommitted); ``after_commit``: what read_committed adds once ``open`` commits.
    """

    topic: str
    open: RawTransactionalProducer
    committed: set[tuple[int, int, str]] = field(default_factory=set)
    everything: set[tuple[int, int, str]] = field(default_factory=set)
    after_commit: set[tuple[int, int, str]] = field(default_factory=set)
    markers: set[tuple[int, int]] = field(default_factory=set)

    def commit_open(self) -> None:
        self.open.end(commit=True)
        self.committed |= self.after_commit


@pytest.fixture
def scenario(client, server, topic_name):
    """Per partition p: plain records; A (committed) and B (aborted) interleaved, with plain
    records between them; then on partition 0 only, C opens and plain records follow it (above
    the LSO: hidden from read_committed until C ends). Segments of 2048 bytes, so the
    transactions cross segment boundaries."""
    topic = topic_name()
    client.create_topic(topic, partitions=2, configs={"segment.bytes": "2048"})
    a = RawTransactionalProducer(server.target, f"{topic}-A")
    b = RawTransactionalProducer(server.target, f"{topic}-B")
    c = RawTransactionalProducer(server.target, f"{topic}-C")
    s = Scenario(topic, c)

    def record(offsets: list[int], partition: int, names: list[str], *, visible: bool) -> None:
        rows = {(partition, o, n) for o, n in zip(offsets, names, strict=True)}
        s.everything |= rows
        if visible:
            s.committed |= rows

    for p in range(2):
        names = [f"p{p}-plain-0", f"p{p}-plain-1"]
        record(send_plain(client, topic, p, names), p, names, visible=True)
        names = [f"A{p}-0", f"A{p}-1"]
        record(a.send(topic, p, names), p, names, visible=True)
        names = [f"B{p}-0"]
        record(b.send(topic, p, names), p, names, visible=False)
        names = [f"A{p}-2"]
        record(a.send(topic, p, names), p, names, visible=True)
        names = [f"p{p}-plain-2"]
        record(send_plain(client, topic, p, names), p, names, visible=True)
    a.end(commit=True)
    for p in range(2):
        names = [f"B{p}-1", f"B{p}-2"]
        record(b.send(topic, p, names), p, names, visible=False)
    b.end(commit=False)
    names = ["C0-0", "C0-1"]
    offsets = c.send(topic, 0, names)
    record(offsets, 0, names, visible=False)
    s.after_commit |= {(0, o, n) for o, n in zip(offsets, names, strict=True)}
    # Enough batches after the markers that both partitions roll again: their newest snapshots
    # lie above the markers (partition 0's with C open in it), so file mode needs the .txnindex.
    for i in range(6):
        names = [f"p0-plain-after-open-{i}"]
        offsets = send_plain(client, topic, 0, names)
        record(offsets, 0, names, visible=False)
        s.after_commit |= {(0, offsets[0], names[0])}
        names = [f"p1-plain-{3 + i}"]
        record(send_plain(client, topic, 1, names), 1, names, visible=True)
    # Every offset not holding a data record is a marker (two per partition so far).
    for p in range(2):
        end = client.list_offsets(topic, p, -1).offset
        held = {o for q, o, _ in s.everything if q == p}
        s.markers |= {(p, o) for o in range(end) if o not in held}
    assert len(s.markers) == 4
    assert s.committed < s.everything
    yield s
    for producer in (a, b, c):
        producer.close()


def rows_of(df) -> set[tuple[int, int, str]]:
    return {(r["partition"], r["offset"], name_of(r["value"])) for r in df.collect()}


def load(spark, **options: str):
    builder = spark.read.format("stratalog")
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder.load()


def read_in_process(options: dict[str, str]) -> set[tuple[int, int, str]]:
    """A batch query planned and read without Spark (the reader's own methods)."""
    reader = StratalogBatchReader(parse_read_options(options, streaming=False))
    return {
        (p, o, name_of(v))
        for task in reader.partitions()
        for batch in reader.read(task)
        for p, o, v in zip(batch.column("partition").to_pylist(),
                           batch.column("offset").to_pylist(),
                           batch.column("value").to_pylist(), strict=True)
    }


# ------------------------------------------------------------------------------ server reads


def test_batch_reads_show_committed_records_by_default_and_everything_uncommitted(
    spark, client, server, scenario
):
    topic = scenario.topic
    committed = rows_of(load(spark, target=server.target, subscribe=topic))
    assert committed == scenario.committed
    # Spark's spelling of the option is accepted as an alias.
    uncommitted = rows_of(load(spark, target=server.target, subscribe=topic,
                               **{"kafka.isolation.level": "read_uncommitted"}))
    assert uncommitted == scenario.everything
    # Offsets are Kafka's: the markers' offsets are holes at both levels.
    assert not {(p, o) for p, o, _ in uncommitted} & scenario.markers
    # Once C commits, its records (and the plain record after it) become visible.
    scenario.commit_open()
    assert rows_of(load(spark, target=server.target, subscribe=topic,
                        isolationLevel="READ_COMMITTED")) == scenario.committed


def test_read_committed_ends_at_the_last_stable_offset(client, server, scenario):
    topic = scenario.topic
    stable = min(o for p, o, n in scenario.everything if n == "C0-0")
    log_end = client.list_offsets(topic, 0, -1).offset
    base = {"target": server.target, "subscribe": topic}
    ranges = plan_server_ranges(parse_read_options(base, streaming=False))
    assert {(r.partition, r.until_offset) for r in ranges} == {
        (0, stable), (1, client.list_offsets(topic, 1, -1).offset)}
    # An ending offset given above the LSO comes down to it: nothing uncommitted is read.
    ending = f'{{"{topic}":{{"0":{log_end},"1":-1}}}}'
    assert read_in_process({**base, "endingOffsets": ending}) == scenario.committed
    uncommitted = read_in_process({**base, "endingOffsets": ending,
                                   "isolationLevel": "read_uncommitted"})
    assert uncommitted == scenario.everything
    # A start above the LSO with the end at it is refused, saying why.
    starting = f'{{"{topic}":{{"0":{stable + 1},"1":0}}}}'
    with pytest.raises(OptionError, match=(
            f"option 'startingOffsets': starting offset {stable + 1} of {topic}-0 is after its "
            f"ending offset {stable} .*last stable offset")):
        plan_server_ranges(parse_read_options({**base, "startingOffsets": starting},
                                              streaming=False))
    # Split into many small tasks, each task's aborted transactions still apply.
    assert read_in_process({**base, "maxRecordsPerPartition": "2"}) == scenario.committed


def test_available_now_stream_reads_an_open_transaction_after_its_commit(
    spark, server, scenario, tmp_path
):
    topic = scenario.topic
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run() -> None:
        query = (
            spark.readStream.format("stratalog").option("target", server.target)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "7").load()
            .select("partition", "offset", "value")
            .writeStream.format("parquet").option("path", output)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        )
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not finish"
        assert query.exception() is None

    run()
    first = [(r[0], r[1], name_of(r[2])) for r in spark.read.parquet(output).collect()]
    assert sorted(first) == sorted(scenario.committed)
    scenario.commit_open()
    run()
    both = [(r[0], r[1], name_of(r[2])) for r in spark.read.parquet(output).collect()]
    assert sorted(both) == sorted(scenario.committed)  # each record once, C's added
    assert len(both) == len(set(both))


# -------------------------------------------------------------------------------- file mode


def partition_dirs(server, topic: str) -> list[Path]:
    return sorted(server.data_dir.glob(f"{topic}-*"))


def test_file_mode_reads_what_the_server_reads_at_both_levels(
    spark, client, server, scenario, tmp_path, caplog
):
    topic = scenario.topic
    segments = sorted(server.data_dir.glob(f"{topic}-0/*.log"))
    assert len(segments) > 2, "the scenario must span segments"
    for p in range(2):
        # A snapshot above the partition's markers: the aborts below it come from .txnindex.
        snapshots = [int(f.name.split(".")[0])
                     for f in server.data_dir.glob(f"{topic}-{p}/*.snapshot")]
        assert max(snapshots) > max(o for q, o in scenario.markers if q == p)
    assert any(p.stat().st_size for p in server.data_dir.glob(f"{topic}-*/*.txnindex"))
    files = {"path": str(server.data_dir), "subscribe": topic}
    assert rows_of(load(spark, **files)) == scenario.committed
    assert read_in_process({**files, "isolationLevel": "read_uncommitted"}) == (
        scenario.everything)
    # The LSO the files imply is C's first offset, as the server's.
    stable = client.list_offsets(topic, 0, -1, isolation_level=IsolationLevel.READ_COMMITTED)
    tasks = plan_segments(parse_read_options(files, streaming=False))
    assert max(t.offset_range.until_offset for t in tasks if t.offset_range.partition == 0) == (
        stable.offset)
    # A copy without its snapshots (or with a damaged one) gives the same: the walk starts
    # earlier and finds the aborted transactions from the markers.
    copy = tmp_path / "copy"
    for directory in partition_dirs(server, topic):
        shutil.copytree(directory, copy / directory.name)
    expected = {d.name: scan_transactions(_segments(d)) for d in sorted(copy.iterdir())}
    for snapshot in copy.glob("*/*.snapshot"):
        snapshot.write_bytes(snapshot.read_bytes()[:-3])  # torn: its CRC fails
    with caplog.at_level(logging.WARNING, logger="stratalog.spark.file_transactions"):
        assert {d.name: scan_transactions(_segments(d)) for d in sorted(copy.iterdir())} == (
            expected)
    assert "ignoring producer snapshot" in caplog.text
    for snapshot in copy.glob("*/*.snapshot"):
        snapshot.unlink()
    assert {d.name: scan_transactions(_segments(d)) for d in sorted(copy.iterdir())} == expected
    assert read_in_process({"path": str(copy)}) == scenario.committed
    # After C commits, the files show its records too.
    scenario.commit_open()
    assert read_in_process(files) == scenario.committed


def _segments(directory: Path) -> list[tuple[int, str]]:
    return sorted((int(p.name.split(".")[0]), str(p)) for p in directory.glob("*.log"))


def _txn_batch(base_offset: int, producer_id: int, names: list[str]) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, producer_id=producer_id, producer_epoch=0,
                           base_sequence=0, is_transactional=True)
    for i, name in enumerate(names):
        builder.append(T0 + i, None, name.encode(), ())
    return builder.build()


def _plain_batch(base_offset: int, names: list[str]) -> bytes:
    builder = BatchBuilder(base_offset=base_offset)
    for i, name in enumerate(names):
        builder.append(T0 + i, None, name.encode(), ())
    return builder.build()


def _marker(offset: int, producer_id: int, kind: ControlRecordType) -> bytes:
    marker = EndTransactionMarker(kind, 0)
    builder = BatchBuilder(base_offset=offset, producer_id=producer_id, producer_epoch=0,
                           is_transactional=True, is_control=True)
    builder.append(T0, marker.encode_key(), marker.encode_value(), ())
    return builder.build()


def test_file_transactions_from_a_snapshot_the_txnindex_and_the_markers(tmp_path):
    """Hand-made files, the module docstring's example extended: producer 7's transaction is
    open in the snapshot at 10 and aborted at 12 (marker after the snapshot, so no .txnindex
    entry is needed); producer 8's was aborted at 5 (below the snapshot: only its .txnindex
    entry says so); producer 9 opens a transaction at 14 that has no marker (the LSO)."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    first = (_txn_batch(0, 8, ["8a", "8b"]) + _txn_batch(2, 7, ["7a"]) + _plain_batch(3, ["x3"])
             + _txn_batch(4, 8, ["8c"]) + _marker(5, 8, ControlRecordType.ABORT)
             + _plain_batch(6, ["x6", "x7", "x8", "x9"]))
    (directory / f"{0:020d}.log").write_bytes(first)
    (directory / f"{0:020d}.txnindex").write_bytes(pack_txn_index_entry(8, 0, 5, 2))
    second = (_txn_batch(10, 7, ["7b"]) + _plain_batch(11, ["x11"])
              + _marker(12, 7, ControlRecordType.ABORT) + _plain_batch(13, ["x13"])
              + _txn_batch(14, 9, ["9a"]) + _plain_batch(15, ["x15"]))
    (directory / f"{10:020d}.log").write_bytes(second)
    (directory / f"{10:020d}.snapshot").write_bytes(pack_producer_snapshot([
        ProducerSnapshotEntry(7, 0, 0, 2, 0, T0, 0, 2),   # transaction open from offset 2
        ProducerSnapshotEntry(8, 0, 2, 5, 0, T0, 0, -1),  # none open
    ]))
    segments = _segments(directory)
    found = scan_transactions(segments)
    assert found.last_stable_offset == 14
    assert found.aborted == (AbortedTxn(8, 0, 5), AbortedTxn(7, 2, 12))
    options = parse_read_options({"path": str(directory)}, streaming=False)
    tasks = plan_segments(options)
    assert [(t.offset_range.from_offset, t.offset_range.until_offset, t.aborted)
            for t in tasks] == [(0, 10, ((8, 0), (7, 2))), (10, 14, ((7, 2),))]
    names = [v.decode() for t in tasks for b in read_segment(t)
             for v in b.column("value").to_pylist()]
    assert names == ["x3", "x6", "x7", "x8", "x9", "x11", "x13"]
    # Without the snapshot the walk starts at offset 0 and finds the same from the markers.
    (directory / f"{10:020d}.snapshot").unlink()
    assert scan_transactions(segments) == found
    # A snapshot that lies past the log, or inside a batch, is not used.
    (directory / f"{40:020d}.snapshot").write_bytes(pack_producer_snapshot([]))
    (directory / f"{7:020d}.snapshot").write_bytes(pack_producer_snapshot([]))
    assert scan_transactions(segments) == found
    # A transaction that commits is visible; read_uncommitted shows the aborted ones as well.
    with (directory / f"{10:020d}.log").open("ab") as log:
        log.write(_marker(16, 9, ControlRecordType.COMMIT))
    assert scan_transactions(segments).last_stable_offset == 17
    everything = [v.decode() for t in plan_segments(parse_read_options(
        {"path": str(directory), "isolationLevel": "read_uncommitted"}, streaming=False))
        for b in read_segment(t) for v in b.column("value").to_pylist()]
    assert everything == ["8a", "8b", "7a", "x3", "8c", "x6", "x7", "x8", "x9", "7b", "x11",
                          "x13", "9a", "x15"]
    tp_rows = [v.decode() for t in plan_segments(options) for b in read_segment(t)
               for v in b.column("value").to_pylist()]
    assert tp_rows == ["x3", "x6", "x7", "x8", "x9", "x11", "x13", "9a", "x15"]


# ------------------------------------------------------------------------ transactional writes


def stored_batches(client: SyncClient, topic: str, partitions: int) -> list[tuple]:
    """(partition, header, records) of every stored batch of ``topic``, markers included."""
    out = []
    for partition in range(partitions):
        offset, end = 0, client.list_offsets(topic, partition, -1).offset
        while offset < end:
            result = client.fetch_by_offset(topic, partition, offset,
                                            fetch_format=FetchFormat.RECORD_BATCHES)
            found = list(iter_batches(result.record_batches))
            out.extend((partition, header, records) for header, records in found)
            offset = found[-1][0].next_offset
    return out


def markers_of(stored: list[tuple]) -> list[tuple[int, int, ControlRecordType]]:
    """(partition, producer id, COMMIT/ABORT) of every marker."""
    return [(p, h.producer_id, decode_control_key(records[0].key)[1])
            for p, h, records in stored if h.is_control]


def write_rows(spark, server, topic: str, names: list[str], *, tasks: int, **options: str):
    df = spark.createDataFrame([(n,) for n in names], "value string").repartition(tasks)
    writer = df.write.format("stratalog").mode("append").option("target", server.target)
    writer = writer.option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def names_read(spark, server, topic: str, level: str) -> list[str]:
    df = load(spark, target=server.target, subscribe=topic, isolationLevel=level)
    return [r["value"].decode() for r in df.collect()]


def assert_nothing_open(client: SyncClient, topic: str, partitions: int) -> None:
    for partition in range(partitions):
        stable = client.list_offsets(topic, partition, -1,
                                     isolation_level=IsolationLevel.READ_COMMITTED)
        assert stable.offset == client.list_offsets(topic, partition, -1).offset


def test_transactional_write_commits_each_task_once(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    names = [f"row-{i}" for i in range(60)]
    write_rows(spark, server, topic, names, tasks=3, transactionalIdPrefix=f"{topic}-job")
    assert sorted(names_read(spark, server, topic, "read_committed")) == sorted(names)
    # Written in transactions, one per task (three producer ids), each ended by one COMMIT
    # marker in every partition it wrote to; nothing is left open.
    stored = stored_batches(client, topic, 2)
    data = {(p, h.producer_id) for p, h, _ in stored if not h.is_control}
    assert all(h.is_transactional for _, h, _ in stored)
    assert len({pid for _, pid in data}) == 3
    assert sorted(markers_of(stored)) == sorted((p, pid, ControlRecordType.COMMIT)
                                                for p, pid in data)
    assert_nothing_open(client, topic, 2)


def test_a_failed_transactional_task_leaves_nothing_visible(spark, client, server, topic_name):
    from pyspark.sql.functions import udf

    topic = topic_name()
    client.create_topic(topic, partitions=1)
    prefix = f"{topic}-job"

    def check(value):
        if value == "u-2500":
            raise ValueError("row u-2500 is bad")
        return value

    # A plain Python UDF (Arrow-optimised ones need pandas, which the spark extra omits).
    fail_on_2500 = udf(check, "string", useArrow=False)

    # A UDF raising in the task ends the writer's input as if it were complete: the writer
    # sends the rows before the bad one in the task's transaction, which is never committed.
    # The driver's abort() fences the task's transactional id: if it comes first, the writer's
    # batches are refused (PRODUCER_FENCED) and nothing reaches the log; otherwise they do and
    # are aborted. Either way read_committed sees nothing and nothing stays open.
    df = spark.createDataFrame([(f"u-{i}",) for i in range(3000)], "value string").coalesce(1)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
    try:
        with pytest.raises(Exception, match="row u-2500 is bad"):
            (df.select(fail_on_2500("value").alias("value")).write.format("stratalog")
             .mode("append").option("target", server.target).option("topic", topic)
             .option("transactionalIdPrefix", prefix).option("lingerMs", "0").save())
        sent = names_read(spark, server, topic, "read_uncommitted")
        assert set(sent) <= {f"u-{i}" for i in range(2500)}
        assert names_read(spark, server, topic, "read_committed") == []
        # Aborted at once by the driver's abort(), not left open until its timeout.
        stored = stored_batches(client, topic, 1)
        assert {kind for _, _, kind in markers_of(stored)} <= {ControlRecordType.ABORT}
        assert_nothing_open(client, topic, 1)
        # A bad row (a null topic) in a later Arrow batch fails the task in the writer itself.
        rows = [(f"bad-{i}", None if i == 249 else topic) for i in range(250)]
        bad = spark.createDataFrame(rows, "value string, topic string").coalesce(1)
        with pytest.raises(Exception, match="row 4 of the batch has a null 'topic'"):
            (bad.write.format("stratalog").mode("append").option("target", server.target)
             .option("transactionalIdPrefix", prefix).option("lingerMs", "0").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert names_read(spark, server, topic, "read_committed") == []
    assert_nothing_open(client, topic, 1)
    # The next write with the same prefix (the same transactional id for partition 0) commits.
    names = [f"good-{i}" for i in range(20)]
    write_rows(spark, server, topic, names, tasks=1, transactionalIdPrefix=prefix)
    assert sorted(names_read(spark, server, topic, "read_committed")) == sorted(names)


def test_transactional_stream_write_one_transaction_per_task_and_micro_batch(
    spark, client, server, topic_name, tmp_path
):
    source, sink = topic_name("source"), topic_name("sink")
    client.create_topic(source, partitions=2)
    client.create_topic(sink, partitions=2)
    for partition in range(2):
        client.produce(source, partition, [f"s{partition}-{i}".encode() for i in range(30)])
    query = (
        spark.readStream.format("stratalog").option("target", server.target)
        .option("subscribe", source).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20").load()
        .select("key", "value")
        .writeStream.format("stratalog").option("target", server.target)
        .option("topic", sink).option("transactionalIdPrefix", f"{sink}-stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True).start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not finish"
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3  # 60 records, at most 20 per micro-batch
    expected = sorted(f"s{p}-{i}" for p in range(2) for i in range(30))
    assert sorted(names_read(spark, server, sink, "read_committed")) == expected
    # One transactional id per Spark partition, reused by every micro-batch: the same producer
    # ids, a new epoch each time, and one COMMIT per transaction and partition written.
    stored = stored_batches(client, sink, 2)
    data = [h for _, h, _ in stored if not h.is_control]
    assert all(h.is_transactional for h in data)
    producer_ids = {h.producer_id for h in data}
    assert len(producer_ids) <= 2  # the source has two partitions: two tasks per micro-batch
    epochs = {(h.producer_id, h.producer_epoch) for h in data}
    assert len(epochs) >= len(batches)
    commits = {(p, h.producer_id, h.producer_epoch) for p, h, _ in stored if h.is_control}
    assert commits == {(p, h.producer_id, h.producer_epoch) for p, h, _ in stored
                       if not h.is_control}
    assert {kind for _, _, kind in markers_of(stored)} == {ControlRecordType.COMMIT}
    assert_nothing_open(client, sink, 2)


def test_the_driver_commits_or_aborts_the_tasks_transactions(client, server, topic_name):
    """The protocol without Spark: tasks leave their transactions open; the driver commits
    them, aborts them (also for a task that never reported), or names the one it cannot
    commit."""
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    options = parse_write_options({"target": server.target, "topic": topic,
                                   "transactionalIdPrefix": f"{topic}-job"})
    plan = plan_write(StructType().add("value", StringType()), options)

    def task(partition_id: int, names: list[str]) -> WriteCommitMessage:
        batch = pa.record_batch([pa.array(names, pa.string())], names=["value"])
        return write_batches(options, plan, iter([batch]), options.transactional_id(partition_id))

    def committed() -> list[str]:
        result = client.fetch_by_offset(topic, 0, 0, isolation_level=IsolationLevel.READ_COMMITTED)
        return [r.value.decode() for r in result.records]

    first, second = task(0, ["a0", "a1"]), task(1, ["b0"])
    assert (first.records, first.transactional_id) == (2, f"{topic}-job-0")
    assert committed() == []  # written, not committed: the LSO is at a0
    assert commit_transactions(options, [first, second], "the write") == 3
    assert sorted(committed()) == ["a0", "a1", "b0"]
    # abort(): a task that reported and one that did not (None) are both aborted at once.
    third = task(0, ["c0"])
    task(1, ["d0"])
    abort_transactions(options, [third, None], "the write")
    assert_nothing_open(client, topic, 1)
    assert sorted(committed()) == ["a0", "a1", "b0"]
    # A transaction aborted before the driver commits it (its timeout, or a newer attempt of
    # the task): the commit fails, naming it and what was committed before.
    fourth, fifth = task(0, ["e0"]), task(1, ["f0"])
    client.init_producer_id(f"{topic}-job-1", transaction_timeout_ms=60_000)
    with pytest.raises(TransactionCommitError, match=(
            f"the write: could not commit the transaction of {topic}-job-1 .*Transactions "
            f"committed before it: {topic}-job-0. .*transactionTimeoutMs")):
        commit_transactions(options, [fourth, fifth], "the write")
    assert sorted(committed()) == ["a0", "a1", "b0", "e0"]
    # A task that wrote nothing has no transaction to commit.
    assert commit_transactions(options, [task(0, [])], "the write") == 0
    assert_nothing_open(client, topic, 1)
