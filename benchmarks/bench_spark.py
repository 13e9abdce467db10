"""Spark connector throughput: a batch read of 1,000,000 records of 100 bytes on local[2].

Starts a stratalog server (``python -m stratalog.server``, 127.0.0.1, a temporary log dir),
produces the records into a topic of two partitions with the client's Producer, then measures,
each the median of ``--runs`` runs:

  client Consumer.batches()    the client library alone, one process: every record decoded
                               (the baseline the issue asks for beside Spark)
  connector read(), in-process the connector's task body (fetch RECORD_BATCHES, decode into
                               Arrow batches) for both partitions in turn, no Spark: what one
                               Python worker can do
  Spark local[2]               ``spark.read.format("stratalog")`` ... ``.write.format("noop")``:
                               every column materialised in the JVM, two tasks (one per
                               partition) in two Python workers, after the session started and
                               one small warm-up query ran (JVM and worker start-up excluded).
                               The first three full reads are reported on their own ("first
                               full reads": the JVM's JIT is still compiling the per-row code
                               then, and each read is faster than the one before); the figure is
                               the median of the ``--runs`` reads after them (steady state)
  Spark ceiling                the same query on a Python data source that does no work: its
                               two tasks yield one prebuilt Arrow batch of the same schema
                               (62,500 records of 100 bytes) over and over. What Spark itself
                               takes to move Arrow batches from Python workers into JVM rows:
                               no connector can read faster through pyspark's Data Source API

Figures are records per wall-clock second. The server, the Spark JVM and its two Python workers
share the machine's cores (2 on the reference machines), so the Spark figure is bounded by the
CPU of all of them together; "CPU us/rec" is this process's CPU time per record where the work
happens in this process. The header says whether the C record codec is built.

Run: ``.venv/bin/python -m benchmarks.bench_spark [--records 1000000] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time

from benchmarks.bench_client import running_server
from stratalog.client import Client, Consumer, Producer
from stratalog.records import accel

VALUE_SIZE_BYTES = 100
TOPIC = "bench-spark"
PARTITIONS = 2
SEND_MANY_CHUNK = 10_000
_JIT_WARM_UP_READS = 3


async def produce(target: str, count: int) -> None:
    async with Client(target) as client:
        await client.create_topic(TOPIC, partitions=PARTITIONS)
        async with Producer(client) as producer:
            per_partition = count // PARTITIONS
            for partition in range(PARTITIONS):
                for start in range(0, per_partition, SEND_MANY_CHUNK):
                    stop = min(start + SEND_MANY_CHUNK, per_partition)
                    values = [
                        b"%010d" % (partition * per_partition + i)
                        + b"x" * (VALUE_SIZE_BYTES - 10)
                        for i in range(start, stop)
                    ]
                    await producer.send_many(TOPIC, values, partition=partition)
            await producer.flush()


async def consume(target: str) -> int:
    count = 0
    async with Client(target) as client, Consumer(client, TOPIC, start="earliest") as consumer:
        async for batch in consumer.batches():
            count += len(batch)
    return count


def timed(function) -> tuple[int, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    count = function()
    return count, time.perf_counter() - wall, time.process_time() - cpu


def connector_in_process(target: str) -> int:
    from stratalog.spark.batch_reader import StratalogBatchReader
    from stratalog.spark.options import parse_read_options

    reader = StratalogBatchReader(
        parse_read_options({"target": target, "subscribe": TOPIC}, streaming=False)
    )
    return sum(b.num_rows for p in reader.partitions() for b in reader.read(p))


class _PrebuiltSource:
    """Builds the ceiling's data source (pyspark imported only when Spark runs)."""

    @staticmethod
    def register(spark, records: int) -> None:
        import pyarrow as pa
        from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

        from stratalog.spark import arrow_schema, read_schema

        per_task = records // PARTITIONS

        class Reader(DataSourceReader):
            def partitions(self):
                return [InputPartition(p) for p in range(PARTITIONS)]

            def read(self, partition):
                rows = 62_500
                values = pa.array(
                    [b"%010d" % i + b"x" * (VALUE_SIZE_BYTES - 10) for i in range(rows)],
                    pa.binary(),
                )
                offsets = pa.array(range(rows), pa.int64())
                batch = pa.RecordBatch.from_arrays(
                    [pa.nulls(rows, pa.binary()), values,
                     pa.repeat(pa.scalar(TOPIC, pa.string()), rows),
                     pa.repeat(pa.scalar(partition.value, pa.int32()), rows), offsets,
                     offsets.view(pa.timestamp("us", tz="UTC")),
                     pa.repeat(pa.scalar(0, pa.int32()), rows)],
                    schema=arrow_schema(False),
                )
                sent = 0
                while sent < per_task:
                    chunk = batch.slice(0, min(rows, per_task - sent))
                    sent += chunk.num_rows
                    yield chunk

        class Prebuilt(DataSource):
            @classmethod
            def name(cls):
                return "bench_prebuilt"

            def schema(self):
                return read_schema(False)

            def reader(self, schema):
                return Reader()

        spark.dataSource.register(Prebuilt)


