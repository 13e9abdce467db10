"""Record codec throughput: encode and decode of v2 batches, records/s on one core.

Workload: batches of 1000 records, null keys, 100-byte values of text drawn from a 26-symbol
alphabet (compresses roughly 2:1 with gzip/zstd, like JSON-ish payloads), no headers,
consecutive millisecond timestamps. Each cell is the best of ``--repeats`` timed runs of at
least ``--seconds`` of process CPU time each (CPU time and best-of filter out most of the noise
from other processes on a shared machine).

Columns:
  encode    BatchBuilder.append x 1000 + build()          (what a producer does)
  decode    decode_batch(): CRC, decompress, Record objects (what a consumer does)
  validate  summarize_records(): CRC, decompress, record structure walk, no objects
            (what the server may do for a client batch)
  aiokafka  the same encode/decode with aiokafka's compiled (Cython) DefaultRecordBatch,
            the baseline of a C implementation
  kafka-py  kafka-python's pure-Python DefaultRecordBatch (a pure-Python peer)

Run: ``.venv/bin/python -m benchmarks.bench_records [--seconds 0.3] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from collections.abc import Callable

from stratalog.records import BatchBuilder, Compression, decode_batch, summarize_records

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


def ours(codec: Compression, values: list[bytes]) -> tuple[Callable, Callable, Callable, int]:
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
    return encode, lambda: decode_batch(batch), lambda: summarize_records(batch), len(batch)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="minimum time per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per cell; best is kept")
    args = parser.parse_args(argv)

    values = make_values()
    print(
        f"stratalog.records: {RECORDS_PER_BATCH} records/batch, {VALUE_SIZE_BYTES}-byte values, "
        f"null keys; records/s (thousands), best of {args.repeats} x {args.seconds}s; "
        f"Python {platform.python_version()} on {platform.machine()}"
    )
    header = (
        f"{'codec':8}{'batch B':>9} |{'encode':>11}{'decode':>11}{'validate':>11} |"
        f"{'aio enc':>11}{'aio dec':>11} |{'kpy enc':>11}{'kpy dec':>11}"
    )
    print(header)
    print("-" * len(header))
    for codec in Compression:
        encode, decode, validate, size = ours(codec, values)
        row = [best_rate(f, args.seconds, args.repeats) for f in (encode, decode, validate)]
        peers = []
        for peer in (aiokafka, kafka_python):
            functions = peer(codec, values)
            if functions is None:
                peers += [None, None]
            else:
                peers += [best_rate(f, args.seconds, args.repeats) for f in functions]
        print(
            f"{codec.name.lower():8}{size:9d} |{''.join(map(_cell, row))} |"
            f"{''.join(map(_cell, peers[:2]))} |{''.join(map(_cell, peers[2:]))}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
