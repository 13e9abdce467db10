"""Log loading: opening a directory of 10,000 segments, and recovering a 1 GiB active segment.

Two measurements through the embedded ``LogManager``, each the median of ``--runs`` runs, in
wall time and in CPU time of the process (the CPU figure is the one to trust on a shared,
busy machine):

  open 10,000 segments   ``LogManager.open`` after a clean shutdown of one partition whose
                         directory holds ``--segments`` segments (each a ``.log`` with one
                         batch, a ``.index`` and a ``.timeindex``). Lazy indexes: no index file
                         is read or mapped, so this is one open + fstat per ``.log``.
                         Goal: under 1 s.
  recover 1 GiB          ``LogManager.open`` after an unclean shutdown (no marker, no recovery
                         point) of one partition whose only segment is a ``--recovery-mib`` MiB
                         ``.log`` never flushed by us and without indexes: every batch is
                         checked (size, magic, CRC-32C of the whole batch) and both indexes are
                         rebuilt. MB/s = .log bytes / seconds. Goal: >= 500 MB/s. Run for each
                         ``--batch-kib`` (the per-batch Python cost matters for small batches).

The files are written directly (one template batch, base offsets patched: the CRC does not
cover them), so building them takes seconds. The recovered file was just written, so it is in
the page cache: the figure is the CPU cost of recovery, not the disk's read speed.

Producer state (issue 12), through ``PartitionLog.open`` of one partition of
``--producer-mib`` MiB in 64 MiB segments, written by ``PartitionLog.append`` from
``--producers`` producers in turn, one batch each of ``--producer-batch-records`` records of
100-byte values (148: ~16 KiB batches; 9: ~1 KiB): four in five idempotent, one in five
transactional with a marker after each ~1,000 of its records (one marker in ten an ABORT). Closed cleanly, so it has a snapshot per
roll and one at the log end. Six opens, each the median of ``--runs``; MB/s = ``.log`` bytes
/ seconds:

  with snapshot          clean open: the snapshot at the log end is loaded, nothing scanned
  snapshot missing       clean open with every ``.snapshot`` unreadable (0 bytes, as a crash
                         may leave one): they are deleted and the producer state is rebuilt
                         from the whole log (batch headers, plus the marker of each control
                         batch)
  recovery, snapshots    unclean open from recovery point 0, snapshots intact: every batch
                         CRC-checked, indexes and ``.txnindex`` rebuilt, producer state scanned
                         from the log start (no snapshot lies at or below the first segment)
  recovery, no producers the same unclean open of a partition of the same size written
                         without producer ids: plain recovery, for comparison
  unclean, no snapshot   unclean open from a recovery point at the last segment's base (what a
                         LogManager checkpoints) with every ``.snapshot`` deleted: the last
                         segment recovered, producer state rebuilt from the log start
  unclean, no producers  the same open of the partition without producer ids, whose rolls
                         wrote empty snapshots (as Kafka's): the last segment recovered, and
                         scanned for producers from the empty snapshot at its base

Run: ``.venv/bin/python -m benchmarks.bench_recovery [--segments 10000] [--recovery-mib 1024]
[--batch-kib 16 1] [--producer-mib 256] [--producers 1000] [--producer-batch-records 148 9]
[--runs 3]``. Data lives under a
temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stratalog.records.batch import set_base_offset
from stratalog.records.builder import build_batch
from stratalog.server.storage.checkpoints import RECOVERY_POINT_CHECKPOINT_FILE
from stratalog.server.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE, marker_exists
from stratalog.server.storage.files import log_file, offset_index_file, time_index_file
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.partition_log import PartitionLog

BASE_TIMESTAMP_MS = 1_700_000_000_000
TOPIC = "bench"


def template_batch(size_bytes: int) -> tuple[bytearray, int]:
    """One batch of 100-byte-value records, about ``size_bytes`` long; and its record count."""
    count = max(1, size_bytes // 110)
    batch = build_batch(
        [(BASE_TIMESTAMP_MS + i, None, b"x" * 100, ()) for i in range(count)]
    )
    return bytearray(batch), count


def build_segments(partition_dir: Path, segments: int) -> None:
    batch, count = template_batch(1024)
    for index in range(segments):
        base_offset = index * count
        set_base_offset(batch, 0, base_offset)
        log_file(partition_dir, base_offset).write_bytes(batch)
        offset_index_file(partition_dir, base_offset).write_bytes(b"")
        time_index_file(partition_dir, base_offset).write_bytes(b"")


def build_active_segment(partition_dir: Path, size_bytes: int, batch_bytes: int) -> int:
    for path in partition_dir.iterdir():
        path.unlink()
    batch, count = template_batch(batch_bytes)
    chunk = bytearray()
    written = 0
    offset = 0
    with log_file(partition_dir, 0).open("wb") as f:
        while written < size_bytes:
            set_base_offset(batch, 0, offset)
            chunk += batch
            offset += count
            written += len(batch)
            if len(chunk) >= 8 << 20:
                f.write(chunk)
                chunk = bytearray()
        f.write(chunk)
    return written


def fresh_manager(log_dir: Path, segment_bytes: int) -> None:
    with LogManager.open([log_dir], defaults={"log.segment.bytes": str(segment_bytes)}) as m:
        if not m.list_topics():
            m.create_topic(TOPIC, 1)


def time_open(log_dir: Path, *, clean: bool) -> tuple[float, float, LogManager]:
    """(wall seconds, CPU seconds of this process, the manager) of one ``LogManager.open``."""
    if clean:
        assert marker_exists(log_dir)
    else:
        (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        (log_dir / RECOVERY_POINT_CHECKPOINT_FILE).unlink(missing_ok=True)
    # The files were just written: their writeback must not land in the timed open (its first
    # directory fsync would wait for it).
    os.sync()
    started = time.perf_counter()
    started_cpu = time.process_time()
    manager = LogManager.open([log_dir], defaults={"log.segment.bytes": str(1 << 30)})
    return time.perf_counter() - started, time.process_time() - started_cpu, manager


def bench_open(root: Path, segments: int, runs: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of a clean open of ``segments`` segments."""
    log_dir = root / "open"
    fresh_manager(log_dir, 1 << 30)
    partition_dir = log_dir / f"{TOPIC}-0"
    for path in partition_dir.iterdir():
        path.unlink()
    build_segments(partition_dir, segments)
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu, manager = time_open(log_dir, clean=True)
        assert len(manager.get_log(TOPIC, 0).segments) == segments
        assert manager.recovered_segments == 0
        walls.append(wall)
        cpus.append(cpu)
        manager.close()
    shutil.rmtree(log_dir)
    return statistics.median(walls), statistics.median(cpus)