def report(name: str, results: list[tuple[int, float, float]], expected: int,
           cpu_applies: bool = True) -> None:
    for count, _, _ in results:
        if count != expected:
            raise SystemExit(f"{name}: read {count} records, expected {expected}")
    rate = statistics.median(count / wall for count, wall, _ in results)
    cpu = statistics.median(c / count * 1e6 for count, _, c in results)
    cpu_text = f"{cpu:8.2f}" if cpu_applies else "     n/a"
    runs = ", ".join(f"{count / wall:,.0f}" for count, wall, _ in results)
    print(f"{name:32s} {rate:14,.0f} {cpu_text}   runs: {runs}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    count = args.records - args.records % PARTITIONS

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, C record codec: "
          f"{'yes' if accel.ACCELERATED else 'no (pure Python)'}; {count:,} records of "
          f"{VALUE_SIZE_BYTES} bytes in {PARTITIONS} partitions; median of {args.runs} runs")
    with running_server() as target:
        started = time.perf_counter()
        asyncio.run(produce(target, count))
        print(f"produced in {time.perf_counter() - started:.1f} s", flush=True)
        print(f"{'read':32s} {'records/s':>14s} {'CPU us/rec':>8s}")
        report("client Consumer.batches()",
               [timed(lambda: asyncio.run(consume(target))) for _ in range(args.runs)], count)
        report("connector read(), in-process",
               [timed(lambda: connector_in_process(target)) for _ in range(args.runs)], count)

        from pyspark.sql import SparkSession

        from stratalog.spark import register

        started = time.perf_counter()
        spark = (
            SparkSession.builder.master("local[2]").appName("bench-spark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        print(f"Spark session started in {time.perf_counter() - started:.1f} s", flush=True)

        def spark_read(limit_offset: int | None = None) -> int:
            reader = (spark.read.format("stratalog").option("target", target)
                      .option("subscribe", TOPIC))
            if limit_offset is not None:
                ends = ",".join(f'"{p}":{limit_offset}' for p in range(PARTITIONS))
                reader = reader.option("endingOffsets", f'{{"{TOPIC}":{{{ends}}}}}')
            reader.load().write.format("noop").mode("overwrite").save()
            return (limit_offset or count // PARTITIONS) * PARTITIONS

        spark_read(1000)  # warm-up: the Python workers start, the plan code is loaded
        # The first full reads run while the JVM's JIT compiles the per-row code (each read
        # was faster than the one before: 0.67M, 0.89M, 1.07M, 1.10M records/s): reported on
        # their own, then the steady state once the JIT has warmed up.
        report("Spark local[2], first full reads",
               [timed(spark_read) for _ in range(_JIT_WARM_UP_READS)], count, cpu_applies=False)
        report("Spark local[2], noop sink",
               [timed(spark_read) for _ in range(args.runs)], count, cpu_applies=False)

        _PrebuiltSource.register(spark, count)

        def ceiling() -> int:
            spark.read.format("bench_prebuilt").load().write.format("noop").mode(
                "overwrite").save()
            return count

        for _ in range(_JIT_WARM_UP_READS):
            ceiling()  # warm-up, as for the connector
        report("Spark ceiling (prebuilt Arrow)",
               [timed(ceiling) for _ in range(args.runs)], count, cpu_applies=False)
        spark.stop()


if __name__ == "__main__":
    main()
