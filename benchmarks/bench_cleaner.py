"""The log cleaner: throughput of one cleaning on one thread, and its memory.

A compacted partition of ``--mib`` MiB of 1 KiB records (``--keys`` distinct keys, updated in
turn: each key ``--mib * 1024 / --keys`` times) in ``--segment-mib`` MiB segments, written by
``PartitionLog.append`` in batches of ``--batch-records`` records (default 16: ~16 KiB
batches, what a producer's linger makes; 1 gives one record per batch, the worst case), then
one ``Cleaner.clean`` of the whole non-active part, timed (wall and process CPU time, median
of ``--runs`` runs on fresh copies of the log):

  MB/s             bytes of the cleaned section read / seconds (Kafka's cleaner reports the
                   same: "log cleaned at X MB/s"). Goal: >= 100 MB/s.
  peak MiB         tracemalloc's peak of Python allocations during one more cleaning (not
                   timed: tracing slows every allocation), the offset map being one bytearray
                   of log.cleaner.dedupe.buffer.size, for each ``--dedupe-mib``; plus the
                   process's peak RSS growth over the whole run.

A baseline in the same run: ``recover`` = the unclean open of the same log (every batch read
and CRC-checked, indexes rebuilt), the nearest thing the storage engine does over the same
bytes, as a ratio. The log's files were just written: they are in the page cache, so the
figures are the CPU cost, not the disk's.

Run: ``.venv/bin/python -m benchmarks.bench_cleaner [--mib 256] [--keys 20000]
[--batch-records 16 1] [--dedupe-mib 16 128] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from stratalog.records.builder import build_batch
from stratalog.server.storage import PartitionLog
from stratalog.server.storage.cleaner import Cleaner, cleanable_range
from stratalog.server.storage.offset_map import OffsetMap

T0 = 1_700_000_000_000
RECORD_VALUE = b"v" * 1000  # with the key and framing, ~1 KiB a record


def build(directory: Path, mib: int, keys: int, batch_records: int, segment_mib: int) -> None:
    config = {"cleanup.policy": "compact", "segment.bytes": str(segment_mib << 20)}
    log = PartitionLog.open(directory, config, time_ms=lambda: T0)
    records = (mib << 20) // 1024
    index = 0
    while index < records:
        batch = [(T0 + index + i, b"key-%08d" % ((index + i) % keys), RECORD_VALUE, ())
                 for i in range(batch_records)]
        log.append(build_batch(batch))
        index += batch_records
    log.roll()
    log.close()


def clean_once(directory: Path, dedupe_bytes: int, *, trace: bool = False
               ) -> tuple[float, float, int, int, int]:
    """(wall s, cpu s, bytes read, tracemalloc peak or 0, records kept) of one cleaning.
    ``trace``: measure the memory (tracemalloc slows allocations: not a timed run)."""
    log = PartitionLog.open(directory, {"cleanup.policy": "compact", "segment.bytes": str(1 << 30)},
                            time_ms=lambda: T0)
    try:
        cleanable = cleanable_range(log, None, T0)
        if trace:
            tracemalloc.start()
        wall, cpu = time.perf_counter(), time.process_time()
        cleaner = Cleaner(OffsetMap(dedupe_bytes))
        result = cleaner.clean(log, cleanable.first_dirty_offset,
                               cleanable.first_uncleanable_offset)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        peak = 0
        if trace:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        return wall, cpu, result.bytes_read, peak, result.records_kept
    finally:
        log.close()


def recover_once(directory: Path) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    log = PartitionLog.open(directory, {"cleanup.policy": "compact"}, time_ms=lambda: T0,
                            had_clean_shutdown=False, recovery_point=0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    log.close()
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--batch-records", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--dedupe-mib", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-"))
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        print(f"{args.mib} MiB of 1 KiB records, {args.keys} keys, "
              f"{args.segment_mib} MiB segments; median of {args.runs} runs; os.cpu_count()="
              f"{os.cpu_count()}")
        print(f"{'records/batch':>13} {'dedupe MiB':>10} {'clean MB/s':>10} {'cpu MB/s':>9} "
              f"{'recover MB/s':>12} {'ratio':>6} {'peak MiB':>9} {'kept':>7}")
        for batch_records in args.batch_records:
            source = root / f"source-{batch_records}" / "c-0"
            build(source, args.mib, args.keys, batch_records, args.segment_mib)
            recoveries = []
            for run in range(args.runs):
                copy = root / f"recover-{batch_records}-{run}" / "c-0"
                shutil.copytree(source, copy)
                recoveries.append(recover_once(copy))
                shutil.rmtree(copy.parent)
            recover_wall = statistics.median(r[0] for r in recoveries)
            for dedupe_mib in args.dedupe_mib:
                runs = []
                for run in range(args.runs + 1):  # the last run measures the memory
                    copy = root / f"clean-{batch_records}-{dedupe_mib}-{run}" / "c-0"
                    shutil.copytree(source, copy)
                    runs.append(clean_once(copy, dedupe_mib << 20, trace=run == args.runs))
                    shutil.rmtree(copy.parent)
                peak = runs.pop()[3]
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                read = runs[0][2]
                mb = read / 1e6
                print(f"{batch_records:>13} {dedupe_mib:>10} {mb / wall:>10.1f} "
                      f"{mb / cpu:>9.1f} {mb / recover_wall:>12.1f} "
                      f"{(mb / wall) / (mb / recover_wall):>6.2f} {peak / (1 << 20):>9.1f} "
                      f"{runs[0][4]:>7}", flush=True)
        rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_start
        print(f"peak RSS growth of the process: {rss_growth / 1024:.0f} MiB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
