"""An example Spark pipeline on stratalog: per-key, per-minute activity since a point in time.

The job reads a topic from a timestamp (``startingTimestamp``: each partition from its first
record at or after that time, resolved by the server's time index), counts the records and
bytes of every key in every minute, and writes one JSON record per (key, minute) to another
topic, keyed by the original key (so a key's counts land in one partition, as they would with a
Kafka producer).

Run it locally with one command; it starts a server of its own on a temporary directory, fills
a demo topic with ten minutes of events, runs the job on a local[2] Spark and prints what it
wrote::

    .venv/bin/python examples/pipeline.py --demo

Against a running server (``stratalog serve``), on the README's ``events``::

    .venv/bin/python examples/pipeline.py --target 127.0.0.1:50051 \\
        --source events --sink activity-per-minute --since-ms 1763800000000

Before Spark runs anything, the driver plans the read and prepares the sink with the
connector's own code (:func:`check`): a missing source, a bad time or an unreachable server
stops it with one line naming the problem (exit 1). A partition with no record at or after
``--since-ms`` (an empty one, say) contributes nothing (``--starting-strategy latest``, the
connector's ``startingOffsetsByTimestampStrategy``; ``error`` fails instead). The sink is
created when missing (the writer's ``createTopic``, with ``--sink-partitions`` partitions).

On a cluster, with ``stratalog[spark]`` installed on the driver and every executor (for example
in the Python environment shipped with ``--archives``), the same script through spark-submit::

    spark-submit --master spark://spark-master:7077 \\
        --conf spark.pyspark.python=./venv/bin/python --archives venv.tar.gz#venv \\
        examples/pipeline.py --target stratalog:50051 --source events \\
        --sink activity-per-minute --since-ms 1763800000000

(docs/spark.md has the details.) Output records look like
``{"key":"user-3","minute":"2025-11-22T08:01:00.000Z","records":12,"bytes":624}``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType, StructType, TimestampType

from stratalog.client import StratalogError
from stratalog.spark import ConnectorError, StratalogDataSource, register

__all__ = ["activity_per_minute", "check", "main", "run"]

#: The result's columns, as activity_per_minute() makes them (what the sink is checked against).
RESULT_SCHEMA = (
    StructType()
    .add("key", BinaryType())
    .add("value", StringType())
    .add("timestamp", TimestampType())
)
# An error of stratalog (the connector's, the client's), as Spark's exceptions quote it at the
# end of a Python traceback: "stratalog.spark.errors.DataLossError: offsets ...".
_STRATALOG_ERROR = re.compile(r"^stratalog\.[\w.]*\.(\w+Error): (.+)$", re.MULTILINE)


def read_options(target: str, source: str, since_ms: int, strategy: str = "latest") -> dict:
    """The read's options: ``source`` from ``since_ms`` on; ``strategy`` for a partition with
    no record at or after it (``latest``: nothing from it; ``error``: fail)."""
    return {
        "target": target,
        "subscribe": source,
        "startingTimestamp": str(since_ms),
        "startingOffsetsByTimestampStrategy": strategy,
    }


def write_options(target: str, sink: str, sink_partitions: int) -> dict:
    """The write's options: to ``sink``, created with ``sink_partitions`` partitions if missing."""
    return {
        "target": target,
        "topic": sink,
        "createTopic": "true",
        "createTopicPartitions": str(sink_partitions),
    }


def check(read: dict, write: dict) -> int:
    """Plan the read and prepare the sink here, on the driver, with the connector's own code
    (what Spark runs first); returns the number of offsets the job will read.

    Raises:
        stratalog.spark.ConnectorError: an option or the data does not fit (a missing topic,
            no record after the start time under strategy ``error``, data loss).
        stratalog.client.StratalogError: the server is unreachable or refused a call.
    """
    source = StratalogDataSource(read)
    partitions = source.reader(source.schema()).partitions()
    StratalogDataSource(write).writer(RESULT_SCHEMA, False)  # creates the sink if missing
    return sum(p.offset_range.size for p in partitions)


