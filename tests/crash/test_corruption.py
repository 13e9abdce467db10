"""Random damage to a log directory after an unclean shutdown, recovered through the LogManager.

Each case writes a partition through the LogManager (several segments, a record model on the
side), closes it, then makes the shutdown unclean (the marker goes, the recovery point
checkpoint is rolled back to the start of the active segment) and damages the directory at
random, in the ways a crash or a bad disk does:

* garbage appended to the active ``.log``, or the active ``.log`` cut at a random byte;
* ``.index``/``.timeindex`` files of recovered segments overwritten with junk, or deleted
  (any segment), or left untrimmed and zero-filled;
* orphan index files, and leftover ``.deleted``/``.cleaned`` files.

After the open the log must hold exactly the batches before the first damaged byte, serve every
one of their records by offset and by timestamp, have nothing after them, and take appends at
the right offset. ``STRATALOG_CORRUPTION_CASES`` sets the number of cases (default 30).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_batches
from stratalog.server.storage.checkpoints import (
    RECOVERY_POINT_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from stratalog.server.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE
from stratalog.server.storage.files import log_file, offset_index_file, time_index_file
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.time_index import TimestampOffset

CASES = int(os.environ.get("STRATALOG_CORRUPTION_CASES", "30"))
T0 = 1_700_000_000_000
TOPIC = "t"


@dataclass(frozen=True)
class Written:
    first_offset: int
    values: tuple[bytes, ...]
    timestamps: tuple[int, ...]
    segment: int  # base offset of the segment holding it
    end_position: int  # position in that segment's .log just after the batch


def write(manager: LogManager, rng: random.Random) -> list[Written]:
    partition_log = manager.get_log(TOPIC, 0)
    written = []
    timestamp = T0
    for _ in range(rng.randint(20, 60)):
        count = rng.randint(1, 4)
        values = tuple(rng.randbytes(rng.randint(0, 250)) for _ in range(count))
        timestamps = []
        for _ in range(count):
            timestamp += rng.randint(0, 3)  # repeats allowed, never backwards
            timestamps.append(timestamp)
        batch = build_batch([(ts, None, v, ()) for ts, v in zip(timestamps, values, strict=True)])
        info = partition_log.append(batch)
        active = partition_log.active_segment
        written.append(
            Written(info.first_offset, values, tuple(timestamps), active.base_offset,
                    active.size_bytes)
        )
    return written


def check(manager: LogManager, kept: list[Written]) -> None:
    partition_log = manager.get_log(TOPIC, 0)
    end = kept[-1].first_offset + len(kept[-1].values) if kept else 0
    assert partition_log.log_end_offset == end
    records = {}
    offset = 0
    while offset < end:
        data = partition_log.read(offset, 1 << 20)
        for _, batch_records in iter_batches(data):
            for record in batch_records:
                records[record.offset] = (record.timestamp, record.value)
        offset = max(records) + 1
    expected = {
        w.first_offset + i: (w.timestamps[i], w.values[i]) for w in kept for i in range(len(w.values))
    }
    assert records == expected
    assert partition_log.read(end, 1 << 20) == b""
    for target in {ts for ts, _ in expected.values()} | {T0 - 1}:
        matches = [(ts, o) for o, (ts, _) in sorted(expected.items()) if ts >= target]
        assert partition_log.offset_for_timestamp(target) == TimestampOffset(*matches[0])
    info = partition_log.append(build_batch([(T0 + 10**6, None, b"after", ())]))
    assert info.first_offset == end


@pytest.mark.parametrize("seed", range(CASES))
def test_random_damage_recovers_to_the_last_valid_batch(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log_dir = tmp_path / "data"
    segment_bytes = rng.choice([2048, 4096, 8192])
    with LogManager.open([log_dir]) as manager:
        manager.create_topic(
            TOPIC, 1, {"segment.bytes": str(segment_bytes),
                       "index.interval.bytes": str(rng.choice([0, 100, 1000]))}
        )
        written = write(manager, rng)
    directory = log_dir / f"{TOPIC}-0"
    active = max(w.segment for w in written)
    # An unclean shutdown whose last flush was at the active segment's start.
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT_FILE).write({(TOPIC, 0): active})
    kept = list(written)
    damage = rng.choice(["garbage", "cut", "indexes", "leftovers"])
    active_log = log_file(directory, active)
    if damage == "garbage":
        with active_log.open("ab") as f:
            f.write(rng.randbytes(rng.randint(1, 2000)))
    elif damage == "cut":
        size = active_log.stat().st_size
        cut = rng.randint(0, size)
        os.truncate(active_log, cut)
        kept = [w for w in written if w.segment != active or w.end_position <= cut]
    elif damage == "indexes":
        bases = sorted({w.segment for w in written})
        for base in rng.sample(bases, rng.randint(1, len(bases))):
            for path in (offset_index_file(directory, base), time_index_file(directory, base)):
                action = rng.choice(["junk", "delete", "zeros", "keep"])
                if base != active and action in ("junk", "zeros"):
                    action = "delete"  # below the recovery point, junk is trusted (Kafka too)
                if action == "junk":
                    path.write_bytes(rng.randbytes(rng.randint(0, 200)))
                elif action == "zeros":
                    path.write_bytes(b"\0" * 1024)  # a preallocated, untrimmed index
                elif action == "delete":
                    path.unlink()
    else:
        offset_index_file(directory, 10**9).write_bytes(rng.randbytes(16))
        time_index_file(directory, 10**9 + 1).write_bytes(b"")
        (directory / f"{active + 10**6:020d}.log.deleted").write_bytes(rng.randbytes(50))
        (directory / f"{active + 10**6:020d}.log.cleaned").write_bytes(rng.randbytes(50))
    with LogManager.open([log_dir]) as manager:
        assert manager.had_clean_shutdown == {log_dir.resolve(): False}
        assert manager.recovered_segments >= 1
        check(manager, kept)
    leftovers = [p.name for p in directory.iterdir()
                 if p.name.endswith((".deleted", ".cleaned", ".swap"))]
    assert leftovers == []
