"""The storage engine in-process: append throughput, read and timestamp lookups, open time.

Method (one process, one core for the engine, the page cache warm as after a write):

  build     client batches of ``--batch-records`` records, 100-byte values, null keys,
            timestamps increasing by 1 ms per record, uncompressed; built once, before timing
  append    ``PartitionLog.append`` of every batch in turn (validation, offset assignment,
            roll, write, index entries), ``segment.bytes`` chosen so the log spans
            ``--segments`` segments; MB/s and records/s of the whole loop
  read      ``read(offset, 1)`` at uniformly random offsets (min_one_message: one batch back)
            -> lookups/s; and ``read(offset, 1 MiB)`` -> lookups/s and MB/s
  timestamp ``offset_for_timestamp(T)`` at uniformly random T within the log's time range
  open      close, then ``PartitionLog.open`` of the directory (lazy: only the active
            segment's indexes are touched), and the first read after it
  roll      a new log without producers, ``--rolls`` times: one batch appended, then
            ``PartitionLog.roll()`` timed (the old active segment's indexes trimmed, the new
            segment's ``.log``, ``.index`` and ``.timeindex`` created, and whatever producer
            snapshot the roll writes, not fsynced), then the flush the LogManager's
            scheduler runs after a roll, ``flush(new base offset)``, timed apart (fsyncs of
            the old segment's files, of the roll's snapshot if any, and of the directory);
            median and mean of each

Nothing is fsynced (the default flush.messages never triggers), as in Kafka where durability
comes from replication and the OS flushes in the background.

Run: ``.venv/bin/python -m benchmarks.bench_storage [--records 1000000] [--segments 55]
[--rolls 2000]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stratalog.records.builder import build_batch
from stratalog.server.storage import PartitionLog

VALUE_SIZE_BYTES = 100
T0 = 1_700_000_000_000


def build_batches(records: int, batch_records: int) -> list[bytes]:
    value = bytes(range(VALUE_SIZE_BYTES))
    batches = []
    for first in range(0, records, batch_records):
        count = min(batch_records, records - first)
        batches.append(
            build_batch([(T0 + first + i, None, value, ()) for i in range(count)])
        )
    return batches


class Stopwatch:
    """Wall-clock and process CPU time of a block: on a shared machine the CPU figure is the
    steadier one (it leaves out the time other processes held the core)."""

    def __enter__(self) -> Stopwatch:
        self.wall_start = time.perf_counter()
        self.cpu_start = time.process_time()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.wall_s = time.perf_counter() - self.wall_start
        self.cpu_s = time.process_time() - self.cpu_start

    def rates(self, count: float, unit: str, scale: float = 1.0, fmt: str = ",.0f") -> str:
        wall = format(count / self.wall_s / scale, fmt)
        cpu = format(count / self.cpu_s / scale, fmt)
        return f"{wall:>12} {unit} wall  {cpu:>12} {unit} CPU"


def bench_roll(
    directory: Path, rolls: int, batch: bytes
) -> tuple[list[float], list[float], list[float]]:
    """(wall seconds, CPU seconds) of each of ``rolls`` rolls of a log without producers, each
    after one append of ``batch`` (so that each roll leaves a non-empty segment behind), and
    the wall seconds of the flush after each."""
    log = PartitionLog.open(directory, {"segment.bytes": str(1 << 30)})
    walls: list[float] = []
    cpus: list[float] = []
    flushes: list[float] = []
    try:
        for _ in range(rolls):
            log.append(batch)
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            log.roll()
            cpus.append(time.process_time() - cpu_start)
            walls.append(time.perf_counter() - wall_start)
            wall_start = time.perf_counter()
            log.flush(log.active_segment.base_offset)
            flushes.append(time.perf_counter() - wall_start)
        assert len(log.segments) == rolls + 1
    finally:
        log.close()
    return walls, cpus, flushes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch-records", type=int, default=100)
    parser.add_argument("--segments", type=int, default=55)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--directory", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rolls", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    print(f"stratalog storage benchmark: Python {platform.python_version()} on "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {args.records:,} records of {VALUE_SIZE_BYTES} B in "
          f"batches of {args.batch_records}")
    start = time.perf_counter()
    batches = build_batches(args.records, args.batch_records)
    total_bytes = sum(len(b) for b in batches)
    print(f"built {len(batches):,} batches, {total_bytes / 1e6:.1f} MB, in "
          f"{time.perf_counter() - start:.1f} s (not timed below)")

    root = Path(tempfile.mkdtemp(prefix="stratalog-bench-", dir=args.directory))
    directory = root / "bench-0"
    segment_bytes = total_bytes // args.segments + 1
    config = {"segment.bytes": str(segment_bytes)}
    try:
        log = PartitionLog.open(directory, config)
        append = log.append
        with Stopwatch() as watch:
            for data in batches:
                append(data)
        assert log.log_end_offset == args.records
        print(f"append               {watch.rates(total_bytes, 'MB/s', 1e6, ',.1f')}")
        print(f"                     {watch.rates(args.records, 'rec/s')}  ({watch.wall_s:.2f} s, "
              f"{len(log.segments)} segments of <= {segment_bytes:,} B)")

        end = log.log_end_offset
        offsets = [rng.randrange(end) for _ in range(args.lookups)]
        read = log.read
        with Stopwatch() as watch:
            for offset in offsets:
                read(offset, 1)
        print(f"read(offset, 1)      {watch.rates(len(offsets), 'op/s')}  (one batch of "
              f"{args.batch_records} records back)")
        big = offsets[: min(args.lookups, 5000)]
        fetched = 0
        with Stopwatch() as watch:
            for offset in big:
                fetched += len(read(offset, 1 << 20))
        print(f"read(offset, 1 MiB)  {watch.rates(len(big), 'op/s')}")
        print(f"                     {watch.rates(fetched, 'MB/s', 1e6, ',.1f')}")

        targets = [T0 + rng.randrange(args.records) for _ in range(args.lookups // 4)]
        check = log.offset_for_timestamp(targets[0])
        assert check is not None and check.offset == targets[0] - T0, check
        lookup = log.offset_for_timestamp
        with Stopwatch() as watch:
            for target in targets:
                lookup(target)
        print(f"offset_for_timestamp {watch.rates(len(targets), 'op/s')}")

        log.close()
        start = time.perf_counter()
        log = PartitionLog.open(directory, config)
        opened = time.perf_counter() - start
        start = time.perf_counter()
        log.read(rng.randrange(end), 1)
        first_read = time.perf_counter() - start
        print(f"open                 {opened * 1e3:10.1f} ms for {len(log.segments)} segments "
              f"(first read after it {first_read * 1e3:.2f} ms)")
        log.close()

        if args.rolls:
            walls, cpus, flushes = bench_roll(root / "roll-0", args.rolls, batches[0])
            print(f"roll (no producers)  {statistics.median(walls) * 1e6:10.0f} us wall "
                  f"{statistics.median(cpus) * 1e6:10.0f} us CPU  (median; mean "
                  f"{statistics.fmean(walls) * 1e6:.0f} us wall, "
                  f"{statistics.fmean(cpus) * 1e6:.0f} us CPU; {args.rolls} rolls)")
            print(f"flush after the roll {statistics.median(flushes) * 1e6:10.0f} us wall "
                  f"{'':>21}  (median; mean {statistics.fmean(flushes) * 1e6:.0f} us)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
