"""Record codec throughput: encode and decode of v2 batches, records/s on one core.

Workload: batches of 1000 records, null keys, 100-byte values of text drawn from a 26-symbol
alphabet (compresses roughly 2:1 with gzip/zstd, like JSON-ish payloads), no headers,
consecutive millisecond timestamps. Each cell is the best of ``--repeats`` timed runs of at
least ``--seconds`` of process CPU time each (CPU time and best-of filter out most of the noise
from other processes on a shared machine).

Rows, for each codec:
  stratalog C    the codec with its C per-record loops (records/_speedups.c, via accel)
  stratalog py   the same code with the pure-Python loops (the reference and fallback),
                 measured in a child process started with STRATALOG_PURE_PYTHON=1
  aiokafka       aiokafka's compiled (Cython) DefaultRecordBatch: a compiled peer
  kafka-python   kafka-python's pure-Python DefaultRecordBatch: a pure-Python peer

Columns:
  encode    BatchBuilder.append x 1000 + build()          (what a producer does)
  decode    decode_batch(): CRC, decompress, Record objects (what a consumer does)
  columns   decode_batch_columns(): the same into five lists, no Record objects
            (what Arrow/Spark and gRPC readers use)
  validate  summarize_records(): CRC, decompress, record structure walk, no objects
            (what the server does for a client batch)
  path      encode + validate + decode of the same records one after another on one core:
            the codec's share of the produce path (producer, server, consumer), as a rate

Run: ``.venv/bin/python -m benchmarks.bench_records [--seconds 0.3] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from stratalog.records import BatchBuilder, Compression, accel, decode_batch, summarize_records
from stratalog.records.reader import decode_batch_columns

RECORDS_PER_BATCH = 1000
VALUE_SIZE_BYTES = 100
BASE_TIMESTAMP_MS = 1_700_000_000_000


def make_values(seed: int = 42) -> list[bytes]:
    rng = random.Random(seed)
    alphabet = b"abcdefghij0123456789 ,:{}\""
    return [
        bytes(rng.choice(alphabet) for _ in range(VALUE_SIZE_BYTES))
        for _ in range(RECORDS_PER_BATCH)
    ]


def best_rate(work: Callable[[], object], seconds: float, repeats: int) -> float:
    """Records/s of ``work`` (one batch per call): the best of ``repeats`` timed runs."""
    best = 0.0
    # CPU time of this process, not wall time: the work is single-threaded, and CPU time is
    # far less disturbed by other processes competing for the cores of a shared machine.
    clock = time.process_time
    for _ in range(repeats):
        calls = 0
        started = clock()
        elapsed = 0.0
        while elapsed < seconds:
            work()
            calls += 1
            elapsed = clock() - started
        best = max(best, calls * RECORDS_PER_BATCH / elapsed)
    return best


def ours(
    codec: Compression, values: list[bytes]
) -> tuple[Callable, Callable, Callable, Callable, int]:
    def encode() -> bytes:
        builder = BatchBuilder(compression=codec)
        append = builder.append
        timestamp = BASE_TIMESTAMP_MS
        for value in values:
            append(timestamp, None, value)
            timestamp += 1
        return builder.build()

    batch = encode()
    assert len(decode_batch(batch)[1]) == RECORDS_PER_BATCH
    assert len(decode_batch_columns(batch)[1].values) == RECORDS_PER_BATCH
    return (
        encode,
        lambda: decode_batch(batch),
        lambda: decode_batch_columns(batch),
        lambda: summarize_records(batch),
        len(batch),
    )


def aiokafka(codec: Compression, values: list[bytes]) -> tuple[Callable, Callable] | None:
    try:
        from aiokafka.record.default_records import (
            DefaultRecordBatch,
            DefaultRecordBatchBuilder,
        )
    except ImportError:
        return None

    def encode() -> bytes:
        builder = DefaultRecordBatchBuilder(2, int(codec), 0, -1, -1, -1, 1 << 30)
        append = builder.append
        timestamp = BASE_TIMESTAMP_MS
        for offset, value in enumerate(values):
            append(offset, timestamp=timestamp, key=None, value=value, headers=[])
            timestamp += 1
        return bytes(builder.build())

    batch = encode()

    def decode() -> list:
        reader = DefaultRecordBatch(batch)
        reader.validate_crc()
        return list(reader)

    assert len(decode()) == RECORDS_PER_BATCH
    return encode, decode


def kafka_python(codec: Compression, values: list[bytes]) -> tuple[Callable, Callable] | None:
    try:
        from kafka import codec as kafka_codec
        from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError:
        return None
    available = {
        Compression.NONE: True,
        Compression.GZIP: kafka_codec.has_gzip(),
        Compression.SNAPPY: kafka_codec.has_snappy(),
        Compression.LZ4: kafka_codec.has_lz4(),
        Compression.ZSTD: kafka_codec.has_zstd(),
    }
    if not available[codec]:
        return None

    def encode() -> bytes:
        builder = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, 1 << 30)
        timestamp = BASE_TIMESTAMP_MS
        for offset, value in enumerate(values):
            builder.append(offset, timestamp=timestamp, key=None, value=value, headers=[])
            timestamp += 1
        return bytes(builder.build())

    batch = encode()

    def decode() -> list:
        reader = DefaultRecordBatch(bytearray(batch))
        reader.validate_crc()
        return list(reader)

    assert len(decode()) == RECORDS_PER_BATCH
    return encode, decode


def _cell(rate: float | None) -> str:
    return f"{rate / 1000:9.0f}k" if rate is not None else f"{'n/a':>10}"


def _path_rate(encode: float | None, decode: float | None, validate: float | None) -> float | None:
    """Records/s of encode, validate and decode run one after the other on one core."""
    if encode is None or decode is None or validate is None:
        return None
    return 1 / (1 / encode + 1 / validate + 1 / decode)


def measure_ours(values: list[bytes], seconds: float, repeats: int) -> dict[str, list]:
    """{codec name: [encode, decode, columns, validate, batch bytes]} with this process's loops."""
    figures = {}
    for codec in Compression:
        *functions, size = ours(codec, values)
        figures[codec.name] = [best_rate(f, seconds, repeats) for f in functions] + [size]
    return figures