def activity_per_minute(
    spark: SparkSession, target: str, source: str, since_ms: int, strategy: str = "latest"
) -> DataFrame:
    """The job's result: ``key`` (binary), ``value`` (JSON string), ``timestamp`` (the minute).

    One row per key and minute with the number of records and of value bytes in it.
    """
    events = (
        spark.read.format("stratalog")
        .options(**read_options(target, source, since_ms, strategy))
        .load()
    )
    per_minute = events.groupBy(
        F.col("key"), F.window(F.col("timestamp"), "1 minute").alias("window")
    ).agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.coalesce(F.length(F.col("value")), F.lit(0))).alias("bytes"),
    )
    return per_minute.select(
        F.col("key"),
        F.to_json(F.struct(
            F.col("key").cast("string").alias("key"),
            F.date_format(F.col("window.start"), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("minute"),
            F.col("records"),
            F.col("bytes"),
        )).alias("value"),
        F.col("window.start").alias("timestamp"),
    )


def run(
    spark: SparkSession, target: str, source: str, sink: str, since_ms: int, *,
    strategy: str = "latest", sink_partitions: int = 3,
) -> int:
    """Compute the activity and append it to ``sink``; returns the number of records written."""
    result = activity_per_minute(spark, target, source, since_ms, strategy).cache()
    written = result.count()
    (result.write.format("stratalog").mode("append")
     .options(**write_options(target, sink, sink_partitions)).save())
    result.unpersist()
    return written


def _one_line(exc: PySparkException) -> str | None:
    """stratalog's error inside a Spark exception (the last one quoted), if any."""
    found = _STRATALOG_ERROR.findall(str(exc))
    return f"{found[-1][0]}: {found[-1][1]}" if found else None


def _session(master: str | None) -> SparkSession:
    builder = SparkSession.builder.appName("stratalog-activity-per-minute")
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[2]"  # run with plain python, not through spark-submit
    if master is not None and master.startswith("local"):
        # Local workers must run this interpreter (stratalog, pyarrow); loopback only.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if master is not None:
        builder = builder.master(master)
    spark = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    register(spark)
    return spark


def _demo(args: argparse.Namespace) -> int:
    """Start a server, fill a topic with ten minutes of events, run the job, print the result."""
    import shutil
    import subprocess
    import tempfile

    from stratalog.client import FetchFormat, ProducerRecord, SyncClient, decode_fetched

    data_dir = tempfile.mkdtemp(prefix="stratalog-demo-")
    server = subprocess.Popen(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
         "--log-dirs", data_dir, "--metrics-port", "-1", "--kafka-listen", "",
         "--logging-level", "WARNING"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if "listening on" not in line:
            raise SystemExit(f"the server did not start: {line!r}")
        target = line.rsplit(" ", 1)[1].strip()
        print(f"server on {target}, data in {data_dir}")
        start_ms = (int(time.time() * 1000) // 60_000 - 10) * 60_000  # ten whole minutes ago
        with SyncClient(target) as client:
            client.create_topic("events", partitions=3)  # the sink is created by the writer
            for partition in range(3):
                client.produce("events", partition, [
                    ProducerRecord(f'{{"n":{i}}}'.encode(), key=f"user-{(i + partition) % 4}".encode(),
                                   timestamp_ms=start_ms + i * 3_000)
                    for i in range(200)  # one event every 3 s per partition, for 10 minutes
                ])
            since_ms = start_ms + 5 * 60_000
            spark = _session(args.master)
            spark.sparkContext.setLogLevel("ERROR")
            written = run(spark, target, "events", "activity-per-minute", since_ms,
                          sink_partitions=args.sink_partitions)
            spark.stop()
            print(f"wrote {written} records to activity-per-minute (events since "
                  f"{time.strftime('%H:%M', time.gmtime(since_ms / 1000))} UTC):")
            lines = []
            for partition in range(3):
                result = client.fetch_by_offset("activity-per-minute", partition, 0,
                                                fetch_format=FetchFormat.RECORD_BATCHES)
                for batch in decode_fetched("activity-per-minute", partition,
                                            result.record_batches, 0, result.high_watermark):
                    lines += [f"  {r.value.decode()}  (partition {partition}, offset {r.offset})"
                              for r in batch.records]
            print("\n".join(sorted(lines)))
        return 0
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true",
                        help="start a server, fill a demo topic, run the job on local[2]")
    parser.add_argument("--target", help="the stratalog server, e.g. 127.0.0.1:50051")
    parser.add_argument("--source", default="events", help="topic to read (default: events)")
    parser.add_argument("--sink", default="activity-per-minute",
                        help="topic to write (default: activity-per-minute; created if missing)")
    parser.add_argument("--sink-partitions", type=int, default=3, metavar="N",
                        help="partitions of the sink when it is created (default: 3)")
    parser.add_argument("--since-ms", type=int,
                        help="read records from this time on (ms since the epoch; "
                        "default: one hour ago)")
    parser.add_argument("--starting-strategy", choices=("latest", "error"), default="latest",
                        help="a partition with no record at or after --since-ms: 'latest' "
                        "reads nothing from it (default), 'error' fails the job")
    parser.add_argument("--master", help="Spark master (default: spark-submit's; local[2] when "
                        "run with plain python)")
    args = parser.parse_args(argv)
    if args.sink_partitions < 1:
        parser.error(f"--sink-partitions must be >= 1, got {args.sink_partitions}")
    if args.demo:
        return _demo(args)
    if args.target is None:
        parser.error("--target is required (or --demo)")
    since_ms = args.since_ms if args.since_ms is not None else int(time.time() * 1000) - 3_600_000
    try:
        offsets = check(read_options(args.target, args.source, since_ms, args.starting_strategy),
                        write_options(args.target, args.sink, args.sink_partitions))
    except ConnectorError as exc:
        print(f"pipeline: {exc}", file=sys.stderr)
        return 1
    except StratalogError as exc:
        print(f"pipeline: server {args.target}: {exc}", file=sys.stderr)
        return 1
    print(f"reading {offsets} offsets of {args.source} since {since_ms} ms")
    spark = _session(args.master)
    try:
        written = run(spark, args.target, args.source, args.sink, since_ms,
                      strategy=args.starting_strategy, sink_partitions=args.sink_partitions)
    except PySparkException as exc:
        # The connector's errors found while the job runs (the topic deleted meanwhile, data
        # loss): their message, not Spark's traceback around it.
        message = _one_line(exc)
        if message is None:
            raise
        print(f"pipeline: {message}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"wrote {written} records to {args.sink}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