def bench_recovery(
    root: Path, size_bytes: int, batch_bytes: int, runs: int
) -> tuple[float, float]:
    """Median (wall, CPU) MB/s of recovering one active segment of ``size_bytes``."""
    log_dir = root / "recover"
    fresh_manager(log_dir, 1 << 30)
    written = build_active_segment(log_dir / f"{TOPIC}-0", size_bytes, batch_bytes)
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu, manager = time_open(log_dir, clean=False)
        assert manager.recovered_segments == 1
        assert manager.get_log(TOPIC, 0).size_bytes == written
        walls.append(written / wall / 1e6)
        cpus.append(written / cpu / 1e6)
        manager.close()
    shutil.rmtree(log_dir)
    return statistics.median(walls), statistics.median(cpus)


PRODUCER_SEGMENT_BYTES = 64 << 20
RECORDS_PER_TXN = 1000


def build_producer_partition(directory: Path, size_bytes: int, producers: int,
                             batch_records: int, with_producer_ids: bool) -> int:
    """Write ``size_bytes`` of batches through ``PartitionLog.append`` (see the module
    docstring), close cleanly; returns the ``.log`` bytes."""
    value = bytes(range(100))
    records = [(BASE_TIMESTAMP_MS, None, value, ())] * batch_records
    batches_per_marker = max(1, RECORDS_PER_TXN // batch_records)
    log = PartitionLog.open(directory, {"segment.bytes": str(PRODUCER_SEGMENT_BYTES)},
                            time_ms=lambda: BASE_TIMESTAMP_MS)
    sequences = [0] * (producers + 1)
    txn_batches = [0] * (producers + 1)
    markers = 0
    written = 0
    turn = 0
    while written < size_bytes:
        pid = turn % producers + 1
        turn += 1
        if not with_producer_ids:
            batch = build_batch(records)
        else:
            transactional = pid % 5 == 0
            batch = build_batch(records, producer_id=pid, producer_epoch=0,
                                base_sequence=sequences[pid], is_transactional=transactional)
            sequences[pid] += batch_records
        written += log.append(batch).size_bytes
        if with_producer_ids and pid % 5 == 0:
            txn_batches[pid] += 1
            if txn_batches[pid] % batches_per_marker == 0:
                markers += 1
                log.write_txn_marker(pid, 0, 0, commit=markers % 10 != 0)
    log.close()
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def timed_open(directory: Path, **kwargs: object) -> tuple[float, float, PartitionLog]:
    os.sync()  # the writeback of files just written must not land in the timed open
    started = time.perf_counter()
    started_cpu = time.process_time()
    log = PartitionLog.open(directory, {"segment.bytes": str(PRODUCER_SEGMENT_BYTES)},
                            time_ms=lambda: BASE_TIMESTAMP_MS, **kwargs)  # type: ignore[arg-type]
    return time.perf_counter() - started, time.process_time() - started_cpu, log


def restore_snapshots(directory: Path, snapshots: dict[str, bytes], *, how: str) -> None:
    """Put the snapshots back as written (``how`` "intact"), as 0-byte files ("unreadable"),
    or not at all ("deleted")."""
    for path in directory.glob("*.snapshot"):
        path.unlink()
    if how == "deleted":
        return
    for name, data in snapshots.items():
        (directory / name).write_bytes(b"" if how == "unreadable" else data)


def last_segment_base(directory: Path) -> int:
    return max(int(path.name[:20]) for path in directory.glob("*.log"))


def bench_producer_state(
    root: Path, size_bytes: int, producers: int, batch_records: int, runs: int
) -> list[tuple[str, float, float, float]]:
    """(name, wall seconds, CPU seconds, MB) of each open of the module docstring, medians."""
    directory = root / "producers" / "bench-0"
    log_bytes = build_producer_partition(directory, size_bytes, producers, batch_records, True)
    snapshots = {p.name: p.read_bytes() for p in sorted(directory.glob("*.snapshot"))}
    plain = root / "plain" / "bench-0"
    plain_bytes = build_producer_partition(plain, size_bytes, producers, batch_records, False)
    assert last_segment_base(plain) > 0 and (plain / f"{last_segment_base(plain):020d}.snapshot"
                                             ).stat().st_size == 10  # the roll's, empty
    cases = [
        ("with snapshot", directory, "intact", {"had_clean_shutdown": True}),
        ("snapshot missing", directory, "unreadable", {"had_clean_shutdown": True}),
        ("recovery, snapshots", directory, "intact",
         {"had_clean_shutdown": False, "recovery_point": 0}),
        ("recovery, no producers", plain, "", {"had_clean_shutdown": False, "recovery_point": 0}),
        ("unclean, no snapshot", directory, "deleted",
         {"had_clean_shutdown": False, "recovery_point": last_segment_base(directory)}),
        ("unclean, no producers", plain, "",
         {"had_clean_shutdown": False, "recovery_point": last_segment_base(plain)}),
    ]
    results = []
    for name, where, how, kwargs in cases:
        walls, cpus = [], []
        for _ in range(runs):
            if where is directory:
                restore_snapshots(directory, snapshots, how=how)
            wall, cpu, log = timed_open(where, **kwargs)
            if where is directory:
                assert len(log.producer_state.producers) == producers, name
            else:
                assert not log.producer_state.producers, name
            log.close()
            walls.append(wall)
            cpus.append(cpu)
        mb = (log_bytes if where is directory else plain_bytes) / 1e6
        results.append((name, statistics.median(walls), statistics.median(cpus), mb))
    shutil.rmtree(root / "producers")
    shutil.rmtree(root / "plain")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--recovery-mib", type=int, default=1024)
    parser.add_argument("--batch-kib", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--producer-mib", type=int, default=256)
    parser.add_argument("--producers", type=int, default=1000)
    parser.add_argument("--producer-batch-records", type=int, nargs="+", default=[148, 9])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]} on {platform.machine()}, {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory(prefix="stratalog-bench-recovery-") as tmp:
        root = Path(tmp)
        wall, cpu = bench_open(root, args.segments, args.runs)
        print(f"open {args.segments} segments (clean): {wall * 1000:.0f} ms "
              f"(CPU {cpu * 1000:.0f} ms)")
        for batch_kib in args.batch_kib:
            wall_rate, cpu_rate = bench_recovery(
                root, args.recovery_mib << 20, batch_kib << 10, args.runs
            )
            print(f"recover {args.recovery_mib} MiB active segment, {batch_kib} KiB batches "
                  f"(unclean): {wall_rate:.0f} MB/s (per CPU second: {cpu_rate:.0f} MB/s)")
        for batch_records in args.producer_batch_records:
            for name, wall, cpu, mb in bench_producer_state(
                root, args.producer_mib << 20, args.producers, batch_records, args.runs
            ):
                print(f"producer state, {args.producers} producers, {mb:.0f} MB in batches of "
                      f"{batch_records} records, {name}: {wall * 1000:.0f} ms = "
                      f"{mb / wall:.0f} MB/s (CPU {cpu * 1000:.0f} ms = {mb / cpu:.0f} MB/s)")


if __name__ == "__main__":
    main()