def measure_ours_pure_python(seconds: float, repeats: int) -> dict[str, list] | None:
    """measure_ours in a child process that runs the pure-Python loops (None if it fails)."""
    env = dict(os.environ, **{accel.PURE_PYTHON_ENV: "1"})
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_records",
            "--ours-json",
            "--seconds",
            str(seconds),
            "--repeats",
            str(repeats),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        print(f"pure-Python run failed: {result.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    return json.loads(result.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="minimum time per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per cell; best is kept")
    parser.add_argument("--ours-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    values = make_values()
    if args.ours_json:  # the child of measure_ours_pure_python
        print(json.dumps(measure_ours(values, args.seconds, args.repeats)))
        return 0

    print(
        f"stratalog.records: {RECORDS_PER_BATCH} records/batch, {VALUE_SIZE_BYTES}-byte values, "
        f"null keys; records/s (thousands), best of {args.repeats} x {args.seconds}s; "
        f"Python {platform.python_version()} on {platform.machine()}; "
        f"{'C loops' if accel.ACCELERATED else 'pure-Python loops (C not in use)'}",
        flush=True,
    )
    ours_here = measure_ours(values, args.seconds, args.repeats)
    # Without the C loops this process already measures the pure-Python ones.
    pure_python = measure_ours_pure_python(args.seconds, args.repeats) if accel.ACCELERATED else None
    header = (
        f"{'codec':8}{'implementation':15}{'batch B':>9} |{'encode':>11}{'decode':>11}"
        f"{'columns':>11}{'validate':>11} |{'path':>11}"
    )
    print(header)
    print("-" * len(header))
    for codec in Compression:
        rows: list[tuple[str, list[float | None], int | None]] = []
        here = ours_here[codec.name]
        rows.append(("stratalog C" if accel.ACCELERATED else "stratalog py", here[:4], here[4]))
        if accel.ACCELERATED and pure_python is not None:
            py = pure_python[codec.name]
            rows.append(("stratalog py", py[:4], py[4]))
        for name, peer in (("aiokafka", aiokafka), ("kafka-python", kafka_python)):
            functions = peer(codec, values)
            if functions is None:
                rows.append((name, [None] * 4, None))
            else:
                encode, decode = (best_rate(f, args.seconds, args.repeats) for f in functions)
                rows.append((name, [encode, decode, None, None], None))
        for name, (encode, decode, columns, validate), size in rows:
            path = _path_rate(encode, decode, validate)  # n/a for peers: no validate walk
            size_cell = f"{size:9d}" if size is not None else f"{'':9}"
            print(
                f"{codec.name.lower():8}{name:15}{size_cell} |"
                f"{''.join(map(_cell, (encode, decode, columns, validate)))} |{_cell(path)}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
